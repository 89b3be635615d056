"""Who is away, as the server decides it (server/notifications/away.py): what
it publishes to the notification queue when a direct message or a mention
reaches a user with no present client, or when the last queue of a user
expires holding one (Zulip's missed-message hook). Read from the real
RabbitMQ queue the worker would consume."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pika
import pytest

from tests.support import Api, ok, wait_for


class NotificationQueue:
    """The server's notification queue, read as the worker would."""

    def __init__(self, amqp_url: str, queue: str):
        self.connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        self.channel = self.connection.channel()
        self.channel.queue_declare(queue=queue, durable=True)
        self.queue = queue
        self.taken: list[dict[str, Any]] = []

    def wait_for(self, condition: Any, what: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Take published notifications until `condition(all taken)` holds."""
        deadline = time.monotonic() + timeout
        while not condition(self.taken):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: never published; taken: {self.taken}")
            method, _properties, body = self.channel.basic_get(self.queue, auto_ack=True)
            if method is None:
                self.connection.sleep(0.02)
                continue
            self.taken.extend(orjson.loads(body)["notifications"])
        return self.taken

    def of(self, user_id: int) -> list[dict[str, Any]]:
        return [n for n in self.taken if n["user_id"] == user_id]

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def notifying(start_server, world):
    """A server whose users are present only while a request is parked
    (a presence window of 1 ms) and whose idle queues expire after 2 s."""
    server = start_server(
        EVENTQ_PRESENCE_WINDOW_SECS="0.001",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="2",
    )
    server.wait_consuming()
    queue = NotificationQueue(server.amqp_url, server.notification_queue)
    clients: list[Api] = []

    def client(realm: str) -> Api:
        made = Api(server, world.user(realm))
        clients.append(made)
        return made

    yield server, queue, client
    queue.close()
    for made in clients:
        made.close()


def send_dm(sender: Api, to: Api, content: str = "hello") -> int:
    sent = ok(
        sender.request("POST", "messages", type="direct", to=[to.user.user_id], content=content)
    )
    return int(sent["id"])


def test_a_direct_message_to_a_user_with_no_queue_is_published(notifying, world):
    server, queue, client = notifying
    realm = world.realm()
    alice, bob = client(realm), client(realm)
    message_id = send_dm(alice, bob)
    queue.wait_for(lambda taken: taken, "the notification of bob")
    [notification] = queue.taken
    assert notification["user_id"] == bob.user.user_id
    assert notification["message_id"] == message_id
    assert notification["kinds"] == ["email", "push"]
    assert notification["via"] == "delivery"
    assert notification["realm_id"] == bob.user.realm_id
    # The sender is never notified of their own message.
    assert queue.of(alice.user.user_id) == []
    stats = server.stats()["notifications"]
    assert stats["enqueued"]["delivery"] == 1
    assert stats["published"] == 1


def test_a_user_with_a_parked_poll_is_present_and_not_notified(notifying, world):
    _server, queue, client = notifying
    realm = world.realm()
    alice, bob, carol = client(realm), client(realm), client(realm)
    queue_id = bob.register()["queue_id"]
    parked = bob.park(queue_id, -1)
    present_message = send_dm(alice, bob, "while bob reads")
    [event] = parked.result(timeout=30).json()["events"]
    assert event["message"]["id"] == present_message
    # Published in order: once carol's is here, bob's would have been too.
    sentinel = send_dm(alice, carol, "carol is away")
    queue.wait_for(lambda taken: any(n["message_id"] == sentinel for n in taken), "carol's")
    assert queue.of(bob.user.user_id) == []


def test_a_queue_that_stopped_polling_leaves_its_user_away(notifying, world):
    _server, queue, client = notifying
    realm = world.realm()
    alice, bob = client(realm), client(realm)
    queue_id = bob.register()["queue_id"]
    bob.events(queue_id, -1)  # polled once, then gone (the window is 1 ms)
    message_id = send_dm(alice, bob)
    queue.wait_for(lambda taken: queue.of(bob.user.user_id), "bob's")
    assert [n["message_id"] for n in queue.of(bob.user.user_id)] == [message_id]
    assert queue.of(bob.user.user_id)[0]["via"] == "delivery"


def test_a_mention_notifies_the_mentioned_subscriber_only(notifying, world):
    _server, queue, client = notifying
    realm = world.realm()
    alice, bob, carol = client(realm), client(realm), client(realm)
    for user in (alice, bob, carol):
        ok(user.request("POST", "users/me/subscriptions", subscriptions=[{"name": "verona"}]))
    sent = ok(
        alice.request(
            "POST",
            "messages",
            type="stream",
            to="verona",
            topic="plans",
            content=f"@**{bob.user.full_name}|{bob.user.user_id}** look",
        )
    )
    queue.wait_for(lambda taken: taken, "bob's mention")
    [notification] = queue.taken
    assert notification["user_id"] == bob.user.user_id
    assert notification["message_id"] == sent["id"]
    sentinel = send_dm(alice, carol)
    queue.wait_for(lambda taken: any(n["message_id"] == sentinel for n in taken), "carol's DM")
    # carol was not notified of the channel message: only of the DM.
    assert [n["message_id"] for n in queue.of(carol.user.user_id)] == [sentinel]


def test_the_last_queue_expiring_with_an_unread_message_notifies_it(start_server, world):
    """Present at delivery (polled within the window), then gone: the
    missed-message hook publishes what the queue held when it expires."""
    server = start_server(
        EVENTQ_PRESENCE_WINDOW_SECS="600",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="1",
    )
    server.wait_consuming()
    queue = NotificationQueue(server.amqp_url, server.notification_queue)
    realm = world.realm()
    alice, bob = Api(server, world.user(realm)), Api(server, world.user(realm))
    try:
        first = bob.register()["queue_id"]
        second = bob.register()["queue_id"]
        kept = send_dm(alice, bob, "read on one device")
        missed = send_dm(alice, bob, "missed")
        # One device read the first message (acknowledged it); neither the
        # other device nor the server's delivery notified anything yet.
        events = bob.events(first, -1)
        assert [e["message"]["id"] for e in events] == [kept, missed]
        bob.events(first, events[0]["id"])
        queue.wait_for(lambda taken: taken, "the missed message, after both queues expired")
        wait_for(lambda: not server.user_queues(bob.user.user_id), 30, "bob's queues to expire")
        # The second queue, idle since its register, expired first: not the
        # last, it notified nothing. The first, whose client acknowledged
        # the first message, was the last: it notifies the one it held.
        assert [(n["message_id"], n["via"]) for n in queue.of(bob.user.user_id)] == [(missed, "gc")]
        assert second != first
        assert server.stats()["notifications"]["enqueued"]["delivery"] == 0
    finally:
        queue.close()
        alice.close()
        bob.close()


def test_what_a_queue_remembers_for_the_hook_survives_a_restart(start_server, world):
    """The missed-message hook after a graceful restart: the queue comes
    back with the messages it took while its user was present."""
    server = start_server(
        EVENTQ_PRESENCE_WINDOW_SECS="600",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="3",
    )
    server.wait_consuming()
    queue = NotificationQueue(server.amqp_url, server.notification_queue)
    realm = world.realm()
    alice, bob = Api(server, world.user(realm)), Api(server, world.user(realm))
    try:
        queue_id = bob.register()["queue_id"]
        missed = send_dm(alice, bob, "sent before the restart")
        assert [e["message"]["id"] for e in bob.events(queue_id, -1)] == [missed]
        assert server.stop() == 0
        server.start()
        server.wait_consuming()
        assert [q["queue_id"] for q in server.user_queues(bob.user.user_id)] == [queue_id]
        queue.wait_for(lambda taken: taken, "the missed message, after the queue expired")
        assert [(n["message_id"], n["via"]) for n in queue.taken] == [(missed, "gc")]
    finally:
        queue.close()
        alice.close()
        bob.close()
