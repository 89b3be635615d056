"""`server.observability.observe.Observers`: every observer of a server as one."""

from __future__ import annotations

import gc
from typing import Any

from queues.registry import DeliveryReport
from server.handlers.register import _covered
from server.observability.observe import Observer, Observers, is_origin, make_origin
from tests.logrecords import queue_client


class Recorder(Observer):
    def __init__(self, name: str, calls: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.calls = calls

    def gc_ran(self, collected: int, duration_secs: float) -> None:
        self.calls.append((self.name, "gc_ran", collected, duration_secs))

    def notice_delivered(self, event_type: str, report: DeliveryReport, now: float) -> None:
        self.calls.append((self.name, "notice_delivered", event_type, report, now))

    def notice_retried(self, notice_id: str | None, failures: int, error: str) -> None:
        self.calls.append((self.name, "notice_retried", notice_id, failures, error))


def test_an_empty_composite_is_false_and_does_nothing():
    observers = Observers()
    assert not observers
    assert len(observers) == 0
    observers.gc_ran(3, 0.5)  # no member: nothing to tell


def test_each_call_reaches_every_member_in_the_order_they_were_added():
    calls: list[tuple[Any, ...]] = []
    first, second = Recorder("first", calls), Recorder("second", calls)
    observers = Observers([first])
    observers.add(second)
    assert observers
    assert len(observers) == 2
    assert list(observers) == [first, second]
    report = DeliveryReport()
    observers.gc_ran(3, 0.5)
    observers.notice_delivered("message", report, 12.0)
    observers.notice_retried("n1", 2, "boom")
    assert calls == [
        ("first", "gc_ran", 3, 0.5),
        ("second", "gc_ran", 3, 0.5),
        ("first", "notice_delivered", "message", report, 12.0),
        ("second", "notice_delivered", "message", report, 12.0),
        ("first", "notice_retried", "n1", 2, "boom"),
        ("second", "notice_retried", "n1", 2, "boom"),
    ]


class Answers(Observer):
    def __init__(self, name: str, calls: list[tuple[Any, ...]]) -> None:
        self.name = name
        self.calls = calls

    def responded(self, client, items, response_bytes, outcome, waited_secs, now) -> None:
        self.calls.append((self.name, outcome, response_bytes, waited_secs, now))


def test_an_observers_responded_is_its_responder_unless_it_names_another():
    calls: list[tuple[Any, ...]] = []
    first, second = Answers("first", calls), Answers("second", calls)
    observers = Observers([first])
    observers.add(second)
    assert observers.responders == (first.responded, second.responded)
    client = queue_client("q1", 7, 3)
    observers.responded(client, [], 5, "empty", 1.5, 9.0)
    for respond in observers.responders:  # as the server calls them
        respond(client, [], 6, "heartbeat", 0.0, 10.0)
    assert calls == [
        ("first", "empty", 5, 1.5, 9.0),
        ("second", "empty", 5, 1.5, 9.0),
        ("first", "heartbeat", 6, 0.0, 10.0),
        ("second", "heartbeat", 6, 0.0, 10.0),
    ]


def test_the_composite_overrides_every_observer_method():
    """A method added to `Observer` and not to `Observers` would silently tell nobody."""
    hooks = {name for name in vars(Observer) if not name.startswith("_")}
    assert hooks
    assert all(name in vars(Observers) for name in hooks), hooks - set(vars(Observers))


def test_an_origin_is_a_plain_tuple_the_gc_stops_tracking():
    origin = make_origin(1.0, 0.5, 42)
    assert is_origin(origin)
    assert origin == (1.0, 0.5, 42)
    gc.collect()
    assert not gc.is_tracked(origin)
    for other in (None, 42, [1.0, None, 3], (1.0, None), (1.0, None, 3, 4)):
        assert not is_origin(other)


def test_register_skips_an_event_a_resume_covered_by_its_origins_position():
    assert _covered(make_origin(1.0, None, 7), frozenset({7}))
    assert not _covered(make_origin(1.0, None, 8), frozenset({7}))
    assert not _covered(make_origin(1.0, None, None), frozenset({7}))
    assert not _covered(None, frozenset({7}))
