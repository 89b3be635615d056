"""The register algorithm (Zulip's `do_events_register` from the queue's creation
on), written against injected callables so that it runs the same in the
server and in tests.

1. create the queue, so that no event after this point can be missed;
2. fetch the initial state while events may arrive (the server reads it in
   one snapshot, `engine.fetch_at_snapshot`; the algorithm does not need it);
3. take every event that reached the queue since its creation;
4. apply those whose type was asked for to the fetched state;
5. post-process it into the form clients read;
6. return it with `last_event_id`, the newest replayed id (or -1): the
   client's first GET with it acknowledges the replayed events, and
   everything newer reaches it through the queue.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from apply_events.engine import apply_events, post_process_state
from apply_events.state import Event, State, StateContext, Want, make_want


async def register(
    *,
    fetch_event_types: frozenset[str] | None,
    allocate_queue: Callable[[], str],
    make_context: Callable[[str], StateContext],
    fetch_state: Callable[[StateContext, Want], Awaitable[State]],
    queue_events: Callable[[str], list[Event]],
    drop_queue: Callable[[str], None],
    post_process: bool = True,
    newest_id: Callable[[str], int | None] | None = None,
) -> State:
    """Run register for one client. If fetching fails, the queue is dropped
    and the error propagates. With `post_process` False the state keeps its
    intermediate structures, so that later events can still be applied (the
    race tests continue from there). `newest_id` gives the queue's newest
    event id when `queue_events` leaves some out (those whose effect the
    fetched state already has): the client acknowledges them too."""
    want = make_want(fetch_event_types)
    queue_id = allocate_queue()
    ctx = make_context(queue_id)
    try:
        state = await fetch_state(ctx, want)
    except BaseException:
        drop_queue(queue_id)
        raise
    events = queue_events(queue_id)
    apply_events(state, events, want, ctx)
    if post_process:
        post_process_state(state, want, ctx)
    state["queue_id"] = queue_id
    newest = newest_id(queue_id) if newest_id is not None else None
    if newest is None:
        newest = events[-1]["id"] if events else -1
    state["last_event_id"] = newest
    return state
