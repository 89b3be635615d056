"""A steady event load and clients that check every event id, for the fault
tests: what was sent, delivered, duplicated and lost, per client, and what
the clients saw while something broke."""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from generation import accounts
from generation.config import ProducerConfig
from generation.publisher import PublishError
from generation.send import close_for_thread, send_event


class Watcher:
    """A client long-polling its queue the way Zulip clients do: after an
    error it retries the same queue and last_event_id; on
    BAD_EVENT_QUEUE_ID it registers again (a new epoch). It checks that event
    ids go up by one and counts what breaks that."""

    def __init__(self, url: Callable[[], str], user: accounts.CreatedUser, load: Load):
        self.url = url
        self.user = user
        self.load = load
        self.session = requests.Session()
        self.session.auth = (user.email, user.api_key)
        self.got: list[int] = []  # the load's sequence numbers, in arrival order
        self.duplicate_ids = 0
        self.id_gaps = 0
        self.saw: collections.Counter[str] = collections.Counter()
        # Sequence numbers sent before each registration: events from there
        # on must all arrive on that queue.
        self.epochs: list[int] = []
        self.paused = threading.Event()
        self._stop = threading.Event()
        self.queue_id = ""
        self._register()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _register(self) -> None:
        while not self._stop.is_set():
            try:
                response = self.session.post(
                    f"{self.url()}/api/v1/register",
                    data={"event_types": '["load", "restart"]'},
                    timeout=10,
                )
            except requests.RequestException as exc:
                self.saw[f"register: {type(exc).__name__}"] += 1
                self._stop.wait(0.05)
                continue
            if response.status_code == 200:
                self.queue_id = response.json()["queue_id"]
                self.last = -1
                # Every event sent from now on must arrive; one being
                # published meanwhile may have been delivered before the
                # queue existed.
                self.epochs.append(self.load.count + (1 if self.load.sending else 0))
                return
            self.saw[f"register: {_describe(response)}"] += 1
            self._stop.wait(0.05)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.paused.is_set():
                self._stop.wait(0.02)  # a client that stopped reading
                continue
            try:
                response = self.session.get(
                    f"{self.url()}/api/v1/events",
                    params={"queue_id": self.queue_id, "last_event_id": str(self.last)},
                    timeout=30,
                )
            except requests.RequestException as exc:
                self.saw[type(exc).__name__] += 1
                self._stop.wait(0.05)  # the client's backoff
                continue
            if response.status_code != 200:
                seen = _describe(response)
                self.saw[seen] += 1
                if "BAD_EVENT_QUEUE_ID" in seen:
                    self._register()
                else:
                    self._stop.wait(0.05)
                continue
            self.saw["200"] += 1
            for event in response.json()["events"]:
                if event["type"] == "heartbeat":
                    # Carries the newest acknowledged id; it takes none of its own.
                    continue
                if event["id"] <= self.last:
                    self.duplicate_ids += 1
                    continue
                if event["id"] != self.last + 1:
                    self.id_gaps += event["id"] - self.last - 1
                self.last = event["id"]
                if event["type"] == "load":
                    self.got.append(event["n"])

    def stop(self) -> None:
        self._stop.set()
        self.session.close()

    def has_all(self) -> bool:
        """Whether everything sent since the last registration arrived."""
        return set(range(self.epochs[-1], self.load.count)) <= set(self.got)

    def tally(self) -> dict[str, Any]:
        sent = self.load.count
        since = self.epochs[0]
        received = collections.Counter(self.got)
        # A queue that survived must have every event sent since it was
        # created; after a re-registration, every event since that one.
        expected = set(range(self.epochs[-1], sent))
        if len(self.epochs) == 1:
            expected = set(range(since, sent))
        return {
            "user": self.user.user_id,
            "sent": sent - since,
            "delivered": len(received),
            "duplicated": sum(count - 1 for count in received.values()) + self.duplicate_ids,
            "lost": len(expected - set(received)),
            "queue_survived": len(self.epochs) == 1,
            "id_gaps": self.id_gaps,
            "saw": dict(self.saw),
        }


def _describe(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code} not JSON"
    return f"{response.status_code} {body.get('code', '')}"


@dataclass
class Load:
    """send_event of {"type": "load", "n": k} to `users`, `per_sec` a second,
    from a thread; a publish the broker refuses is tried again (a backend
    service would), so `count` events were each accepted once."""

    config: ProducerConfig
    realm_id: int
    users: list[int]
    per_sec: float = 100.0
    count: int = 0
    sending: bool = False
    publish_errors: int = 0
    run: str = field(default_factory=lambda: uuid.uuid4().hex)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.sending = True
                try:
                    # The same notice id on every try: a publish the broker
                    # kept without confirming is not delivered twice.
                    send_event(
                        self.realm_id,
                        {"type": "load", "n": self.count},
                        self.users,
                        config=self.config,
                        notice_id=f"{self.run}-{self.count}",
                    )
                except PublishError:
                    self.sending = False
                    self.publish_errors += 1
                    self._stop.wait(0.2)
                    continue
                # Counted before `sending` drops: a watcher registering in
                # between must not take this event as one it is owed.
                self.count += 1
                self.sending = False
                self._stop.wait(1.0 / self.per_sec)
        finally:
            close_for_thread()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


def report(scenario: str, load: Load, watchers: list[Watcher]) -> list[dict[str, Any]]:
    """Each client's tally, printed (pytest -s shows it) and returned."""
    rows = [watcher.tally() for watcher in watchers]
    print(f"\n{scenario}: {load.count} events sent ({load.publish_errors} publishes retried)")
    for row in rows:
        print(
            f"  user {row['user']}: delivered {row['delivered']}/{row['sent']},"
            f" duplicated {row['duplicated']}, lost {row['lost']},"
            f" queue {'kept' if row['queue_survived'] else 'replaced'}; saw {row['saw']}"
        )
    return rows
