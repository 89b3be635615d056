"""`narrow`: a filter on the message events a queue receives.

A narrow only ever removes events from what the user would get anyway; it never
widens delivery to messages the user was not sent (docs/architecture.md,
"Deliberate differences from Zulip": Zulip's realm index let narrowed queues see public
channels the user had not subscribed to).

Supported terms (Zulip's narrow predicate, `zerver/lib/narrow_predicate.py`): `channel`/`stream`,
`topic`, `exact-topic` (case-sensitive), `sender`, `is:dm`/`is:private`, `is:starred`, `is:unread`,
`is:mentioned`/`is:alerted`, `is:resolved`. All terms must match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queues.errors import BadNarrow

NarrowTerm = tuple[str, str]
Narrow = tuple[NarrowTerm, ...]

# Zulip marks a resolved topic by prefixing its name with this.
RESOLVED_TOPIC_PREFIX = "\u2714 "

_OPERATORS = frozenset({"channel", "stream", "topic", "exact-topic", "sender", "is"})
_IS_OPERANDS = frozenset({"dm", "private", "starred", "unread", "mentioned", "alerted", "resolved"})
# A bounded narrow keeps per-event filtering cheap; real clients use one or two terms.
MAX_TERMS = 20
MAX_OPERAND_LENGTH = 1000


def parse_narrow(raw: object) -> Narrow:
    """Validate a decoded `narrow` parameter: a list of [operator, operand] pairs.

    Raises `BadNarrow` with the message a client is shown.
    """
    if not isinstance(raw, list):
        raise BadNarrow("narrow is not a list")
    if len(raw) > MAX_TERMS:
        raise BadNarrow(f"narrow has more than {MAX_TERMS} terms")
    terms: list[NarrowTerm] = []
    for index, term in enumerate(raw):
        if (
            not isinstance(term, list)
            or len(term) != 2
            or not all(isinstance(part, str) for part in term)
        ):
            raise BadNarrow(f"narrow[{index}] is not a list of two strings")
        operator, operand = term[0], term[1]
        if operator not in _OPERATORS:
            raise BadNarrow(f"Operator {operator} not supported.")
        if len(operand) > MAX_OPERAND_LENGTH:
            raise BadNarrow(f"narrow[{index}] operand is too long")
        if operator == "is" and operand not in _IS_OPERANDS:
            raise BadNarrow(f"Operand {operand} not supported.")
        terms.append((operator, operand))
    return tuple(terms)


def _topic(message: Mapping[str, Any]) -> str:
    topic = message.get("subject", message.get("topic", ""))
    return topic if isinstance(topic, str) else ""


def narrow_matches(narrow: Narrow, message: Mapping[str, Any], flags: Sequence[str]) -> bool:
    """Whether a message (a client message dict) with this user's `flags` passes."""
    for operator, operand in narrow:
        is_stream = message.get("type") == "stream"
        if operator in ("channel", "stream"):
            name = message.get("display_recipient")
            if not is_stream or not isinstance(name, str) or name.lower() != operand.lower():
                return False
        elif operator == "topic":
            if not is_stream:
                return False
            topic = _topic(message).lower()
            wanted = operand.lower()
            if topic != wanted and wanted not in topic.split():
                return False
        elif operator == "exact-topic":
            if not is_stream or _topic(message) != operand:
                return False
        elif operator == "sender":
            sender = message.get("sender_email")
            if not isinstance(sender, str) or sender.lower() != operand.lower():
                return False
        elif operator == "is" and not _is_matches(operand, message, flags, is_stream=is_stream):
            return False
    return True


def _is_matches(
    operand: str, message: Mapping[str, Any], flags: Sequence[str], *, is_stream: bool
) -> bool:
    if operand in ("dm", "private"):
        return message.get("type") == "private"
    if operand == "starred":
        return "starred" in flags
    if operand == "unread":
        return "read" not in flags
    if operand in ("mentioned", "alerted"):
        return "mentioned" in flags
    if operand == "resolved":
        return is_stream and _topic(message).startswith(RESOLVED_TOPIC_PREFIX)
    raise AssertionError(f"unvalidated operand {operand}")
