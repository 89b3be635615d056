"""The sharding config: which shard process holds which user's queues.

A TOML file under the operator's control (`EVENTQ_SHARDING` names it):

    default_shard = "a"                 # realms not named below
    background_tasks_on = "a"           # optional (default_shard): runs background updates
    internal_networks = ["10.1.0.0/16"] # besides loopback: other shards' hosts

    [shards.a]
    host = "127.0.0.1"                  # where the shard listens
    port = 9800
    [shards.b]
    host = "127.0.0.1"
    port = 9801

    [[realms]]
    id = 2                              # the realm id `eventq realm create` printed
    shards = ["a", "b"]                 # a user is on shards[user_id % 2]
    hosts = ["acme.example.com"]        # optional: nginx sends these straight here

    [nginx]                             # optional: `eventq sharding nginx` defaults
    listen = "80"
    server_name = "events.example.com"

Shards, producers and the generated nginx site read the same file, so they
agree on where every user's queues are (`shards[user_id % n]`, Zulip's rule for
a realm on several Tornado processes).
`load` refuses a file that is inconsistent and says what is wrong.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from generation.events.realm import deactivated_realm_id
from generation.events.users import access_change
from generation.notice import NoticeUser

# Which shards a notice must reach: those of its users; every shard of its
# realm (a public channel message, for all_public_streams queues); every shard
# (a change of a user's access: a deactivation, a new role, a logout or a new
# API key: each shard forgets what it cached of the user, as any may have
# authenticated them, and the user's own ends the queues it must; likewise
# for every user of a deactivated realm).
Reach = Literal["users", "realm", "all"]

SHARD_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
# A host name: labels of letters, digits and '-' joined by dots (nginx matches
# it exactly: no wildcards, no regexes).
_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9-]{1,63}(\.[A-Za-z0-9-]{1,63})*")
# Words an nginx `map` block reads as its own parameters, not as host names.
_MAP_KEYWORDS = {"default", "hostnames", "include", "volatile"}
# What may follow nginx's `listen` and `server_name` (no ';', braces, quotes).
_NGINX_ARGUMENT = re.compile(r"[A-Za-z0-9.:\[\]*_ -]{1,200}")
_TOP_KEYS = {
    "default_shard",
    "background_tasks_on",
    "internal_networks",
    "shards",
    "realms",
    "nginx",
}
_SHARD_KEYS = {"host", "port"}
_REALM_KEYS = {"id", "shards", "hosts"}
_NGINX_KEYS = {"listen", "server_name"}
# Addresses that listen on every interface: they clash with any host's port.
_WILDCARD = {"0.0.0.0", "::", "*"}  # noqa: S104

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class ShardingError(ValueError):
    """The sharding config cannot be used; the message names the file and the
    problem."""


@dataclasses.dataclass(frozen=True)
class Shard:
    name: str
    host: str
    port: int

    @property
    def address(self) -> str:
        """host:port, bracketed for IPv6."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"


@dataclasses.dataclass(frozen=True)
class ShardMap:
    shards: Mapping[str, Shard]
    default_shard: str
    # realm id -> its shards, in the order that `user_id % n` indexes.
    realms: Mapping[int, tuple[str, ...]]
    # Host header -> realm id, for nginx.
    hosts: Mapping[str, int]
    internal_networks: tuple[Network, ...] = ()
    nginx_listen: str = ""
    nginx_server_name: str = ""
    source: str = "<config>"
    # The shard that runs the database's background updates (server/database/background.py).
    background_tasks_on: str = ""

    def known_host_names(self) -> set[str]:
        """The host names this config gives the service: the shards' hosts,
        the realms' hosts and nginx's server names (wildcards left out)."""
        names = {shard.host.lower() for shard in self.shards.values()}
        names |= {host.lower() for host in self.hosts}
        names |= {name.lower() for name in self.nginx_server_name.split() if "*" not in name}
        return names

    def shards_of(self, realm_id: int | None) -> tuple[str, ...]:
        if realm_id is None:
            return (self.default_shard,)
        return self.realms.get(realm_id, (self.default_shard,))

    def shard_for(self, realm_id: int | None, user_id: int) -> str:
        """The shard holding the queues of `user_id` of `realm_id`."""
        shards = self.shards_of(realm_id)
        return shards[user_id % len(shards)]

    def split(
        self, realm_id: int | None, users: Sequence[NoticeUser], reach: Reach = "users"
    ) -> dict[str, list[NoticeUser]]:
        """`users` grouped by shard, in the realm's shard order. With `reach`
        "realm" (or "all") every shard of the realm (or of the config) gets a
        notice, with no users if none of them is there."""
        shards = self.shards_of(realm_id)
        parts: dict[str, list[NoticeUser]] = {}
        if reach == "realm":
            parts = {name: [] for name in shards}
        elif reach == "all":
            parts = {name: [] for name in self.shards}
        n = len(shards)
        for user in users:
            user_id = user if isinstance(user, int) else user["id"]
            parts.setdefault(shards[user_id % n], []).append(user)
        return parts

    def is_internal(self, address: str) -> bool:
        """Whether a caller at `address` is another shard (loopback, or one
        of `internal_networks`)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        if ip.is_loopback:
            return True
        return any(ip in network for network in self.internal_networks)


def reach_of(event: Mapping[str, Any]) -> Reach:
    """Which shards a notice carrying `event` must reach (see `Reach`)."""
    if access_change(event) is not None or deactivated_realm_id(event) is not None:
        return "all"
    if reaches_whole_realm(event):
        return "realm"
    return "users"


def reaches_whole_realm(event: Mapping[str, Any]) -> bool:
    """Whether the server also delivers `event` to the realm's
    `all_public_streams` queues: a channel message marked `invite_only` false
    (the same rule as `queues.specialize.is_public_channel_message`)."""
    message = event.get("message")
    return (
        event.get("type") == "message"
        and isinstance(message, Mapping)
        and message.get("type") == "stream"
        and event.get("invite_only") is False
    )


def notify_queue(base: str, shard: str) -> str:
    """The durable queue shard `shard` consumes (Zulip: notify_tornado_port_<port>)."""
    return f"{base}_{shard}"


def _table(value: object, where: str, keys: set[str], source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ShardingError(f"{source}: {where} must be a table")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise ShardingError(
            f"{source}: {where} has unknown keys {', '.join(unknown)}"
            f" (known: {', '.join(sorted(keys))})"
        )
    return value


def _shards(raw: object, source: str) -> dict[str, Shard]:
    if not isinstance(raw, dict) or not raw:
        raise ShardingError(f"{source}: no shards: add a [shards.<name>] table per shard")
    shards: dict[str, Shard] = {}
    listening: dict[int, list[Shard]] = {}
    for name, entry in raw.items():
        if not SHARD_NAME.fullmatch(name):
            raise ShardingError(
                f"{source}: shard name {name!r} must be 1-40 letters, digits, '_' or '-'"
            )
        table = _table(entry, f"[shards.{name}]", _SHARD_KEYS, source)
        host = _shard_host(table.get("host", "127.0.0.1"), f"[shards.{name}]", source)
        port = table.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ShardingError(f"{source}: [shards.{name}] port must be an integer 1-65535")
        shard = Shard(name, host, port)
        for other in listening.get(port, []):
            if _same_host(other.host, shard.host):
                raise ShardingError(
                    f"{source}: duplicate port: shards {other.name!r} and {name!r}"
                    f" both listen on {shard.address}"
                )
        listening.setdefault(port, []).append(shard)
        shards[name] = shard
    return shards


def _shard_host(value: object, where: str, source: str) -> str:
    """Where a shard listens and the others connect: an IP address or a host
    name, never a wildcard (nothing can connect to 0.0.0.0)."""
    if not isinstance(value, str):
        raise ShardingError(f"{source}: {where} host must be a string")
    host = value.strip()
    if host in _WILDCARD:
        raise ShardingError(
            f"{source}: {where} host {host!r} is a wildcard: name the address other shards"
            " and nginx connect to"
        )
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(host):
        raise ShardingError(
            f"{source}: {where} host {host!r} must be an IP address (IPv6 without brackets)"
            " or a host name"
        )
    return host.lower()


def _same_host(one: str, other: str) -> bool:
    loopback = {"localhost", "127.0.0.1", "::1"}
    return one == other or (one in loopback and other in loopback)


def _realms(
    raw: object, shards: Mapping[str, Shard], source: str
) -> tuple[dict[int, tuple[str, ...]], dict[str, int]]:
    if not isinstance(raw, list):
        raise ShardingError(f"{source}: realms must be an array of [[realms]] tables")
    realms: dict[int, tuple[str, ...]] = {}
    hosts: dict[str, int] = {}
    for index, entry in enumerate(raw):
        where = f"[[realms]] #{index + 1}"
        table = _table(entry, where, _REALM_KEYS, source)
        realm_id = table.get("id")
        if not isinstance(realm_id, int) or isinstance(realm_id, bool) or realm_id <= 0:
            raise ShardingError(f"{source}: {where}: id must be a positive integer (a realm id)")
        names = table.get("shards")
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(name, str) for name in names)
        ):
            raise ShardingError(
                f"{source}: realm {realm_id}: shards must be a non-empty list of shard names"
            )
        unknown = [name for name in names if name not in shards]
        if unknown:
            raise ShardingError(
                f"{source}: realm {realm_id}: unknown shards {', '.join(map(repr, unknown))}"
            )
        if len(set(names)) != len(names):
            raise ShardingError(f"{source}: realm {realm_id}: a shard is listed twice")
        if realm_id in realms:
            before = realms[realm_id]
            kind = "two disjoint shard sets" if not set(before) & set(names) else "twice"
            raise ShardingError(
                f"{source}: realm {realm_id} is on {kind}: {list(before)} and {names};"
                " a realm's users must have one home each"
            )
        realms[realm_id] = tuple(names)
        realm_hosts = table.get("hosts", [])
        if not isinstance(realm_hosts, list) or not all(
            isinstance(host, str)
            and _HOST_NAME.fullmatch(host)
            and host.lower() not in _MAP_KEYWORDS
            for host in realm_hosts
        ):
            raise ShardingError(
                f"{source}: realm {realm_id}: hosts must be a list of host names"
                " (exact names such as acme.example.com)"
            )
        for name in realm_hosts:
            host = name.lower()
            if host in hosts:
                raise ShardingError(
                    f"{source}: host {host!r} is named by realms {hosts[host]} and {realm_id}"
                )
            hosts[host] = realm_id
    return realms, hosts


def _networks(raw: object, source: str) -> tuple[Network, ...]:
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ShardingError(f"{source}: internal_networks must be a list of CIDR strings")
    try:
        return tuple(ipaddress.ip_network(item, strict=False) for item in raw)
    except ValueError as exc:
        raise ShardingError(f"{source}: internal_networks: {exc}") from None


def parse(text: str, source: str = "<config>") -> ShardMap:
    """A `ShardMap` from TOML text; `ShardingError` saying what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ShardingError(f"{source}: not valid TOML: {exc}") from None
    _table(data, "the file", _TOP_KEYS, source)
    shards = _shards(data.get("shards"), source)
    default = data.get("default_shard")
    if default is None:
        raise ShardingError(f"{source}: missing default_shard: name the shard of realms not listed")
    if not isinstance(default, str) or default not in shards:
        raise ShardingError(f"{source}: default_shard {default!r} is not one of the shards")
    background = data.get("background_tasks_on", default)
    if not isinstance(background, str) or background not in shards:
        raise ShardingError(
            f"{source}: background_tasks_on {background!r} is not one of the shards"
        )
    realms, hosts = _realms(data.get("realms", []), shards, source)
    nginx = _table(data.get("nginx", {}), "[nginx]", _NGINX_KEYS, source)
    for key in _NGINX_KEYS:
        value = nginx.get(key, "")
        if not isinstance(value, str) or (value and not _NGINX_ARGUMENT.fullmatch(value)):
            raise ShardingError(
                f"{source}: [nginx] {key} must be a string of nginx arguments"
                " (no ';', braces or quotes)"
            )
    networks = _networks(data.get("internal_networks", []), source)
    for shard in shards.values():
        # Shards forward to each other: each one's address must be accepted
        # as internal by the others.
        try:
            ip = ipaddress.ip_address(shard.host)
        except ValueError:
            continue  # a host name: its address is the operator's to cover
        if not ip.is_loopback and not any(ip in network for network in networks):
            raise ShardingError(
                f"{source}: shard {shard.name!r} listens on {shard.host}, which is not in"
                " internal_networks: the other shards would refuse what it forwards"
            )
    return ShardMap(
        shards=shards,
        default_shard=default,
        realms=realms,
        hosts=hosts,
        internal_networks=networks,
        nginx_listen=str(nginx.get("listen", "")),
        nginx_server_name=str(nginx.get("server_name", "")),
        source=source,
        background_tasks_on=background,
    )


def load(path: Path) -> ShardMap:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ShardingError(f"cannot read the sharding config {path}: {exc.strerror}") from None
    return parse(text, str(path))


_cache: dict[Path, tuple[tuple[int, int, int], ShardMap]] = {}


def load_cached(path: Path) -> ShardMap:
    """`load`, re-read only when the file changes (producers call it for every
    notice). Replace the file by renaming a complete new one over it: an edit
    in place may be read half-written."""
    try:
        stat = path.stat()
    except OSError:
        return load(path)  # raises the readable error
    key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    shard_map = load(path)
    _cache[path] = (key, shard_map)
    return shard_map
