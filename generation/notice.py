"""The notice: one event and the users it goes to, as it travels to the server.

Wire form (orjson): `{"event": {"type": str, ...}, "users": [...], "realm_id": int,
"position": int}`.
`users` holds user ids, or dicts `{"id": int, ...}` whose other keys are that
user's own data (for message events, `flags`). `realm_id` is optional on the
wire for compatibility with Zulip's notices; when present the server delivers
only to queues of that realm, and public channel messages also reach the
realm's `all_public_streams` queues. `position` is the event's place in the
event log (`generation.eventlog`), set once the log row is written; a notice
without one (an ephemeral event, an older producer) is delivered as it comes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from generation.errors import BadNotice

NoticeUser = int | dict[str, Any]

# The AMQP header carrying a notice's unique id, set once by the publisher and
# kept across its retry: the consumer drops a second copy by it.
NOTICE_ID_HEADER = "x-eventq-notice-id"
# When the producer published it: integer microseconds since the epoch (AMQP
# tables carry no floats).
PUBLISHED_HEADER = "x-eventq-published-us"

# An event type is an identifier, not free text; Zulip's longest is 31 chars.
MAX_EVENT_TYPE_LENGTH = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Notice:
    """A validated notice. `users` has no duplicate ids (first one wins)."""

    event: dict[str, Any]
    users: list[NoticeUser]
    realm_id: int | None = None
    position: int | None = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def make_notice(
    event: Mapping[str, Any], users: Sequence[object], realm_id: int | None = None
) -> Notice:
    """Validate the parts of a notice; raises `BadNotice` saying what is wrong."""
    if not isinstance(event, Mapping):
        raise BadNotice("event is not an object")
    event_type = event.get("type")
    if not isinstance(event_type, str) or not event_type:
        raise BadNotice("event has no string 'type'")
    if len(event_type) > MAX_EVENT_TYPE_LENGTH:
        raise BadNotice(f"event type is longer than {MAX_EVENT_TYPE_LENGTH} characters")
    if "id" in event:
        raise BadNotice("event must not carry an 'id': ids are assigned per queue")
    if event_type == "message" and not isinstance(event.get("message"), Mapping):
        raise BadNotice("a message event needs a 'message' object")
    if isinstance(users, str | bytes) or not isinstance(users, Sequence):
        raise BadNotice("users is not a list")
    if realm_id is not None and not _is_int(realm_id):
        raise BadNotice("realm_id is not an integer")
    seen: set[int] = set()
    clean: list[NoticeUser] = []
    for index, user in enumerate(users):
        entry: NoticeUser
        if isinstance(user, int) and not isinstance(user, bool):
            user_id = user
            entry = user
        elif isinstance(user, Mapping):
            raw_id = user.get("id")
            if not isinstance(raw_id, int) or isinstance(raw_id, bool):
                raise BadNotice(f"users[{index}] has no integer 'id'")
            user_id = raw_id
            if "flags" in user and (
                not isinstance(user["flags"], list)
                or not all(isinstance(flag, str) for flag in user["flags"])
            ):
                raise BadNotice(f"users[{index}].flags is not a list of strings")
            # A user's own data is added to their copy of the event; it may
            # not replace what the event says (its type, above all).
            shadowed = sorted(
                key for key in user if key != "id" and (key in event or key == "type")
            )
            if shadowed:
                raise BadNotice(
                    f"users[{index}] would override the event's {', '.join(map(repr, shadowed))}"
                )
            entry = dict(user)
        else:
            raise BadNotice(f"users[{index}] is neither a user id nor an object with 'id'")
        if user_id in seen:
            continue
        seen.add(user_id)
        clean.append(entry)
    return Notice(dict(event), clean, realm_id)


def _decode(raw: bytes | str) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadNotice(f"notice is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadNotice("notice is not an object")
    if "event" not in data or "users" not in data:
        raise BadNotice("notice needs 'event' and 'users'")
    return data


def _with_position(notice: Notice, data: Mapping[str, Any]) -> Notice:
    position = data.get("position")
    if position is None:
        return notice
    if not _is_int(position) or position <= 0:
        raise BadNotice("position is not a positive integer")
    return dataclasses.replace(notice, position=position)


def parse_notice(raw: bytes | str) -> Notice:
    """Decode and validate a notice from its wire form."""
    data = _decode(raw)
    return _with_position(make_notice(data["event"], data["users"], data.get("realm_id")), data)


def parse_notice_for(raw: bytes | str, user_id: int, position: int | None = None) -> Notice:
    """`parse_notice` as one user's queue needs it: `users` holds only that
    user's entry, or nothing when the notice does not name them. The event
    and that entry are validated as `parse_notice` does; the other entries
    are not looked at (a channel message names hundreds of users: validating
    and copying them all is most of the cost of reading the log for one).
    `position`: the log's, for a notice read from it."""
    data = _decode(raw)
    users = data["users"]
    if isinstance(users, str | bytes) or not isinstance(users, Sequence):
        raise BadNotice("users is not a list")
    own: list[object] = []
    for user in users:
        if (
            user == user_id
            if isinstance(user, int)
            else (isinstance(user, Mapping) and user.get("id") == user_id)
        ):
            own.append(user)
            break
    notice = make_notice(data["event"], own, data.get("realm_id"))
    if position is None:
        return _with_position(notice, data)
    return Notice(notice.event, notice.users, notice.realm_id, position)


def encode_notice(notice: Notice) -> bytes:
    """The wire form of a validated notice; `BadNotice` if a value cannot be
    encoded as JSON (a set, an arbitrary object, an integer beyond 64 bits).
    orjson encodes datetimes, UUIDs and dataclasses; the client gets strings."""
    body: dict[str, Any] = {"event": notice.event, "users": notice.users}
    if notice.realm_id is not None:
        body["realm_id"] = notice.realm_id
    if notice.position is not None:
        body["position"] = notice.position
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise BadNotice(f"notice is not JSON-encodable: {exc}") from exc
