"""One shard restarted while events flow: the other keeps serving, and no
client of either loses or repeats an event: a rolling restart is invisible."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
import requests

from generation import accounts
from generation.send import close_for_thread, send_event
from tests.shards import Cluster, running
from tests.support import World

# Events sent before shard b is restarted, and after it is back.
BEFORE_RESTART = 100
AFTER_RESTART = 100
# The work above takes as long as the machine makes it: a wait on it fails
# only when it has not advanced for this long.
STALL_SECS = 30.0


def wait_advancing(done: Callable[[], bool], progress: Callable[[], int], what: str) -> None:
    """Wait until `done()`; fail if `progress()` stays the same for STALL_SECS."""
    seen, since = progress(), time.monotonic()
    while not done():
        now = progress()
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > STALL_SECS:
            raise AssertionError(f"{what}: no progress for {STALL_SECS:g} s (at {now})")
        time.sleep(0.01)


class Poller:
    """A client long-polling through nginx the way Zulip clients do: the same
    queue and last_event_id again after any error (a 502 while its shard
    restarts), re-registering never."""

    def __init__(self, url: str, user: accounts.CreatedUser, shard: str):
        self.user = user
        self.shard = shard
        self.session = requests.Session()
        self.session.auth = (user.email, user.api_key)
        self.url = url
        response = self.session.post(
            f"{url}/api/v1/register", data={"event_types": '["seq"]'}, timeout=10
        )
        assert response.status_code == 200, response.text
        self.queue_id: str = response.json()["queue_id"]
        self.seqs: list[int] = []
        self.errors: list[str] = []
        self.lost_queue = False
        self.during_outage = 0
        self.outage = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = -1
        while not self.stopping.is_set():
            try:
                response = self.session.get(
                    f"{self.url}/api/v1/events",
                    params={"queue_id": self.queue_id, "last_event_id": str(last)},
                    timeout=30,
                )
            except requests.RequestException as exc:
                self.errors.append(type(exc).__name__)
                self.stopping.wait(0.05)  # the client's retry backoff
                continue
            if response.status_code != 200:
                try:
                    code = response.json()["code"]
                except ValueError:  # not JSON: what a client could not parse
                    code = f"not JSON: {response.text[:80]!r}"
                self.errors.append(f"{response.status_code} {code}")
                if "BAD_EVENT_QUEUE_ID" in response.text:
                    self.lost_queue = True
                    return
                self.stopping.wait(0.05)
                continue
            for event in response.json()["events"]:
                last = max(last, event["id"])
                if event["type"] == "seq":
                    self.seqs.append(event["seq"])
                    if self.outage.is_set():
                        self.during_outage += 1

    def stop(self) -> None:
        self.stopping.set()
        self.session.close()


@pytest.fixture
def spread(world: World) -> list[accounts.CreatedUser]:
    realm = world.realm()
    return [world.user(realm) for _ in range(6)]


@pytest.fixture
def cluster(
    database_url: str, amqp_url: str, spread: list[accounts.CreatedUser], tmp_path
) -> Iterator[Cluster]:
    made = Cluster(database_url, amqp_url, tmp_path, {spread[0].realm_id: ["a", "b"]})
    with running(made) as started:
        yield started


def test_a_shard_restarted_while_events_flow_loses_no_event(
    cluster: Cluster, spread: list[accounts.CreatedUser]
):
    assert cluster.nginx is not None
    pollers = [
        Poller(cluster.nginx.url, user, cluster.map.shard_for(user.realm_id, user.user_id))
        for user in spread
    ]
    assert {p.shard for p in pollers} == {"a", "b"}
    on_b = [p for p in pollers if p.shard == "b"]
    for poller in pollers:
        poller.thread.start()
    sent = 0
    producer_done = threading.Event()
    restarted = threading.Event()
    pace = threading.Event()  # never set: its wait() paces the producer

    def produce() -> None:
        # Until the restart is over, then AFTER_RESTART more events.
        nonlocal sent
        after = 0
        try:
            while after < AFTER_RESTART:
                send_event(
                    spread[0].realm_id,
                    {"type": "seq", "seq": sent},
                    [u.user_id for u in spread],
                    config=cluster.producer(),
                )
                sent += 1
                if restarted.is_set():
                    after += 1
                pace.wait(0.005)
            producer_done.set()
        finally:
            close_for_thread()

    producer = threading.Thread(target=produce, daemon=True)
    try:
        producer.start()
        wait_advancing(lambda: sent >= BEFORE_RESTART, lambda: sent, "events to flow")
        shard_b = cluster.shards["b"]
        for poller in pollers:
            poller.outage.set()
        assert shard_b.stop() == 0
        sent_while_down = sent
        # 60 s: it starts while the producer and the pollers keep the machine busy.
        shard_b.start(timeout=60)
        sent_while_down = sent - sent_while_down
        for poller in pollers:
            poller.outage.clear()
        restarted.set()
        assert f"restored {len(on_b)} queues" in shard_b.settled_log()
        wait_advancing(producer_done.is_set, lambda: sent, "the producer to finish")
        total = sent
        wait_advancing(
            lambda: (
                all(len(p.seqs) >= total for p in pollers) or any(p.lost_queue for p in pollers)
            ),
            lambda: sum(len(p.seqs) for p in pollers),
            "every client to receive every event",
        )
    finally:
        for poller in pollers:
            poller.stop()
    assert sent_while_down > 0, "events were sent while shard b was down"
    # What the clients of b saw meanwhile: the API's JSON errors (nginx's
    # own, for a shard that is down), which they retry.
    errors = {error for poller in pollers for error in poller.errors}
    assert errors <= {"502 SHARD_UNAVAILABLE", "503 SERVER_SHUTTING_DOWN"}, errors
    for poller in pollers:
        assert not poller.lost_queue, f"user {poller.user.user_id} lost their queue"
        assert poller.seqs == list(range(total)), (
            f"user {poller.user.user_id} on shard {poller.shard}: "
            f"missing {sorted(set(range(total)) - set(poller.seqs))[:10]},"
            f" {len(poller.seqs) - len(set(poller.seqs))} repeated"
        )
    # Shard a served its clients while b was down.
    assert sum(p.during_outage for p in pollers if p.shard == "a") > 0
    # Both shards saved their queues side by side in the shared directory.
    assert (cluster.state_dir / "event_queues.b.last.json").exists()
