"""A delivery that fails, for the retry path's tests only
(tests/server/test_notice_retry.py), loaded by the servers they start: the
tests put this directory first on PYTHONPATH, and Python imports
`sitecustomize` as it starts.

Delivering a valid notice does no I/O, so nothing from outside a server
makes it fail a few times and then succeed; a bug in the code that applies
an event would. With TEST_DELIVERY_FAULT="<event type>:<count>", the first
<count> deliveries of events of that type raise `InjectedFault` from the
event log reader's hand-off (`Delivery.deliver_now`), where such a bug
would. The server itself has no such switch."""

from __future__ import annotations

import os

VARIABLE = "TEST_DELIVERY_FAULT"


class InjectedFault(Exception):
    """The failure TEST_DELIVERY_FAULT asked for."""


def _install(spec: str) -> None:
    event_type, _, raw_count = spec.rpartition(":")
    if not event_type or not raw_count.isdigit():
        raise SystemExit(f"{VARIABLE} must be <event type>:<count>, got {spec!r}")
    remaining = int(raw_count)

    from server.delivering import Delivery

    deliver_now = Delivery.deliver_now

    def failing(self: Delivery, notice, published_at):  # type: ignore[no-untyped-def]
        nonlocal remaining
        if notice.event.get("type") == event_type and remaining > 0:
            remaining -= 1
            raise InjectedFault(f"injected failure of a {event_type} event ({VARIABLE})")
        return deliver_now(self, notice, published_at)

    Delivery.deliver_now = failing  # type: ignore[method-assign]


if os.environ.get(VARIABLE):
    _install(os.environ[VARIABLE])
