"""`POST /api/v1/register` (and `/json/register`): a queue plus the initial
state consistent with it (docs/architecture.md, "Register"; the algorithm is
`apply_events.register`)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from apply_events.engine import fetch_at_snapshot
from apply_events.fetch.realm import RealmGone
from apply_events.register import register
from apply_events.state import Event, State, StateContext, Want
from queues.client import NO_POSITIONS
from queues.errors import BadQueueId
from server.durability.resume import resume_queue
from server.errors import ApiError, access_changed
from server.handlers.base import BaseHandler
from server.http.options import include_subscribers, register_options
from server.interface import RegisterApi
from server.observability.observe import is_origin
from server.version import ZULIP_FEATURE_LEVEL, ZULIP_MERGE_BASE, ZULIP_VERSION

log = logging.getLogger("eventq.register")

# Parameters register validates that do not change anything yet; they are not
# reported back as ignored.
_KNOWN_WITHOUT_EFFECT = ("presence_history_limit_days",)


def _covered(origin: object, covered: frozenset[int]) -> bool:
    return is_origin(origin) and origin[2] in covered


class RegisterHandler(BaseHandler):
    server: RegisterApi
    SUPPORTED_METHODS = ("POST",)

    async def post(self) -> None:
        started = time.monotonic()
        user = await self.authenticate()
        if await self.served_elsewhere(user):
            return
        params = self.params()
        server = self.server
        registry = server.registry
        options = register_options(params, user, registry, self.client_name(params))
        fetch_event_types = params.string_list("fetch_event_types")
        # Which sections to fetch and which events to replay: fetch_event_types,
        # else event_types, else everything (as Zulip's register chooses).
        wanted = (
            frozenset(fetch_event_types) if fetch_event_types is not None else options.event_types
        )
        subscribers = include_subscribers(params)
        params.integer("presence_history_limit_days", minimum=0, maximum=100_000)
        resume_from = params.integer("resume_from", minimum=0)
        ignored = [name for name in params.unread() if name not in _KNOWN_WITHOUT_EFFECT]
        if resume_from is not None:
            if fetch_event_types is not None:
                raise ApiError(
                    "resume_from fetches no state: leave out fetch_event_types",
                    "BAD_REQUEST",
                )
            client, position = await resume_queue(
                server,
                user.user_id,
                user.realm_id,
                options,
                resume_from,
                lambda: self.access_changed(user),
            )
            server.observe_registered(client, time.monotonic() - started)
            resumed: dict[str, Any] = {
                "queue_id": client.queue_id,
                # The client polls from the start of its new queue.
                "last_event_id": -1,
                "stream_position": position,
                "resumed_from": resume_from,
                "event_queue_longpoll_timeout_seconds": int(server.settings.longpoll_timeout_secs),
                "zulip_version": ZULIP_VERSION,
                "zulip_feature_level": ZULIP_FEATURE_LEVEL,
                "zulip_merge_base": ZULIP_MERGE_BASE,
            }
            if ignored:
                resumed["ignored_parameters_unsupported"] = ignored
            log.info(
                "queue %s of user %d resumed from position %d with %d events",
                client.queue_id,
                user.user_id,
                resume_from,
                len(client.event_queue),
            )
            self.write_success(resumed)
            server.journal_queue(client)
            return

        # The stream position when the queue was made, the log positions whose
        # changes the fetched state has, and the position it is complete to.
        since = [0]
        covered: list[frozenset[int]] = [frozenset()]
        complete = [0]

        def allocate() -> str:
            if self.access_changed(user):
                # Authenticated with a role, key or session that changed
                # since: the options were judged by what is no longer so.
                raise access_changed()
            since[0] = server.eventlog.position
            return registry.allocate(user.user_id, user.realm_id, options, server.clock()).queue_id

        def make_context(queue_id: str) -> StateContext:
            return StateContext(
                user_id=user.user_id,
                realm_id=user.realm_id,
                queue_id=queue_id,
                apply_markdown=options.apply_markdown,
                client_gravatar=options.client_gravatar,
                slim_presence=options.slim_presence,
                include_subscribers=subscribers is not False,
                capabilities=options.capabilities,
                server_generation=server.server_generation,
                longpoll_timeout_secs=int(server.settings.longpoll_timeout_secs),
            )

        async def fetch(ctx: StateContext, want: Want) -> State:
            async with server.db.connection() as conn:
                state, covered[0] = await fetch_at_snapshot(
                    conn, ctx, want, since[0], server.eventlog.reader.late()
                )
            return state

        def queue_events(queue_id: str) -> list[Event]:
            # Raises BadQueueId if the queue ended meanwhile (deleted or
            # overflowed): the client registers again.
            client = registry.get(queue_id, user.user_id)
            # From now on the queue takes no event whose change the state has.
            client.covered = covered[0] or NO_POSITIONS
            complete[0] = server.eventlog.position
            return [
                payload.client_event(i)
                for i, payload in client.event_queue.contents()
                if not _covered(payload.origin, covered[0])
            ]

        def drop(queue_id: str) -> None:
            with contextlib.suppress(BadQueueId):  # already gone
                registry.end(registry.get(queue_id, user.user_id), "deleted", server.clock())

        try:
            state = await register(
                fetch_event_types=wanted,
                allocate_queue=allocate,
                make_context=make_context,
                fetch_state=fetch,
                queue_events=queue_events,
                drop_queue=drop,
                newest_id=lambda queue_id: registry.get(
                    queue_id, user.user_id
                ).event_queue.last_id(),
            )
        except RealmGone:
            raise ApiError(
                "This organization has been deactivated", "REALM_DEACTIVATED", 401
            ) from None
        body: dict[str, Any] = {
            # Every logged event at or below it is in this state (or not for
            # this client); an addition to Zulip's answer.
            "stream_position": complete[0],
            "zulip_version": ZULIP_VERSION,
            "zulip_feature_level": ZULIP_FEATURE_LEVEL,
            "zulip_merge_base": ZULIP_MERGE_BASE,
            **state,
        }
        server.observe_registered(
            registry.get(state["queue_id"], user.user_id), time.monotonic() - started
        )
        if "presences" in state:
            # When the presences were read (Zulip's presence section); not
            # part of the section itself, which must equal a later fetch.
            body["server_timestamp"] = time.time()
        if ignored:
            body["ignored_parameters_unsupported"] = ignored
        self.write_success(body)
        server.journal_queue(registry.get(state["queue_id"], user.user_id))
        server.record_floor(user.user_id, complete[0])
