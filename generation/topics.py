"""The empty topic and the name clients without it see (Zulip 10, feature
level 334, and 370 for "(no topic)").

A channel message may be sent to the empty topic "" when the realm's
`mandatory_topics` is off. Clients that declared the `empty_topic_name`
capability (or pass `allow_empty_topic_name` to the history endpoints) get
"" as it is; the others get `EMPTY_TOPIC_DISPLAY_NAME` in its place, the
value register reports as `realm_empty_topic_display_name`. Going the other
way, a topic a client sends that is the display name or Zulip's older
"(no topic)" names the empty topic.

Zulip translates the display name into the user's language in register's
state; eventq has no translations, so every client sees the English name
(which is also what Zulip's live events carry).
"""

from __future__ import annotations

# Zulip's Message.EMPTY_TOPIC_FALLBACK_NAME. queues.specialize holds the
# same text (it imports only the standard library);
# tests/queues/test_empty_topic.py checks that they agree.
EMPTY_TOPIC_DISPLAY_NAME = "general chat"
# The client capability of clients that take the empty topic as "".
EMPTY_TOPIC_CAPABILITY = "empty_topic_name"
# What clients before Zulip 10 showed for a topic-less message; since
# feature level 370 it names the empty topic too.
NO_TOPIC = "(no topic)"


def topic_from_client(topic: str) -> str:
    """The topic a client means: "" for the display name or "(no topic)"
    (surrounding whitespace aside), else `topic` unchanged (the caller
    still normalizes and checks it)."""
    stripped = topic.strip()
    if stripped in (EMPTY_TOPIC_DISPLAY_NAME, NO_TOPIC):
        return ""
    return topic


def topic_for_client(topic: str, allow_empty_topic_name: bool) -> str:
    """A channel message's stored topic as a client sees it."""
    if topic == "" and not allow_empty_topic_name:
        return EMPTY_TOPIC_DISPLAY_NAME
    return topic
