"""The sharding config: what it accepts, what it refuses (with a message that
says what is wrong), and where it puts users."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from generation.config import ProducerConfig
from generation.sharding import (
    ShardingError,
    load,
    load_cached,
    notify_queue,
    parse,
    reach_of,
    reaches_whole_realm,
)
from queues.specialize import is_public_channel_message

REPO = Path(__file__).resolve().parents[2]

TWO_SHARDS = """
default_shard = "a"
[shards.a]
port = 9800
[shards.b]
host = "127.0.0.1"
port = 9801
[[realms]]
id = 2
shards = ["a", "b"]
hosts = ["Acme.example.com"]
[[realms]]
id = 3
shards = ["b"]
"""


def test_users_of_a_spread_realm_go_to_shards_by_user_id_modulo():
    shard_map = parse(TWO_SHARDS)
    assert [shard_map.shard_for(2, user) for user in (10, 11, 12, 13)] == ["a", "b", "a", "b"]
    assert shard_map.shard_for(3, 10) == "b"
    # A realm not named, and a notice without a realm: the default shard.
    assert shard_map.shard_for(99, 11) == "a"
    assert shard_map.shard_for(None, 11) == "a"
    assert shard_map.shards["a"].address == "127.0.0.1:9800"  # host defaults to loopback
    assert shard_map.hosts == {"acme.example.com": 2}


def test_split_groups_users_by_shard_keeping_their_own_data():
    shard_map = parse(TWO_SHARDS)
    users = [10, {"id": 11, "flags": ["read"]}, 12]
    assert shard_map.split(2, users) == {"a": [10, 12], "b": [{"id": 11, "flags": ["read"]}]}
    assert shard_map.split(2, [10]) == {"a": [10]}
    # A public channel message also reaches all_public_streams queues: every
    # shard of the realm gets it, with no users where none of them is.
    assert shard_map.split(2, [10], reach="realm") == {"a": [10], "b": []}
    assert shard_map.split(3, [10], reach="realm") == {"b": [10]}
    # A deactivation reaches every shard: any may hold the user's credentials.
    assert shard_map.split(3, [10], reach="all") == {"a": [], "b": [10]}


def test_reach_of_an_event():
    public = {"type": "message", "message": {"type": "stream"}, "invite_only": False}
    assert reach_of(public) == "realm"
    assert reach_of({**public, "invite_only": True}) == "users"
    deactivated = {
        "type": "realm_user",
        "op": "update",
        "person": {"user_id": 9, "is_active": False},
    }
    assert reach_of(deactivated) == "all"
    renamed = {"type": "realm_user", "op": "update", "person": {"user_id": 9, "full_name": "X"}}
    assert reach_of(renamed) == "users"
    # Every shard forgets a deactivated realm's users (any may have cached them).
    assert reach_of({"type": "realm", "op": "deactivated", "realm_id": 3}) == "all"
    assert reach_of({"type": "realm", "op": "update", "property": "name", "value": "X"}) == "users"


@pytest.mark.parametrize(
    "event",
    [
        {"type": "message", "message": {"type": "stream"}, "invite_only": False},
        {"type": "message", "message": {"type": "stream"}, "invite_only": True},
        {"type": "message", "message": {"type": "stream"}},
        {"type": "message", "message": {"type": "private"}, "invite_only": False},
        {"type": "message", "message": "not a dict", "invite_only": False},
        {"type": "stream", "op": "create", "invite_only": False},
    ],
)
def test_the_producer_and_the_server_agree_on_realm_wide_messages(event):
    assert reaches_whole_realm(event) == is_public_channel_message(event)


def test_shards_on_other_hosts_inside_the_internal_networks():
    shard_map = parse(
        'internal_networks = ["10.1.0.0/16"]\ndefault_shard = "a"\n'
        '[shards.a]\nhost = "10.1.0.1"\nport = 9800\n'
        '[shards.b]\nhost = "10.1.0.2"\nport = 9800\n'
        '[shards.c]\nhost = "::1"\nport = 9800\n'
        '[shards.d]\nhost = "Events-4.internal"\nport = 9800\n'
    )
    assert shard_map.shards["a"].address == "10.1.0.1:9800"
    assert shard_map.shards["c"].address == "[::1]:9800"
    assert shard_map.shards["d"].url == "http://events-4.internal:9800"


def test_internal_callers_are_loopback_and_the_configured_networks():
    shard_map = parse('internal_networks = ["10.1.0.0/16"]\n' + TWO_SHARDS)
    assert shard_map.is_internal("127.0.0.1")
    assert shard_map.is_internal("::1")
    assert shard_map.is_internal("10.1.2.3")
    assert not shard_map.is_internal("10.2.0.1")
    assert not shard_map.is_internal("not an address")
    assert not parse(TWO_SHARDS).is_internal("10.1.2.3")


def config(body: str) -> str:
    return textwrap.dedent(body)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("default_shard = ", "not valid TOML"),
        ('default_shard = "a"', "no shards"),
        ("[shards.a]\nport = 9800", "missing default_shard"),
        ('default_shard = "z"\n[shards.a]\nport = 9800', "default_shard 'z' is not one of"),
        (
            'default_shard = "a"\n[shards.a]\nport = 9800\n[shards.b]\nport = 9800',
            "duplicate port: shards 'a' and 'b' both listen on 127.0.0.1:9800",
        ),
        ('default_shard = "a"\n[shards.a]\nport = 70000', "port must be an integer 1-65535"),
        ('default_shard = ["a"]\n[shards.a]\nport = 1', "default_shard ['a'] is not one of"),
        (
            'default_shard = "a"\n[shards.a]\nhost = "0.0.0.0"\nport = 1',
            "host '0.0.0.0' is a wildcard",
        ),
        (
            'default_shard = "a"\n[shards.a]\nhost = "1.2.3.4; } server {"\nport = 1',
            "must be an IP address (IPv6 without brackets) or a host name",
        ),
        ('default_shard = "a"\n[shards.a]\nhost = "[::1]"\nport = 1', "IPv6 without brackets"),
        (
            'default_shard = "a"\n[shards.a]\nhost = "localhost"\nport = 1\n'
            '[shards.b]\nhost = "127.0.0.1"\nport = 1',
            "duplicate port",
        ),
        (
            'default_shard = "a"\n[shards.a]\nhost = "10.0.0.5"\nport = 1',
            "shard 'a' listens on 10.0.0.5, which is not in internal_networks",
        ),
        ('default_shard = "a"\n[shards.a]\nport = "9800"', "port must be an integer"),
        ('default_shard = "a"\n[shards."a b"]\nport = 9800', "shard name 'a b'"),
        ('default_shard = "a"\n[shards.a]\nport = 9800\nwieght = 2', "unknown keys wieght"),
        ('default_shard = "a"\nshard = 1\n[shards.a]\nport = 9800', "unknown keys shard"),
        (
            TWO_SHARDS + '[[realms]]\nid = 2\nshards = ["b"]',
            "realm 2 is on twice: ['a', 'b'] and ['b']",
        ),
        (
            'default_shard = "a"\n[shards.a]\nport = 1\n[shards.b]\nport = 2\n'
            '[[realms]]\nid = 5\nshards = ["a"]\n[[realms]]\nid = 5\nshards = ["b"]',
            "realm 5 is on two disjoint shard sets",
        ),
        (TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["c"]', "realm 4: unknown shards 'c'"),
        (TWO_SHARDS + "[[realms]]\nid = 4\nshards = []", "realm 4: shards must be a non-empty"),
        (TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["a", "a"]', "a shard is listed twice"),
        (TWO_SHARDS + '[[realms]]\nid = 0\nshards = ["a"]', "id must be a positive integer"),
        (
            TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["a"]\nhosts = ["acme.example.com"]',
            "host 'acme.example.com' is named by realms 2 and 4",
        ),
        (
            TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["a"]\nhosts = ["a b; evil"]',
            "hosts must be a list of host names",
        ),
        (
            TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["a"]\nhosts = ["default"]',
            "hosts must be a list of host names",
        ),
        (
            TWO_SHARDS + '[[realms]]\nid = 4\nshards = ["a"]\nhosts = [".example.com"]',
            "hosts must be a list of host names",
        ),
        (TWO_SHARDS + '[nginx]\nlisten = "80; include x"', "[nginx] listen must be a string"),
        ('internal_networks = ["10.0.0.0/33"]\n' + TWO_SHARDS, "internal_networks"),
        (TWO_SHARDS + "[nginx]\nlisten = 80", "[nginx] listen must be a string"),
        (
            'background_tasks_on = "c"\n' + TWO_SHARDS,
            "background_tasks_on 'c' is not one of the shards",
        ),
    ],
)
def test_an_inconsistent_config_is_refused_with_the_reason(text, message):
    with pytest.raises(ShardingError) as caught:
        parse(text, "sharding.toml")
    assert message in str(caught.value)
    assert str(caught.value).startswith("sharding.toml: ")


def test_a_missing_file_says_which(tmp_path):
    with pytest.raises(ShardingError, match=r"cannot read the sharding config .*nowhere\.toml"):
        load(tmp_path / "nowhere.toml")


def test_the_example_in_deploy_is_valid():
    shard_map = load(REPO / "deploy" / "sharding.example.toml")
    assert list(shard_map.shards) == ["a", "b"]
    assert shard_map.realms == {2: ("a", "b"), 3: ("b",)}


def test_producers_see_a_changed_file(tmp_path):
    path = tmp_path / "sharding.toml"
    path.write_text(TWO_SHARDS)
    assert load_cached(path).shard_for(2, 11) == "b"
    path.write_text(TWO_SHARDS.replace('shards = ["a", "b"]', 'shards = ["a"]'))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert load_cached(path).shard_for(2, 11) == "a"


def test_producer_config_sends_each_shard_to_its_own_queue(tmp_path):
    path = tmp_path / "sharding.toml"
    path.write_text(TWO_SHARDS)
    config = ProducerConfig.from_env(
        {"EVENTQ_SHARDING": str(path), "EVENTQ_NOTIFY_QUEUE": "nq", "EVENTQ_AMQP_URL": ""}
    )
    shard_map = config.shard_map()
    assert shard_map is not None
    target = config.for_shard(shard_map.shards["b"])
    assert target.notify_queue == notify_queue("nq", "b") == "nq_b"
    assert target.notify_url == "http://127.0.0.1:9801/api/internal/notify_tornado"
    assert target.shard_map() is None  # a shard's own config is not split again
    assert ProducerConfig.from_env({}).shard_map() is None
