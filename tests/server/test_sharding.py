"""Two shard processes and a real nginx, on loopback ports: every request
reaches the shard that owns the user, whichever entry point the client used,
so that no client sees the topology."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from generation import accounts
from generation.send import send_event
from generation.sharding import load
from server.admin import nginxsite
from tests.shards import Cluster, Entry, Nginx, connect, free_ports, running
from tests.support import SECRET, EventStream, Listener, World, raw_exchange, wait_for

ENTRIES = ("a", "b", "nginx")


class Realms:
    """Realm `spread` on shards a and b, realm `solo` on b only (with a host
    name of its own in nginx), realm `plain` not named (the default, a)."""

    def __init__(self, world: World):
        self.names = {key: world.realm() for key in ("spread", "solo", "plain")}
        self.users: dict[str, list[accounts.CreatedUser]] = {
            "spread": [world.user(self.names["spread"]) for _ in range(4)],
            "solo": [world.user(self.names["solo"]) for _ in range(2)],
            "plain": [world.user(self.names["plain"])],
        }
        self.ids = {key: users[0].realm_id for key, users in self.users.items()}

    def everyone(self) -> list[accounts.CreatedUser]:
        return [user for users in self.users.values() for user in users]


@pytest.fixture(scope="module")
def realms(world: World) -> Realms:
    return Realms(world)


@pytest.fixture(scope="module")
def cluster(
    database_url: str, amqp_url: str, realms: Realms, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    shards = {realms.ids["spread"]: ["a", "b"], realms.ids["solo"]: ["b"]}
    made = Cluster(database_url, amqp_url, tmp_path_factory.mktemp("cluster"), shards)
    with running(made) as started:
        yield started


def test_users_are_spread_as_the_config_says(cluster: Cluster, realms: Realms):
    owners = [cluster.map.shard_for(u.realm_id, u.user_id) for u in realms.users["spread"]]
    assert sorted(set(owners)) == ["a", "b"], "the spread realm's users are on both shards"
    assert {cluster.map.shard_for(u.realm_id, u.user_id) for u in realms.users["solo"]} == {"b"}
    assert cluster.map.shard_for(realms.ids["plain"], realms.users["plain"][0].user_id) == "a"


@pytest.mark.parametrize("entry", ENTRIES)
def test_register_poll_send_and_delete_reach_the_owner_from_any_entry(
    cluster: Cluster, realms: Realms, entry: str
):
    clients = [connect(cluster, user, entry) for user in realms.everyone()]
    try:
        queues = {}
        for client in clients:
            body = client.register(event_types=["sharded"])
            queue_id = body["queue_id"]
            queues[client.user.user_id] = queue_id
            # The queue lives on the owner, and only there.
            owner = cluster.owner(client.user)
            assert [q["queue_id"] for q in owner.user_queues(client.user.user_id)] == [queue_id]
            for other in cluster.others(client.user):
                assert other.user_queues(client.user.user_id) == []
        polls = {c.user.user_id: c.park(queues[c.user.user_id], -1) for c in clients}
        # One send_event per realm, each split by shard by the producer.
        for key, users in realms.users.items():
            send_event(
                realms.ids[key],
                {"type": "sharded", "realm": key},
                [user.user_id for user in users],
                config=cluster.producer(),
            )
        for client in clients:
            response = polls[client.user.user_id].result(timeout=15)
            assert response.status_code == 200, response.text
            [event] = response.json()["events"]
            assert event == {"type": "sharded", "realm": _realm_of(realms, client.user), "id": 0}
        for client in clients:
            queue_id = queues[client.user.user_id]
            deleted = client.request("DELETE", "events", queue_id=queue_id)
            assert deleted.status_code == 200, deleted.text
            assert cluster.owner(client.user).user_queues(client.user.user_id) == []
            gone = client.get_events(queue_id=queue_id, last_event_id=0, dont_block=True)
            assert gone.status_code == 400
            assert gone.json()["code"] == "BAD_EVENT_QUEUE_ID"
    finally:
        for client in clients:
            client.close()


def _realm_of(realms: Realms, user: accounts.CreatedUser) -> str:
    return next(key for key, users in realms.users.items() if user in users)


def test_a_wrong_shard_get_is_answered_with_x_accel_redirect_behind_nginx(
    cluster: Cluster, realms: Realms
):
    user = realms.users["solo"][0]  # owned by b
    client = connect(cluster, user, "a")
    try:
        queue_id = client.register()["queue_id"]
        # What nginx sees when it asked shard a: an empty answer naming the
        # internal location of shard b, path and query kept.
        marked = client.session.get(
            f"{cluster.shards['a'].url}/api/v1/events",
            params={"queue_id": queue_id, "last_event_id": "-1", "dont_block": "true"},
            headers={"X-Eventq-Accel": "on"},
            timeout=10,
        )
        assert marked.status_code == 200
        assert marked.content == b""
        assert marked.headers["X-Accel-Redirect"] == (
            f"/internal/eventq/b/api/v1/events?queue_id={queue_id}&last_event_id=-1&dont_block=true"
        )
        # Without nginx the same GET is forwarded and answered by b.
        direct = client.get_events(queue_id=queue_id, last_event_id=-1, dont_block=True)
        assert direct.status_code == 200
        assert direct.json()["events"] == []
        assert "forwarding GET /api/v1/events to shard b" in cluster.shards["a"].settled_log()
        assert "X-Accel-Redirect" not in direct.headers
    finally:
        client.close()


def test_nginx_follows_the_redirect_long_poll_included(cluster: Cluster, realms: Realms):
    """nginx sends the solo realm's host to shard b (its only shard); a user
    of the spread realm owned by a, sent there, is redirected to a."""
    solo_host = "solo.test"
    user = next(
        u for u in realms.users["spread"] if cluster.map.shard_for(u.realm_id, u.user_id) == "a"
    )
    assert cluster.nginx is not None
    # A host of its own for the solo realm: regenerate the site with it.
    text = cluster.config_path.read_text().replace(
        'shards = ["b"]', f'shards = ["b"]\nhosts = ["{solo_host}"]'
    )
    hosted = cluster.directory / "hosted.toml"
    hosted.write_text(text)
    port = free_ports(1)[0]
    site = nginxsite.render(load(hosted), listen=f"127.0.0.1:{port}")
    assert f"{solo_host} eventq_shard_b;" in site
    nginx = Nginx(cluster.directory / "nginx-hosted", site, port).start()
    session = requests.Session()
    session.auth = (user.email, user.api_key)
    session.headers["Host"] = solo_host
    try:
        b_log_before = len(cluster.shards["b"].settled_log())
        register = session.post(f"{nginx.url}/api/v1/register", timeout=10)
        assert register.status_code == 200, register.text
        queue_id = register.json()["queue_id"]
        assert [q["queue_id"] for q in cluster.shards["a"].user_queues(user.user_id)] == [queue_id]

        def poll() -> requests.Response:
            return session.get(
                f"{nginx.url}/api/v1/events",
                params={"queue_id": queue_id, "last_event_id": "-1"},
                timeout=30,
            )

        with ThreadPoolExecutor(1) as pool:
            parked = pool.submit(poll)
            cluster.shards["a"].wait_parked(user.user_id, queue_id)
            send_event(
                user.realm_id, {"type": "via_nginx"}, [user.user_id], config=cluster.producer()
            )
            response = parked.result(timeout=15)
        assert response.status_code == 200, response.text
        assert [e["type"] for e in response.json()["events"]] == ["via_nginx"]
        b_log = cluster.shards["b"].settled_log()[b_log_before:]
        assert "X-Accel-Redirect of GET /api/v1/events to shard a" in b_log
        assert "forwarding GET" not in b_log
        assert "forwarding POST /api/v1/register to shard a" in b_log
        # The internal location cannot be asked for from outside.
        outside = session.get(f"{nginx.url}/internal/eventq/a/api/v1/events", timeout=10)
        assert outside.status_code == 404
    finally:
        session.close()
        nginx.stop()


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_event_stream_reaches_the_owner_from_any_entry_and_comes_as_written(
    cluster: Cluster, realms: Realms, entry: str
):
    """Each event is read before the next is sent: nothing on the way (the
    other shard's relay, nginx's X-Accel-Redirect) holds a write back."""
    user = realms.users["solo"][0]  # owned by b: entry a relays, nginx redirects
    client = connect(cluster, user, entry)
    stream: EventStream | None = None
    try:
        queue_id = client.register(event_types=["streamed"])["queue_id"]
        stream = EventStream(client.server.url, client, queue_id)
        assert stream.response.status == 200
        assert stream.response.getheader("Content-Type") == "text/event-stream; charset=utf-8"
        assert stream.message() == {"retry": "500"}
        owner = cluster.owner(user)
        for n in range(3):
            owner.wait_parked(user.user_id, queue_id)
            send_event(
                user.realm_id,
                {"type": "streamed", "n": n},
                [user.user_id],
                config=cluster.producer(),
            )
            [event] = stream.events(1)
            assert event == {"id": str(n), "data": {"type": "streamed", "n": n, "id": n}}
        # The reconnection, as an EventSource makes it, through the same entry.
        stream.conn.close()
        stream = EventStream(client.server.url, client, queue_id, header_id="2")
        send_event(
            user.realm_id, {"type": "streamed", "n": 3}, [user.user_id], config=cluster.producer()
        )
        [event] = stream.events(1)
        assert event["data"] == {"type": "streamed", "n": 3, "id": 3}
        # Acknowledged through 2 by the reconnection: the queue holds event 3.
        [queue] = [q for q in owner.user_queues(user.user_id) if q["queue_id"] == queue_id]
        assert queue["events"] == 1
        stream.conn.close()
        stream = None
        assert client.request("DELETE", "events", queue_id=queue_id).status_code == 200
    finally:
        if stream is not None:
            stream.conn.close()
        client.close()


def test_forwarded_requests_need_the_secret_and_are_never_forwarded_twice(
    cluster: Cluster, realms: Realms
):
    user = realms.users["solo"][1]  # owned by b, with no queue
    assert cluster.shards["b"].user_queues(user.user_id) == []
    auth = (user.email, user.api_key)
    url = f"{cluster.shards['a'].url}/api/v1/register"
    wrong = requests.post(url, auth=auth, headers={"X-Eventq-Forwarded": "guess"}, timeout=10)
    assert wrong.status_code == 403
    assert wrong.json() == {"result": "error", "msg": "Access denied", "code": "BAD_REQUEST"}
    # With the secret, shard a believes the request came from a shard that
    # thought a owns the user: the shards disagree, and it says so.
    looped = requests.post(url, auth=auth, headers={"X-Eventq-Forwarded": SECRET}, timeout=10)
    assert looped.status_code == 503
    assert looped.json()["code"] == "SHARD_MISMATCH"
    assert "every shard must run the same config" in cluster.shards["a"].settled_log()
    assert cluster.shards["b"].user_queues(user.user_id) == []


def test_a_public_channel_message_reaches_all_public_streams_queues_on_every_shard(
    cluster: Cluster, realms: Realms
):
    by_shard = {
        name: next(
            u
            for u in realms.users["spread"]
            if cluster.map.shard_for(u.realm_id, u.user_id) == name
        )
        for name in ("a", "b")
    }
    watchers = {name: connect(cluster, user, "nginx") for name, user in by_shard.items()}
    try:
        queues = {
            name: c.register(all_public_streams=True, event_types=["message"])["queue_id"]
            for name, c in watchers.items()
        }
        message = {
            "type": "stream",
            "display_recipient": "general",
            "subject": "t",
            "content": "hi",
            "sender_email": "x@example.com",
        }
        # Only the user on shard a is a recipient; b's watcher hears it anyway.
        send_event(
            realms.ids["spread"],
            {"type": "message", "message": message, "invite_only": False},
            [{"id": by_shard["a"].user_id, "flags": []}],
            config=cluster.producer(),
        )
        for name, client in watchers.items():
            events = wait_for(
                lambda c=client, q=queues[name]: c.events(q, -1),
                10,
                f"the message on shard {name}",
            )
            assert [e["message"]["content"] for e in events] == ["hi"]
        # A private channel's message reaches no one who was not named.
        send_event(
            realms.ids["spread"],
            {"type": "message", "message": {**message, "content": "secret"}, "invite_only": True},
            [{"id": by_shard["a"].user_id, "flags": []}],
            config=cluster.producer(),
        )
        got = wait_for(lambda: watchers["a"].events(queues["a"], 0), 10)
        assert [e["message"]["content"] for e in got] == ["secret"]
        assert watchers["b"].events(queues["b"], 0) == []
    finally:
        for client in watchers.values():
            client.close()


def test_an_action_on_one_shard_reaches_a_user_on_the_other(cluster: Cluster, realms: Realms):
    sender = next(
        u for u in realms.users["spread"] if cluster.map.shard_for(u.realm_id, u.user_id) == "a"
    )
    receiver = next(
        u for u in realms.users["spread"] if cluster.map.shard_for(u.realm_id, u.user_id) == "b"
    )
    alice, bob = connect(cluster, sender, "a"), connect(cluster, receiver, "b")
    try:
        alice_q = alice.register(event_types=["message"])["queue_id"]
        bob_q = bob.register(event_types=["message"])["queue_id"]
        parked = bob.park(bob_q, -1)
        sent = alice.request(
            "POST", "messages", type="direct", to=[receiver.user_id], content="across shards"
        )
        assert sent.status_code == 200, sent.text
        response = parked.result(timeout=15)
        [event] = response.json()["events"]
        assert event["message"]["content"] == "across shards"  # apply_markdown is off
        # The sender, on shard a, got its copy straight from its own shard.
        [mine] = alice.events(alice_q, -1)
        assert mine["message"]["id"] == event["message"]["id"]
    finally:
        alice.close()
        bob.close()


def test_the_real_zulip_client_works_through_nginx_unchanged(cluster: Cluster, realms: Realms):
    assert cluster.nginx is not None
    user = realms.users["solo"][1]  # on shard b; nginx may hand it to either
    listener = Listener(Entry(cluster, "nginx", user), user, '["zulip_check"]')
    try:
        listener.wait_polling()
        send_event(
            user.realm_id,
            {"type": "zulip_check", "n": 1},
            [user.user_id],
            config=cluster.producer(),
        )
        assert listener.next() == {"type": "zulip_check", "n": 1, "id": 0}
    finally:
        listener.stop()


def test_a_deactivation_on_one_shard_ends_the_users_queues_on_the_other(
    cluster: Cluster, realms: Realms, world: World
):
    realm = realms.names["spread"]
    admin = next(
        u
        for u in (world.user(realm, "administrator") for _ in range(4))
        if cluster.map.shard_for(u.realm_id, u.user_id) == "a"
    )
    target = next(
        u for u in (world.user(realm) for _ in range(4)) if cluster.owner(u) is cluster.shards["b"]
    )
    client = connect(cluster, target, "nginx")
    try:
        queue_id = client.register()["queue_id"]
        # The admin's request is served by shard a; the notice goes to every
        # shard, though the deactivated user is not among its recipients.
        done = requests.delete(
            f"{cluster.shards['a'].url}/api/v1/users/{target.user_id}",
            auth=(admin.email, admin.api_key),
            timeout=10,
        )
        assert done.status_code == 200, done.text
        wait_for(
            lambda: cluster.shards["b"].user_queues(target.user_id) == [],
            10,
            "shard b to end the deactivated user's queue",
        )
        refused = client.get_events(queue_id=queue_id, last_event_id=-1, dont_block=True)
        assert refused.status_code == 401
    finally:
        client.close()


def test_forwarding_failures_are_a_502_the_client_retries(
    database_url: str, amqp_url: str, realms: Realms, tmp_path
):
    """A shard that refuses the others (a different secret) or is down: the
    client is told to retry, never given the owner's 403."""
    made = Cluster(database_url, amqp_url, tmp_path, {realms.ids["solo"]: ["b"]})
    made.shards["b"].extra_env["EVENTQ_SHARED_SECRET"] = "a-different-secret"
    user = realms.users["solo"][0]
    with running(made, nginx=False) as cluster:
        client = connect(cluster, user, "a")
        try:
            refused = client.request("POST", "register")
            assert refused.status_code == 502, refused.text
            assert refused.json()["code"] == "SHARD_UNAVAILABLE"
            assert refused.headers["Retry-After"] == "1"
            assert "refused a request this shard forwarded" in cluster.shards["a"].settled_log()
            cluster.shards["b"].stop()
            down = client.get_events(queue_id="no-such-queue", last_event_id=-1, dont_block=True)
            assert down.status_code == 502
            assert down.json()["code"] == "SHARD_UNAVAILABLE"
        finally:
            client.close()


def test_a_forwarded_post_with_expect_100_continue(cluster: Cluster, realms: Realms):
    user = realms.users["solo"][1]  # owned by b, asked of a
    body = urllib.parse.urlencode({"event_types": json.dumps(["x"] * 300)}).encode()
    token = base64.b64encode(f"{user.email}:{user.api_key}".encode()).decode()
    connection = http.client.HTTPConnection("127.0.0.1", cluster.shards["a"].port, timeout=10)
    try:
        connection.request(
            "POST",
            "/api/v1/register",
            body,
            {
                "Authorization": f"Basic {token}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Expect": "100-continue",
            },
        )
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert response.status == 200, answer
    queue_id = answer["queue_id"]
    assert queue_id in [q["queue_id"] for q in cluster.shards["b"].user_queues(user.user_id)]
    requests.delete(
        f"{cluster.shards['b'].url}/api/v1/events",
        data={"queue_id": queue_id},
        auth=(user.email, user.api_key),
        timeout=10,
    ).raise_for_status()


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GET /api/v1/events?queue_id=" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414,
         "URI_TOO_LONG"),
        (b"GET /api/v1/server_settings HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 20_000
         + b"\r\n\r\n", 431, "HEADERS_TOO_LARGE"),
        (b"HELLO\r\n\r\n", 400, "BAD_REQUEST"),
        (b"POST /api/v1/register HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
         b"Content-Length: 5000000\r\n\r\n", 413, "REQUEST_TOO_LARGE"),
        (b"GET /internal/eventq/a/api/v1/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         404, "NOT_FOUND"),
        (b"POST /api/v1/register HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
         b"Transfer-Encoding: gzip\r\n\r\n", 501, "BAD_REQUEST"),
    ],
    ids=["long-url", "long-header", "not-http", "large-body", "internal-location",
         "unknown-transfer-encoding"],
)  # fmt: skip
def test_what_nginx_refuses_itself_is_the_api_json_error(
    cluster: Cluster, request_bytes: bytes, status: int, code: str
):
    assert cluster.nginx is not None
    port = int(cluster.nginx.url.rsplit(":", 1)[1])
    got, headers, body = raw_exchange(port, request_bytes)
    assert got == status, (headers, body)
    assert headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["result"] == "error"
    assert answer["code"] == code
