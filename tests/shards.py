"""Several shard processes and a real nginx in front of them, for the
sharding tests and the two-shard benchmark: all on loopback ports, started and
stopped by the caller."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from generation import accounts
from generation.config import ProducerConfig
from generation.sharding import ShardMap, load
from server.admin import nginxsite
from tests.support import SECRET, Api, ServerProcess, wait_for


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (held together, so they differ)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def nginx_binary() -> str:
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
    )
    if found is None:
        raise AssertionError("nginx is not installed: run `bash deploy/test.sh` (it installs it)")
    return found


class Nginx:
    """nginx with the site `eventq sharding nginx` generates, in its own
    prefix directory, in the foreground."""

    def __init__(self, directory: Path, site: str, port: int):
        self.directory = directory
        self.port = port
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "eventq.conf").write_text(site)
        temp = "\n".join(
            f"    {kind}_temp_path {directory / kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        user = "user root;\n" if os.geteuid() == 0 else ""
        (directory / "nginx.conf").write_text(
            f"{user}worker_processes 1;\ndaemon off;\npid {directory / 'nginx.pid'};\n"
            f"error_log {directory / 'error.log'} info;\n"
            "events { worker_connections 8192; }\n"
            f"http {{\n    access_log {directory / 'access.log'};\n{temp}\n"
            f"    include {directory / 'eventq.conf'};\n}}\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, *args: str) -> list[str]:
        conf = str(self.directory / "nginx.conf")
        return [nginx_binary(), "-c", conf, "-e", str(self.directory / "error.log"), *args]

    def start(self) -> Nginx:
        check = subprocess.run(self.command("-t"), capture_output=True, text=True, check=False)
        assert check.returncode == 0, f"nginx -t refused the site:\n{check.stderr}"
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(
            lambda: port_open(self.port) or self.proc.poll() is not None,  # type: ignore[union-attr]
            30,
            "nginx to listen",
        )
        assert self.proc.poll() is None, f"nginx exited:\n{self.error_log()}"
        return self

    def reload(self, site: str) -> None:
        """`nginx -s reload` with `site` in place of the current one, as
        `systemctl reload nginx` does (after `nginx -t`). Returns once the old
        worker has stopped accepting (it logs so): every new connection then
        gets the new site, while the old worker finishes what it holds."""
        assert self.proc is not None, "nginx was not started"
        assert self.proc.poll() is None, f"nginx exited:\n{self.error_log()}"
        (self.directory / "eventq.conf").write_text(site)
        check = subprocess.run(self.command("-t"), capture_output=True, text=True, check=False)
        assert check.returncode == 0, f"nginx -t refused the site:\n{check.stderr}"
        # One worker (worker_processes 1): one such line per reload.
        retired = self.error_log().count("gracefully shutting down")
        done = subprocess.run(
            self.command("-s", "reload"), capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, f"nginx -s reload:\n{done.stderr}"
        wait_for(
            lambda: self.error_log().count("gracefully shutting down") > retired,
            30,
            "nginx's old worker to stop accepting",
        )

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text() if path.exists() else ""

    def access_log(self) -> str:
        path = self.directory / "access.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # Fast shutdown: a graceful one (SIGQUIT) waits for every long poll.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def sharding_toml(ports: dict[str, int], realms: dict[int, list[str]], default: str) -> str:
    lines = [f'default_shard = "{default}"', ""]
    for name, port in ports.items():
        lines += [f"[shards.{name}]", 'host = "127.0.0.1"', f"port = {port}", ""]
    for realm_id, shards in realms.items():
        lines += ["[[realms]]", f"id = {realm_id}", f"shards = {json.dumps(shards)}", ""]
    return "\n".join(lines)


class Cluster:
    """Shard processes sharing a sharding config, a notify-queue prefix and a
    state directory (their files carry the shard's name)."""

    def __init__(
        self,
        database_url: str,
        amqp_url: str,
        directory: Path,
        realms: dict[int, list[str]],
        shards: tuple[str, ...] = ("a", "b"),
        env: dict[str, str] | None = None,
    ):
        self.amqp_url = amqp_url
        self.database_url = database_url
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.config_path = directory / "sharding.toml"
        ports = dict(zip(shards, free_ports(len(shards)), strict=True))
        self.config_path.write_text(sharding_toml(ports, realms, shards[0]))
        self.map: ShardMap = load(self.config_path)
        self.notify_base = f"notify_tornado.{uuid.uuid4().hex[:8]}"
        self.state_dir = directory / "state"
        self.shards = {
            name: ServerProcess(
                database_url,
                self.state_dir,
                {
                    "EVENTQ_SHARDING": str(self.config_path),
                    "EVENTQ_SHARD": name,
                    "EVENTQ_NOTIFY_QUEUE": self.notify_base,
                    **(env or {}),
                },
                amqp_url,
                serve_args=(),
            )
            for name in shards
        }
        self.nginx: Nginx | None = None

    def start(self) -> Cluster:
        for shard in self.shards.values():
            shard.start()
        for shard in self.shards.values():
            shard.wait_consuming()
        return self

    def start_nginx(self) -> Nginx:
        port = free_ports(1)[0]
        site = nginxsite.render(self.map, listen=f"127.0.0.1:{port}")
        self.nginx = Nginx(self.directory / "nginx", site, port).start()
        return self.nginx

    def stop(self) -> None:
        if self.nginx is not None:
            self.nginx.stop()
        for shard in self.shards.values():
            shard.kill()

    def owner(self, user: accounts.CreatedUser) -> ServerProcess:
        return self.shards[self.map.shard_for(user.realm_id, user.user_id)]

    def others(self, user: accounts.CreatedUser) -> list[ServerProcess]:
        owner = self.owner(user)
        return [shard for shard in self.shards.values() if shard is not owner]

    def producer(self) -> ProducerConfig:
        return ProducerConfig(
            amqp_url=self.amqp_url,
            notify_queue=self.notify_base,
            state_dir=self.state_dir,
            configured_secret=SECRET,
            sharding_path=self.config_path,
            database_url=self.database_url,
        )


@contextmanager
def running(cluster: Cluster, nginx: bool = True) -> Iterator[Cluster]:
    with ExitStack() as stack:
        stack.callback(cluster.stop)
        cluster.start()
        if nginx:
            cluster.start_nginx()
        yield cluster


class Entry:
    """Where a client connects (a shard, or nginx), as `Api` and `Listener`
    use a server: its URL, and the owner shard's view of the user's queues
    (the client never learns which shard that is)."""

    def __init__(self, cluster: Cluster, name: str, user: accounts.CreatedUser):
        self.cluster = cluster
        self.name = name
        self.owner = cluster.owner(user)

    @property
    def url(self) -> str:
        if self.name == "nginx":
            assert self.cluster.nginx is not None
            return self.cluster.nginx.url
        return self.cluster.shards[self.name].url

    def user_queues(self, user_id: int) -> list[dict[str, Any]]:
        return self.owner.user_queues(user_id)

    def wait_parked(self, user_id: int, queue_id: str, timeout: float = 30.0) -> None:
        self.owner.wait_parked(user_id, queue_id, timeout)


def connect(cluster: Cluster, user: accounts.CreatedUser, entry: str) -> Api:
    """A client of `user` that talks to `entry` ("a", "b", ... or "nginx")."""
    return Api(Entry(cluster, entry, user), user)  # type: ignore[arg-type]
