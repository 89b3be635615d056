"""`EventLogReader.handed`: the position the queues have everything up to, also
in the middle of a batch of positions released at once (a gap closed), where
`position` is already the batch's last. A queue ended by one of the batch's
events records it (server/handlers/longpoll_flow.py `note_end`)."""

from __future__ import annotations

import asyncio
from typing import Any

from generation.notice import Notice
from server.delivery.eventlog import EventLogReader


def test_handed_is_the_event_being_delivered_within_a_released_batch():
    seen: list[tuple[int | None, int, int]] = []

    async def scenario() -> None:
        stream: EventLogReader

        def deliver(notice: Notice, published_at: float | None) -> Any:
            seen.append((notice.position, stream.position, stream.handed))

        # No gap is looked up in the log here: the gap closes at once.
        stream = EventLogReader(None, deliver, gap_timeout_secs=3600)  # type: ignore[arg-type]
        stream.offer(Notice({"type": "note"}, [1], 1, 2))  # held above the gap at 1
        assert seen == []
        stream.offer(Notice({"type": "note"}, [1], 1, 1))  # closes it: 1 then 2
        assert (stream.position, stream.handed) == (2, 2)
        stream.offer(Notice({"type": "note"}, [1], 1, None))  # no position: at once
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert seen == [(1, 2, 1), (2, 2, 2), (None, 2, 2)]
