"""The notice: one event and the users it goes to, as it travels to the server.

Wire form (orjson): `{"event": {"type": str, ...}, "users": [...], "realm_id": int,
"position": int, "notify": {"email": [int], "push": [int]}}`.
`users` holds user ids, or dicts `{"id": int, ...}` whose other keys are that
user's own data (for message events, `flags`). `realm_id` is optional on the
wire for compatibility with Zulip's notices; when present the server delivers
only to queues of that realm, and public channel messages also reach the
realm's `all_public_streams` queues. `position` is the event's place in the
event log (`generation.eventlog`), set once the log row is written; a notice
without one (an ephemeral event, an older producer) is delivered as it comes.
`notify`, only on a message event, names the recipients for whom the
message is notifiable by email and by push (a direct message, a mention, a
channel with notifications on, by their settings: generation/actions/messages/
notify.py); the server notifies those of them who are away
(server/notifications/, docs/notifications.md). Clients never see it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from generation.errors import BadNotice
from generation.events.messages import USER_IDS_WITHOUT_ACCESS_TO_SENDER

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
    # Who may be notified of a message: kind ("email", "push") -> user ids,
    # each one of `users`; None for every other notice.
    notify: Mapping[str, Sequence[int]] | None = None

    def for_users(self, users: list[NoticeUser]) -> Notice:
        """The same notice to `users` only (one shard's part of it); `notify`
        keeps only those users."""
        notify = self.notify
        if notify is not None:
            kept = {user if isinstance(user, int) else user["id"] for user in users}
            notify = {kind: [u for u in ids if u in kept] for kind, ids in notify.items()}
            if not any(notify.values()):
                notify = None
        return dataclasses.replace(self, users=users, notify=notify)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


NOTIFY_KINDS = ("email", "push")


def make_notice(
    event: Mapping[str, Any],
    users: Sequence[object],
    realm_id: object = None,
    notify: object = None,
) -> Notice:
    """Validate the parts of a notice; raises `BadNotice` saying what is wrong.
    The notice holds copies of `event` and of the users' objects: the caller
    may change its own afterwards. `realm_id`: an int or None (declared
    `object` so that anything else is this function's `BadNotice`, not the
    compiled module's TypeError)."""
    return _validated(event, users, realm_id, notify, None, copy=True)


def _validated(
    event: object,
    users: object,
    realm_id: object,
    notify: object,
    position: object,
    *,
    copy: bool,
) -> Notice:
    """`make_notice`'s checks; `copy` False for parts this module decoded
    itself, which nobody else holds. A notice is delivered once per arrival
    and a channel message names every subscriber, so the common shapes (a
    dict, a list, ints, `{"id", "flags"}` objects) are tested by their exact
    type first and the abstract ones only for the rest."""
    if type(event) is not dict and not isinstance(event, Mapping):
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
    without = event.get(USER_IDS_WITHOUT_ACCESS_TO_SENDER)
    if without is not None and (
        not isinstance(without, list) or not all(_is_int(user_id) for user_id in without)
    ):
        raise BadNotice(f"event's {USER_IDS_WITHOUT_ACCESS_TO_SENDER!r} is not a list of user ids")
    if type(users) is not list and (
        isinstance(users, str | bytes) or not isinstance(users, Sequence)
    ):
        raise BadNotice("users is not a list")
    if realm_id is not None and not _is_int(realm_id):
        raise BadNotice("realm_id is not an integer")
    # Keys of a user's object that its own data may not set: the event's
    # (its type above all); "id" is the user's.
    taken = event.keys() | {"type"}
    taken.discard("id")
    seen: set[int] = set()
    clean: list[NoticeUser] = []
    for index, user in enumerate(users):
        entry: NoticeUser
        if type(user) is int:
            user_id = user
            entry = user
        elif type(user) is dict or (not isinstance(user, int) and isinstance(user, Mapping)):
            raw_id = user.get("id")
            if not isinstance(raw_id, int) or isinstance(raw_id, bool):
                raise BadNotice(f"users[{index}] has no integer 'id'")
            user_id = raw_id
            flags = user.get("flags")
            if "flags" in user and (
                not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags)
            ):
                raise BadNotice(f"users[{index}].flags is not a list of strings")
            if not taken.isdisjoint(user.keys()):
                shadowed = sorted(taken.intersection(user.keys()))
                raise BadNotice(
                    f"users[{index}] would override the event's {', '.join(map(repr, shadowed))}"
                )
            entry = dict(user) if copy or type(user) is not dict else user
        elif _is_int(user):  # an int subclass
            user_id = int(user)
            entry = user_id
        else:
            raise BadNotice(f"users[{index}] is neither a user id nor an object with 'id'")
        if user_id in seen:
            continue
        seen.add(user_id)
        clean.append(entry)
    checked_notify = _check_notify(notify, event_type, seen)
    # Last: a notice with other faults as well reports those first.
    if position is not None and (
        not isinstance(position, int) or isinstance(position, bool) or position <= 0
    ):
        raise BadNotice("position is not a positive integer")
    return Notice(
        dict(event) if copy or type(event) is not dict else event,
        clean,
        realm_id,  # type: ignore[arg-type]  # an int or None, checked above
        position,
        checked_notify,
    )


def _check_notify(notify: object, event_type: str, users: set[int]) -> dict[str, list[int]] | None:
    """`notify` as `Notice` keeps it: None, or each kind's ids, every one a
    recipient, none twice."""
    if notify is None:
        return None
    if event_type != "message":
        raise BadNotice("only a message event may carry 'notify'")
    if not isinstance(notify, Mapping):
        raise BadNotice("notify is not an object")
    clean: dict[str, list[int]] = {}
    for kind, ids in notify.items():
        if kind not in NOTIFY_KINDS:
            raise BadNotice(f"notify has an unknown kind {kind!r} (known: email, push)")
        if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
            raise BadNotice(f"notify.{kind} is not a list")
        if not all(_is_int(u) for u in ids):
            raise BadNotice(f"notify.{kind} holds something other than user ids")
        strangers = sorted(set(ids) - users)
        if strangers:
            raise BadNotice(f"notify.{kind} names users the notice is not for: {strangers[:10]}")
        clean[kind] = sorted(set(ids))
    return clean if any(clean.values()) else None


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


def parse_notice(raw: bytes | str) -> Notice:
    """Decode and validate a notice from its wire form."""
    data = _decode(raw)
    return _validated(
        data["event"],
        data["users"],
        data.get("realm_id"),
        data.get("notify"),
        data.get("position"),
        copy=False,
    )


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
    return _validated(
        data["event"],
        own,
        data.get("realm_id"),
        None,
        data.get("position") if position is None else position,
        copy=False,
    )


def encode_notice(notice: Notice) -> bytes:
    """The wire form of a validated notice; `BadNotice` if a value cannot be
    encoded as JSON (a set, an arbitrary object, an integer beyond 64 bits).
    orjson encodes datetimes, UUIDs and dataclasses; the client gets strings."""
    body: dict[str, Any] = {"event": notice.event, "users": notice.users}
    if notice.realm_id is not None:
        body["realm_id"] = notice.realm_id
    if notice.position is not None:
        body["position"] = notice.position
    if notice.notify is not None:
        body["notify"] = notice.notify
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:
        raise BadNotice(f"notice is not JSON-encodable: {exc}") from exc
