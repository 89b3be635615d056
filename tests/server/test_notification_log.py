"""The delivery log's record of each notification a real server enqueues
for a user found away (server/observability/deliverylog.py,
docs/delivery-log.md): by the path that found them, at delivery or when
their last queue expired, in the columns the analytics jobs count them by."""

from __future__ import annotations

import time

import pyarrow.dataset as ds

from tests.support import Api, ok, wait_for


def send_dm(sender: Api, to: Api, content: str) -> int:
    sent = ok(
        sender.request("POST", "messages", type="direct", to=[to.user.user_id], content=content)
    )
    return int(sent["id"])


def test_each_notification_enqueued_is_a_record_of_its_path(start_server, world, tmp_path):
    logs = tmp_path / "logs"
    # Present for 10 minutes after a request, and queues idle for 1 s expire.
    server = start_server(
        EVENTQ_LOG_DIR=str(logs),
        EVENTQ_SHARD="notified-1",
        EVENTQ_LOG_FLUSH_SECS="0.05",
        EVENTQ_PRESENCE_WINDOW_SECS="600",
        EVENTQ_QUEUE_IDLE_TIMEOUT_SECS="1",
    )
    server.wait_consuming()
    realm = world.realm()
    alice, bob, carol = (Api(server, world.user(realm)) for _ in range(3))
    try:
        started = time.time()
        # carol has no queue: away when the message arrives.
        to_carol = send_dm(alice, carol, "carol has no queue")
        # bob is present (he just registered), then his only queue expires
        # holding the message: the missed-message hook.
        bob.register()
        to_bob = send_dm(alice, bob, "bob leaves")
        wait_for(
            lambda: server.stats()["notifications"]["enqueued"] == {"delivery": 1, "gc": 1},
            30,
            "carol's notification at delivery and bob's when his queue expired",
        )
        assert server.stop() == 0  # the log written and compacted into Parquet
        stopped = time.time()
    finally:
        for client in (alice, bob, carol):
            client.close()

    table = ds.dataset(logs / "deliveries", format="parquet", partitioning="hive").to_table()
    records = sorted(
        (row for row in table.to_pylist() if row["kind"] == "notification"),
        key=lambda row: row["time"],
    )
    columns = ("shard", "realm_id", "user_id", "event_id", "outcome", "reason")
    assert [tuple(row[c] for c in columns) for row in records] == [
        ("notified-1", carol.user.realm_id, carol.user.user_id, to_carol, "email,push", "delivery"),
        ("notified-1", bob.user.realm_id, bob.user.user_id, to_bob, "email,push", "gc"),
    ]
    for row in records:
        assert started <= row["time"] <= stopped
        assert row["v"] == 1
        # The columns of a queue stay empty: a notification is a user's.
        assert (row["queue_id"], row["client"], row["event_type"]) == (None, None, None)
