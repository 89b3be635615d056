"""The `narrow` of message history (`GET /messages`, `GET
/messages/matches_narrow`): Zulip's search terms, checked and put in one form.

A narrow arrives JSON-encoded in either of Zulip's forms: a list of objects
`{"operator": ..., "operand": ..., "negated": false}` (other keys ignored),
or the legacy list of `[operator, operand]` string pairs. Each term keeps
its canonical operator (Zulip's renames: `stream` is `channel`, `streams`
is `channels`, `pm-with` is `dm`, `private` as an `is` operand is `dm`)
and an operand of the type the operator takes. What the operand names (a
channel, a user, a message) is looked up in server/database/history.py,
which also makes each term's SQL condition.

The operators, and what a message must be to match:

- `channel`: in the channel (a name, any case, or an id);
- `channels`: `public`: in a public channel;
- `topic`: in a channel topic of that name (any case); "general chat", the empty
  topic's display name, is the empty topic "";
- `dm`: a direct message among exactly these users and the reader (e-mails,
  comma-separated, or a list of ids); `dm-including`: a direct message the
  reader and that user are in; `group-pm-with`: such a group message (three
  or more);
- `sender`: sent by the user (an e-mail, an id, or `me`);
- `id`: that message;
- `is`: `dm`, `starred`, `mentioned`, `alerted` (the reader's
  `has_alert_word` flag), `unread`, `resolved` (a topic starting with "✔ ");
- `has`: `reaction`, `link`, `image` (in the rendered content),
  `attachment` (eventq stores no uploads: no message);
- `in`: `home` (not in a channel the reader muted), `all`;
- `search`: PostgreSQL full-text search of the topic and content;
- `near`: no condition (a client's hint for the anchor); `with`: the
  conversation (channel and topic, or direct message) of that message.

Any term may be negated (`near` and `with` ignore it), as in Zulip; a narrow
that asks for a channel message and a direct message at once is refused.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from generation.topics import EMPTY_TOPIC_DISPLAY_NAME
from server.errors import ApiError

# The largest id a bigint column holds (the bound server/http/params.py puts
# on integer parameters, which this room may not import).
INT_MAX = 2**63 - 1

# The most terms a narrow may have, and the longest operand string: real
# clients use a handful; each term is a condition of one query.
MAX_TERMS = 20
MAX_OPERAND_CHARS = 1000
# The most users a `dm` term may name (Zulip's group DMs are bounded by the
# recipients a message may have).
MAX_DM_USERS = 1000

Operand = str | int | list[int]

_ALIASES = {
    "stream": "channel",
    "streams": "channels",
    "pm-with": "dm",
    "pm_with": "dm",
    "group_pm_with": "group-pm-with",
    "subject": "topic",
}
_OPERATORS = frozenset(
    {
        "channel",
        "channels",
        "topic",
        "dm",
        "dm-including",
        "group-pm-with",
        "sender",
        "id",
        "is",
        "has",
        "in",
        "search",
        "near",
        "with",
    }
)
# Every operator a narrow may name, aliases included.
OPERATOR_NAMES = _OPERATORS | set(_ALIASES)
_IS_ALIASES = {"private": "dm"}
IS_OPERANDS = frozenset({"dm", "starred", "mentioned", "alerted", "unread", "resolved"})
_WORD_OPERANDS = {
    "is": IS_OPERANDS,
    "has": frozenset({"reaction", "link", "image", "attachment"}),
    "in": frozenset({"home", "all"}),
    "channels": frozenset({"public"}),
}
# Operators whose operand names users: an id, a list of ids (dm) or e-mails.
USER_OPERATORS = frozenset({"dm", "dm-including", "group-pm-with", "sender"})
# Operators that take a message id.
ID_OPERATORS = frozenset({"id", "near", "with"})
# Operators whose `negated` is ignored, as in Zulip.
_NOT_NEGATED = frozenset({"near", "with"})


@dataclasses.dataclass(frozen=True, slots=True)
class Term:
    operator: str
    operand: Operand
    negated: bool = False


def bad_narrow(description: str) -> ApiError:
    """Zulip's error for a term the server cannot apply."""
    return ApiError(f"Invalid narrow operator: {description}", "BAD_NARROW")


def _invalid(index: int, why: str) -> ApiError:
    """Zulip's error for a term of the wrong shape."""
    return ApiError(f"Invalid narrow[{index}]: Value error, {why}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _message_id(index: int, operator: str, operand: object) -> int:
    """A message id operand: a JSON integer, or a string of digits."""
    if isinstance(operand, str) and re.fullmatch(r"[0-9]{1,19}", operand.strip()):
        operand = int(operand.strip())
    if not _is_int(operand) or not 0 < operand <= INT_MAX:  # type: ignore[operator]
        if operator == "with":
            raise bad_narrow("Invalid 'with' operator")
        raise bad_narrow("Invalid message ID")
    assert isinstance(operand, int)
    return operand


def _user_operand(index: int, operator: str, operand: object) -> Operand:
    ids = operand if isinstance(operand, list) else [operand]
    for user_id in ids:
        if isinstance(user_id, int) and not 0 < user_id <= INT_MAX:
            raise bad_narrow(f"unknown user {user_id}")
    if _is_int(operand):
        assert isinstance(operand, int)
        if operator == "dm":
            return [operand]
        return operand
    if isinstance(operand, list) and operator == "dm":
        if len(operand) > MAX_DM_USERS:
            raise _invalid(index, f"operand has more than {MAX_DM_USERS} users")
        for k, user_id in enumerate(operand):
            if not _is_int(user_id):
                raise _invalid(index, f"operand[{k}] is not an integer")
        return list(operand)
    if isinstance(operand, str):
        return operand
    if operator == "dm":
        raise _invalid(index, "operand is not a string or an integer list")
    raise _invalid(index, "operand is not a string or integer")


def _operand(index: int, operator: str, operand: object) -> Operand:
    if isinstance(operand, str):
        if len(operand) > MAX_OPERAND_CHARS:
            raise _invalid(index, f"the operand is longer than {MAX_OPERAND_CHARS} characters")
        if "\x00" in operand:
            # PostgreSQL's text holds no NUL: no message could match it.
            raise _invalid(index, "the operand holds a NUL character")
    if operator in ID_OPERATORS:
        return _message_id(index, operator, operand)
    if operator in USER_OPERATORS:
        return _user_operand(index, operator, operand)
    if operator == "channel" and _is_int(operand):
        assert isinstance(operand, int)
        if not 0 < operand <= INT_MAX:
            raise bad_narrow(f"unknown channel {operand}")
        return operand
    if operator == "channel" and not isinstance(operand, str):
        raise _invalid(index, "operand is not a string or integer")
    if not isinstance(operand, str):
        raise _invalid(index, "operand is not a string")
    if operator == "is":
        operand = _IS_ALIASES.get(operand, operand)
    if operator in _WORD_OPERANDS and operand not in _WORD_OPERANDS[operator]:
        what = "channels operand" if operator == "channels" else f"'{operator}' operand"
        raise bad_narrow(f"unknown {what} {operand}")
    if operator == "search" and not operand.strip():
        raise _invalid(index, "operand cannot be blank.")
    if operator == "topic" and operand == EMPTY_TOPIC_DISPLAY_NAME:
        # Zulip's clients name the empty topic by its display name.
        return ""
    return operand


def _parts(index: int, term: object) -> tuple[object, object, object]:
    """(operator, operand, negated) of a term in either form."""
    if isinstance(term, list):
        if len(term) != 2 or not all(isinstance(part, str) for part in term):
            raise _invalid(index, "element is not a string pair")
        return term[0], term[1], False
    if isinstance(term, dict):
        if term.get("operator") is None:
            raise _invalid(index, "operator is missing")
        if term.get("operand") is None:
            raise _invalid(index, "operand is missing")
        return term["operator"], term["operand"], term.get("negated", False)
    raise _invalid(index, "dict or list required")


def parse_narrow(raw: Any) -> list[Term]:
    """The terms of a decoded `narrow`; `ApiError` saying what is wrong."""
    if not isinstance(raw, list):
        raise ApiError("narrow is not a list")
    if len(raw) > MAX_TERMS:
        raise ApiError(f"narrow has more than {MAX_TERMS} terms")
    terms = []
    for index, term in enumerate(raw):
        operator, operand, negated = _parts(index, term)
        if not isinstance(operator, str):
            raise _invalid(index, "operator is not a string")
        if not isinstance(negated, bool):
            raise _invalid(index, "negated is not a boolean")
        operator = _ALIASES.get(operator, operator)
        if operator not in _OPERATORS:
            raise bad_narrow(f"unknown operator {operator}")
        negated = negated and operator not in _NOT_NEGATED
        terms.append(Term(operator, _operand(index, operator, operand), negated))
    _check_combination(terms)
    return terms


_CHANNEL_TERMS = frozenset({"channel", "channels", "topic"})
_DIRECT_TERMS = frozenset({"dm", "dm-including", "group-pm-with"})


def _check_combination(terms: list[Term]) -> None:
    """Zulip's refusals of terms no message could meet together."""
    if sum(t.operator == "with" for t in terms) > 1:
        raise ApiError(
            "Invalid narrow operator combination: Duplicate 'with' operators.", "BAD_NARROW"
        )
    channel = any(
        (t.operator in _CHANNEL_TERMS and not t.negated)
        or (t.operator == "is" and t.operand == "dm" and t.negated)
        for t in terms
    )
    direct = any(
        (t.operator in _DIRECT_TERMS or (t.operator == "is" and t.operand == "dm"))
        and not t.negated
        for t in terms
    )
    if channel and direct:
        raise bad_narrow("No message can be both a channel message and direct message")
