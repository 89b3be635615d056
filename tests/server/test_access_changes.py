"""A change of a user's access reaches every shard at once (docs/behaviour.md,
"Security"): a new role, a logout and a new API key make every shard forget
what it cached of the user, and a member made a guest loses the queues taking
every public channel, on whichever shard holds them. Two shards, each caching
credentials for ten minutes: nothing here waits for a cache to expire."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import psycopg
import pytest
import requests

from generation import accounts
from generation.send import close_for_thread, send_event
from tests.shards import Cluster, connect, running
from tests.support import SECRET, Api, World, make_guest, run_eventq, wait_for


class People:
    """A realm on shards a and b: an administrator owned by a, members owned by b."""

    def __init__(self, world: World):
        self.realm = world.realm()
        self.admins = [world.user(self.realm, "administrator") for _ in range(4)]
        self.members = [world.user(self.realm) for _ in range(12)]
        self.realm_id = self.admins[0].realm_id


@pytest.fixture(scope="module")
def people(world: World) -> People:
    return People(world)


@pytest.fixture(scope="module")
def cluster(
    database_url: str, amqp_url: str, people: People, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    made = Cluster(
        database_url,
        amqp_url,
        tmp_path_factory.mktemp("cluster"),
        {people.realm_id: ["a", "b"]},
        env={"EVENTQ_AUTH_CACHE_SECS": "600"},
    )
    with running(made, nginx=False) as started:
        yield started


def _owned_by(cluster: Cluster, users: list[accounts.CreatedUser], shard: str) -> list:
    return [u for u in users if cluster.map.shard_for(u.realm_id, u.user_id) == shard]


def _status(url: str, user: accounts.CreatedUser, method: str = "GET", **data: str) -> int:
    response = requests.request(
        method, url, auth=(user.email, user.api_key), data=data or None, timeout=30
    )
    return response.status_code


def test_a_member_made_a_guest_loses_every_public_channel_on_every_shard(
    cluster: Cluster, people: People
):
    admin = _owned_by(cluster, people.admins, "a")[0]
    member = _owned_by(cluster, people.members, "b")[0]
    shard_a, shard_b = cluster.shards["a"], cluster.shards["b"]
    # Registered through shard a, which authenticates them (and caches it)
    # and forwards to b, their owner.
    client = connect(cluster, member, "a")
    try:
        watching = client.register(all_public_streams=True, event_types=["message"])["queue_id"]
        plain = client.register(event_types=["realm_user"])["queue_id"]
        assert {q["queue_id"] for q in shard_b.user_queues(member.user_id)} == {watching, plain}
        make_guest(shard_a.url, admin, member.user_id)
        # Shard b, which holds the queues, ends the one a guest may not have.
        wait_for(
            lambda: [q["queue_id"] for q in shard_b.user_queues(member.user_id)] == [plain],
            what="shard b to end the queue taking every public channel",
        )
        gone = client.get_events(queue_id=watching, last_event_id=-1, dont_block=True).json()
        assert (gone["code"], gone["reason"]) == ("BAD_EVENT_QUEUE_ID", "role_changed")
        # The other queue goes on, and tells them of their new role.
        told = wait_for(lambda: client.events(plain, -1), what="the realm_user event")
        assert told[0]["person"] == {"user_id": member.user_id, "role": 600}
        # Neither shard registers such a queue for them again: a forgot the
        # member it had cached when it served the change, b when told.
        for entry in ("a", "b"):
            again = connect(cluster, member, entry)
            try:

                def refused(api=again) -> bool:
                    response = api.request("POST", "register", all_public_streams=True)
                    return response.status_code == 400

                wait_for(refused, what=f"shard {entry} to refuse all_public_streams")
            finally:
                again.close()
    finally:
        client.close()


def _login(url: str, user: accounts.CreatedUser) -> requests.Session:
    browser = requests.Session()
    response = browser.post(
        f"{url}/json/login", data={"username": user.email, "api_key": user.api_key}, timeout=30
    )
    assert response.status_code == 200, response.text
    return browser


def test_a_logout_on_one_shard_is_refused_on_the_other_at_once(cluster: Cluster, people: People):
    member = people.members[1]
    shard_a, shard_b = cluster.shards["a"], cluster.shards["b"]
    browser = _login(shard_a.url, member)
    copied = requests.Session()  # the same session, kept aside
    copied.cookies.set("eventq_session", browser.cookies["eventq_session"])
    me = "/json/users/me"
    for shard in (shard_a, shard_b):  # cached on both
        assert copied.get(f"{shard.url}{me}", timeout=30).status_code == 200
    out = browser.post(
        f"{shard_a.url}/json/logout",
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        timeout=30,
    )
    assert out.status_code == 200, out.text
    assert copied.get(f"{shard_a.url}{me}", timeout=30).status_code == 401
    wait_for(
        lambda: copied.get(f"{shard_b.url}{me}", timeout=30).status_code == 401,
        what="shard b to refuse the ended session (its cache keeps it ten minutes)",
    )


def test_a_rotated_key_is_refused_on_every_shard_at_once(cluster: Cluster, people: People):
    member = people.members[2]
    shard_a, shard_b = cluster.shards["a"], cluster.shards["b"]
    for shard in (shard_a, shard_b):  # cached on both
        assert _status(f"{shard.url}/api/v1/users/me", member) == 200
    rotated = run_eventq(
        "user", "rotate-key", "--realm", people.realm, "--email", member.email,
        EVENTQ_DATABASE_URL=cluster.database_url,
        EVENTQ_AMQP_URL=cluster.amqp_url,
        EVENTQ_NOTIFY_QUEUE=cluster.notify_base,
        EVENTQ_SHARDING=str(cluster.config_path),
        EVENTQ_SHARED_SECRET=SECRET,
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    assert "were not told" not in rotated.stderr
    for shard in (shard_a, shard_b):
        wait_for(
            lambda url=shard.url: _status(f"{url}/api/v1/users/me", member) == 401,
            what="the old key refused (the cache keeps it ten minutes)",
        )


def test_the_servers_notice_of_new_credentials_reaches_no_queue(
    start_server, world: World, tmp_path
):
    import signal

    server = start_server(EVENTQ_CHECKPOINT_SECS="1")
    server.wait_consuming()
    user = world.user()
    client = Api(server, user)
    everything = client.register()  # every event type
    queue_id = everything["queue_id"]
    browser = _login(server.url, user)
    out = browser.post(
        f"{server.url}/json/logout",
        headers={"X-CSRFToken": browser.cookies["csrftoken"]},
        timeout=30,
    )
    assert out.status_code == 200, out.text
    rotated = run_eventq(
        "user", "rotate-key", "--realm", _subdomain(server, user), "--email", user.email,
        EVENTQ_DATABASE_URL=server.database_url,
        EVENTQ_AMQP_URL=server.amqp_url,
        EVENTQ_NOTIFY_QUEUE=server.notify_queue,
        EVENTQ_SHARED_SECRET=SECRET,
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    new_key = json.loads(rotated.stdout)["api_key"]
    client.session.auth = (user.email, new_key)
    wait_for(lambda: _status(f"{server.url}/api/v1/users/me", user) == 401, what="the old key")
    send_event(user.realm_id, {"type": "marker"}, [user.user_id], config=server.producer())
    close_for_thread()
    # Live: the marker, nothing of the logout or the new key.
    live = wait_for(lambda: client.events(queue_id, -1), what="the marker")
    assert [e["type"] for e in live] == ["marker"]
    # Resumed from before them: the same.
    resumed = client.register(resume_from=everything["stream_position"])
    assert [e["type"] for e in client.events(resumed["queue_id"], -1)] == ["marker"]
    # Rebuilt from the checkpoint and the log after a crash: the same.
    wait_for(lambda: _checkpointed(server, queue_id), what="a checkpoint with the queue")
    server.stop(signal.SIGKILL)
    server.start()
    after = wait_for(lambda: client.events(queue_id, -1), what="the rebuilt queue")
    assert [e["type"] for e in after if e["type"] != "restart"] == ["marker"]
    client.close()


def _subdomain(server, user: accounts.CreatedUser) -> str:
    with psycopg.connect(server.database_url) as conn:
        row = conn.execute("SELECT subdomain FROM realms WHERE id = %s", (user.realm_id,))
        found = row.fetchone()
    assert found is not None
    return str(found[0])


def _checkpointed(server, queue_id: str) -> bool:
    from server.durability import persistence

    try:
        data = persistence.load(persistence.checkpoint_file(server.state_dir))
    except persistence.CorruptSnapshot:
        return False
    return any(q["queue_id"] == queue_id for q in (data or {}).get("queues", []))


def test_a_role_change_while_a_resume_reads_the_log_refuses_the_resume(start_server, world: World):
    server = start_server()
    server.wait_consuming()
    realm = world.realm()
    admin, member = world.user(realm, "administrator"), world.user(realm)
    client = Api(server, member)
    position = client.register(event_types=["message"])["stream_position"]
    resuming: dict = {}
    with psycopg.connect(server.database_url) as conn:
        # The resume's first look (the user's floor) waits behind this lock
        # while the member is made a guest.
        conn.execute("LOCK TABLE user_stream_floors IN ACCESS EXCLUSIVE MODE")

        def resume() -> None:
            resuming["answer"] = client.request(
                "POST", "register", all_public_streams=True, event_types=["message"],
                resume_from=position,
            )  # fmt: skip

        thread = threading.Thread(target=resume)
        thread.start()
        wait_for(
            lambda: "waiting" in _activity(server, "user_stream_floors"),
            what="the resume waiting for the floors",
        )
        make_guest(server.url, admin, member.user_id)
        wait_for(lambda: "is a guest now" in server.log(), what="the role change delivered")
    thread.join(60)
    answer = resuming["answer"]
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "ACCESS_CHANGED"
    assert answer.headers["Retry-After"] == "1"
    # No queue taking every public channel made for a guest; asked again, refused.
    assert len(server.user_queues(member.user_id)) == 1
    again = client.request("POST", "register", all_public_streams=True, resume_from=position)
    assert again.status_code == 400, again.text
    client.close()


def _activity(server, table: str) -> str:
    """What the server's connections waiting on a lock of `table` are doing."""
    with psycopg.connect(server.database_url) as conn:
        rows = conn.execute(
            "SELECT a.wait_event_type FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE NOT l.granted AND l.relation = %s::regclass",
            (table,),
        ).fetchall()
    return "waiting" if rows else ""
