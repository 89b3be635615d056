"""The real `zulip` package from PyPI, unmodified, against the server."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading

import zulip

from tests.support import wait_for


def _client(server, user) -> zulip.Client:
    return zulip.Client(email=user.email, api_key=user.api_key, site=server.url)


def test_register_get_events_and_deregister(server, world):
    user = world.user()
    client = _client(server, user)
    registered = client.register(event_types=["test"])
    assert registered["result"] == "success"
    queue_id = registered["queue_id"]
    assert registered["last_event_id"] == -1

    server.notify({"type": "test", "payload": [1, 2]}, [user.user_id])
    response = client.get_events(queue_id=queue_id, last_event_id=-1)
    assert response["result"] == "success"
    assert response["events"] == [{"type": "test", "payload": [1, 2], "id": 0}]

    assert client.deregister(queue_id)["result"] == "success"
    gone = client.get_events(queue_id=queue_id, last_event_id=0)
    assert gone["result"] == "error"
    assert gone["code"] == "BAD_EVENT_QUEUE_ID"
    assert server.user_queues(user.user_id) == []


LISTENER = textwrap.dedent(
    """
    import json, sys, zulip
    client = zulip.Client(email=sys.argv[1], api_key=sys.argv[2], site=sys.argv[3])
    def on_event(event):
        print(json.dumps(event), flush=True)
    client.call_on_each_event(on_event, event_types=["test"])
    """
)


class Listener:
    """`call_on_each_event` in its own process, its events read line by line."""

    def __init__(self, server, user):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LISTENER, user.email, user.api_key, server.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if not k.startswith("ZULIP_")},
        )
        self.events: queue.Queue[dict] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def next_event(self, timeout=15.0) -> dict:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            if self.proc.poll() is None:
                self.proc.kill()
            stderr = self.proc.stderr.read().decode()
            self.stop()
            raise AssertionError(
                f"no event reached call_on_each_event; its stderr:\n{stderr}"
            ) from None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def test_call_on_each_event_survives_its_queue_being_collected(start_server, world):
    server = start_server(
        EVENTQ_HEARTBEAT_SECS="0.2",
        EVENTQ_HEARTBEAT_JITTER_SECS="0",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="0.5",
        EVENTQ_GC_INTERVAL_SECS="0.05",
    )
    user = world.user()
    listener = Listener(server, user)
    try:

        def parked_queue():
            queues = server.user_queues(user.user_id)
            return queues[0]["queue_id"] if len(queues) == 1 and queues[0]["parked"] else None

        first_queue = wait_for(parked_queue, 30, "the client to register and poll")
        server.notify({"type": "test", "n": 1}, [user.user_id])
        assert listener.next_event() == {"type": "test", "n": 1, "id": 0}

        # The client goes to sleep (a laptop lid): its poll is answered by a
        # heartbeat it does not read, and its queue is collected.
        listener.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: server.user_queues(user.user_id) == [], 15, "the queue collected")

        # It wakes up, gets BAD_EVENT_QUEUE_ID, registers again and polls.
        listener.proc.send_signal(signal.SIGCONT)
        second_queue = wait_for(
            lambda: (q := parked_queue()) is not None and q != first_queue and q,
            30,
            "the client to re-register",
        )
        assert second_queue != first_queue
        server.notify({"type": "test", "n": 2}, [user.user_id])
        event = listener.next_event()
        assert event["type"] == "test"
        assert event["n"] == 2
        assert listener.events.empty()
    finally:
        listener.stop()
