"""The long poll of an existing queue, whichever path serves it: the lean
`poll.LeanPoll` (the common case, without tornado.web) or the full
`events.EventsHandler` (sessions, anything unusual about a request). Both
run what is here and differ only in how they write an answer, so that the
answers, errors, logs, metrics and delivery log are the same whichever path
served a poll.

A poll: `begin_poll` (acknowledge, restart the idle clock, displace a
request still parked), then an answer at once (`dont_block`) or a
`ParkedPoll` parked on the queue until a wake-up; `ParkedPoll.answer_for`
says what a woken poll answers. A refused poll is told to the observers by
`poll_refused` (or `poll_failed`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Mapping
from typing import Literal

from queues.client import ClientDescriptor, WakeReason
from queues.errors import QueueError
from queues.event_queue import Item
from server.errors import ApiError, bad_queue_id, from_queue_error
from server.handlers.base import owned_queue
from server.handlers.headers import shutting_down
from server.http.auth import AuthUser
from server.interface import PollApi

log = logging.getLogger("eventq.events")

# Longer than any id we issue, yet short enough for a log line. A longer one
# is still just an unknown queue: the client must re-register, not retry (as
# it would on BAD_REQUEST).
MAX_QUEUE_ID = 1000

# The extra field of the answer to a poll a newer one displaced.
DISPLACED: Mapping[str, bool] = {"displaced": True}


def poll_outcome(items: list[Item]) -> str:
    """How a poll that answered `items` ended, for the log and the metrics."""
    if not items:
        return "empty"
    for _, payload in items:
        if payload.type != "heartbeat":
            return "events"
    return "heartbeat"


def note_end(server: PollApi, client: ClientDescriptor) -> None:
    """Remember the stream position `client`'s queue ended at (the server
    calls this from its queue end hook)."""
    # Its own event included: a queue ends after that event's delivery.
    client.ended_at_position = server.eventlog.handed


def answer_position(
    server: PollApi, client: ClientDescriptor, extra: Mapping[str, bool] | None
) -> int | None:
    """The stream position an events answer gives: the queue holds every
    event up to it for the client. A queue that ended (a request parked on it
    answered after a DELETE) got nothing after its end, whatever came since.
    None (no position in the answer) for a displaced poll: it carries none of
    the queue's events, which the newer poll gets."""
    if extra is DISPLACED:
        return None
    ended = client.ended_at_position
    return server.eventlog.position if ended is None else ended


def begin_poll(
    server: PollApi,
    user: AuthUser,
    queue_id: str,
    last_event_id: int | None,
    path: Literal["lean", "full", "stream"],
) -> ClientDescriptor:
    """A poll of an existing queue, served by `path`: acknowledge what the
    client has, restart the queue's idle clock and answer a request still
    parked on it (which is told it was displaced)."""
    if last_event_id is None:
        raise ApiError("Missing 'last_event_id' argument")
    client = owned_queue(server, queue_id, user)
    client.event_queue.prune(last_event_id)
    registry = server.registry
    now = server.clock()
    registry.touch(client, now)
    registry.displace(client, now)
    server.poll_paths[path] += 1
    return client


def refuse_if_stopping(server: PollApi) -> None:
    """Refuse a poll about to park once shutdown has begun (it began while
    the request was being authenticated): the 503 of `shutting_down`, but
    without its `Connection: close`, which this answer has never carried
    (adding it changes what clients see, a decision of its own)."""
    if server.stopping:
        raise shutting_down(close=False)


def poll_failed(server: PollApi, user: AuthUser, queue_id: str | None, code: str) -> None:
    """Tell the observers of a poll of `queue_id` refused with `code`."""
    server.observe_poll_failed(user.user_id, user.realm_id, queue_id, code)


def poll_refused(
    server: PollApi,
    user: AuthUser,
    query: Mapping[str, list[bytes]],
    exc: ApiError | QueueError,
) -> None:
    """`poll_failed` for a poll refused with `exc`, naming the queue id as
    sent in `query` (cut at the longest an id may be), so that the log shows
    what clients ask for."""
    code = exc.code if isinstance(exc, ApiError) else from_queue_error(exc).code
    queue_id = query.get("queue_id", [b""])[-1][:MAX_QUEUE_ID]
    poll_failed(server, user, queue_id.decode("utf-8", "replace") or None, code)


class ParkedPoll(abc.ABC):
    """A poll parked on its queue, as the queue's `queues.client.Waiter`,
    with a heartbeat deadline (`longpoll.Heartbeats`). The registry detaches
    and wakes it; it is answered in its turn among the woken requests
    (`longpoll.AnswerSlices`), after those woken before it.

    A poll that finds events waiting parks too and takes its turn at once:
    answered then with what the queue holds, including what arrived
    meanwhile, or for whatever woke it before its turn (a later event, a
    newer poll, the queue's end).

    A subclass says what answering is (`_answer`) and calls `_leave` when
    its client goes away; `_done` is set once neither needs doing.
    """

    __slots__ = ("_client", "_done", "_heartbeat", "_parked_at", "_ready", "_woken", "server")

    def __init__(self, server: PollApi) -> None:
        self.server = server
        self._client: ClientDescriptor | None = None
        self._parked_at = 0.0
        # The tick of the pending heartbeat (`server.heartbeats`).
        self._heartbeat: int | None = None
        # Answered, or its client left.
        self._done = False
        # Whether it found events waiting (and parked only until its turn),
        # and then what woke it before that turn, if anything did.
        self._ready = False
        self._woken: WakeReason | None = None

    def park(self, client: ClientDescriptor) -> None:
        """Park on `client`'s queue (`begin_poll` displaced any request
        parked there): until a wake-up or the heartbeat if the queue is
        empty, else until its turn."""
        server = self.server
        self._client = client
        self._parked_at = parked_at = server.clock()
        server.registry.park(client, self, parked_at)
        if not self._unread(client):
            self._start_heartbeat(client)
        else:
            self._ready = True
            server.answer_slices.add(self._take_turn, "events")

    def _unread(self, client: ClientDescriptor) -> bool:
        """Whether the queue holds events this poll is to answer with."""
        return not client.event_queue.empty()

    def wake(self, reason: WakeReason) -> None:
        """`queues.client.Waiter`: the registry detached this poll. It is
        answered in its turn: the one it has already (it found events
        waiting), else the next one."""
        self._woken_heartbeat(reason)
        if self._ready:
            self._woken = reason
        else:
            self.server.answer_slices.add(self._answer, reason)

    def _take_turn(self, reason: WakeReason) -> None:
        """The turn of a poll that found events waiting: answered for what
        woke it meanwhile, or taken off the queue and answered with its
        events."""
        if self._done:
            return
        woken = self._woken
        if woken is None:
            client = self._client
            assert client is not None
            assert client.waiter is self  # only a wake-up or a close detaches it
            server = self.server
            server.registry.unpark(client, self, server.clock())
            woken = reason
        self._answer(woken)

    @abc.abstractmethod
    def _answer(self, reason: WakeReason) -> None:
        """Answer the poll, woken for `reason` (`answer_for` says with what);
        nothing if it is `_done`."""

    def answer_for(
        self, reason: WakeReason
    ) -> tuple[list[Item], str, float, str | None, Mapping[str, bool] | None]:
        """What the poll answers, woken for `reason`: its events, how the poll
        ended (for the log and the metrics), the seconds it waited, and the
        answer's queue id and extra fields.

        Its queue overflowed: raises BAD_EVENT_QUEUE_ID (reason "overflow"):
        the queue is gone. A newer poll displaced it: nothing, with the queue
        id and `"displaced": true`. Otherwise ("events", "heartbeat",
        "deleted") whatever the queue holds, or a heartbeat when the
        heartbeat woke it and nothing came; the queue id only for a poll that
        waited for events (one that found them waiting is answered as one
        answered at once is)."""
        client = self._client
        assert client is not None
        server = self.server
        if reason == "overflow":
            raise bad_queue_id(client.queue_id, "overflow")
        waited = server.clock() - self._parked_at
        if reason == "displaced":
            return [], "displaced", waited, client.queue_id, DISPLACED
        items = client.event_queue.contents()
        if not items and reason == "heartbeat":
            items = server.registry.heartbeat_items(client)
        return (
            items,
            "deleted" if reason == "deleted" else poll_outcome(items),
            waited,
            None if self._ready else client.queue_id,
            None,
        )

    def _leave(self) -> None:
        """Its client went away: off its queue (the queue and its events
        stay), no heartbeat, no answer."""
        self._done = True
        client = self._client
        if client is not None and client.waiter is self:
            server = self.server
            if server.registry.unpark(client, self, server.clock()):
                log.debug("client disconnected from queue %s", client.queue_id)
        self._cancel_heartbeat()

    def _start_heartbeat(self, client: ClientDescriptor) -> None:
        self._heartbeat = self.server.heartbeats.start(self, client)

    def _woken_heartbeat(self, reason: WakeReason) -> None:
        """Its heartbeat once woken: no longer to come (an event stream's
        keeps coming, `stream.EventStream`)."""
        self._cancel_heartbeat()

    def _cancel_heartbeat(self) -> None:
        tick = self._heartbeat
        if tick is not None:
            self._heartbeat = None
            self.server.heartbeats.cancel(tick, self)


# What an awaited parked poll learns when it resumes: why the queue woke it,
# or that its own connection went away.
Outcome = WakeReason | Literal["disconnected"]


class ParkedRequest(ParkedPoll):
    """The parked poll of a coroutine (`events.EventsHandler`), which awaits
    `outcome`. Its turn only resolves `outcome`: the handler builds the answer
    (`answer_for`) when it resumes, so events that arrive meanwhile go out in
    the same answer."""

    __slots__ = ("outcome",)

    def __init__(self, server: PollApi) -> None:
        super().__init__(server)
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()

    def _answer(self, reason: WakeReason) -> None:
        self._resolve(reason)

    def disconnected(self) -> None:
        """Its connection closed."""
        self._leave()
        self._resolve("disconnected")

    def _resolve(self, outcome: Outcome) -> None:
        self._done = True
        self._cancel_heartbeat()
        if not self.outcome.done():
            self.outcome.set_result(outcome)
