"""The package as an operator installs it: a wheel built from this checkout,
installed with its analytics extra into a fresh virtual environment outside the
checkout, then the operator's guide (docs/operating.md) run with it, step by step.

Every other test runs the editable checkout, which cannot see a file missing
from the wheel or a path into the checkout (as when `eventq db migrate` from
a wheel once found no migrations). Here nothing of the checkout is on the path: the
commands run from the installed venv, from a directory outside the checkout,
with the environment the systemd units give them (their EnvironmentFile and
Environment lines, their ExecStart commands with the installation's paths
moved under a temporary root).

Steps of the operator's guide and where they run here (what the test cannot
do on a machine without systemd as init, `systemctl`, is checked with
`systemd-analyze verify`, and the units' commands are run as they say; `apt
install` is deploy/bootstrap.sh's, which installs what the tests use):

- install: `pip wheel` + a venv + `pip install <wheel>[analytics]` (fixture);
  the operator's shell: the env file read, the venv's bin first on PATH,
  `eventq` called by name;
- the env file from deploy/systemd/eventq.env.example, with real values,
  installed mode 0600 and owned by root; the units copied into
  <root>/etc/systemd/system, whose commands the test then runs;
- RabbitMQ: `rabbitmqctl add_vhost`, `add_user`, `set_permissions` (fixture);
- configure: the sharding file written aside and renamed over;
  `eventq-migrate.service`'s command (`eventq db migrate`); realm creation;
  `eventq sharding check`, `eventq sharding rabbitmq ... | rabbitmqctl
  import_definitions`, `eventq sharding nginx --output`, `nginx -t`;
- start: `eventq@a` and `eventq@b` as their unit runs them; the background
  updates run by the default shard (`eventq db background status`);
- use: user creation; the `zulip` client through nginx: register, long-poll;
  `eventq send-event` through RabbitMQ; `send_event` from the venv's python;
  the demo realm (`eventq demo`), the browser's files, the OpenAPI document;
- notifications: `eventq-notifications.service`'s command against a mail
  server on loopback: a direct message to a user with no client is one
  email; `eventq notifications status`;
- reshard, the guide's five steps in order (shard `c` added, the realm on
  a, b and c): a user who moves gets BAD_EVENT_QUEUE_ID and registers on the
  new shard, one who does not keeps their queue;
- upgrade: the wheel reinstalled, the migrate unit's command again (nothing
  to apply), the shards restarted one at a time: queues survive;
- back up: `pg_dump`; monitor: each shard's `/metrics`, `rabbitmqctl
  list_queues` (the notify queues and their `.dead` queues);
- SIGTERM (the units' KillSignal), `eventq logs compact`, then
  `eventq-analytics.service`'s command (`eventq analytics run ...`);
- one process: `eventq.service`'s command with EVENTQ_SHARDING removed from
  the env file: register, one event, SIGTERM, its `event_queues.json`; with
  EVENTQ_PORT (9800 may be taken here) and EVENTQ_DEMO=1, the demo page
  (`/demo`), which the shards keep off.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import requests
import zulip
from psycopg import conninfo

from queues.compiled import COMPILED
from tests.notifications.mailbox import Mailbox, SmtpServer
from tests.shards import Nginx, free_ports
from tests.support import rabbitmqctl, wait_for

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
ENV_EXAMPLE = UNITS / "eventq.env.example"
MIGRATIONS = sorted(p.name for p in (REPO / "deploy" / "migrations").glob("*.sql"))
# Where the units and the guide put things, and where this test puts them.
INSTALL_PATHS = ("/opt/eventq/.venv", "/etc/eventq", "/var/lib/eventq", "/var/log/eventq")
ENV_FILE = "/etc/eventq/eventq.env"
UNIT_DIR = "/etc/systemd/system"
NGINX_SITE = "/etc/nginx/sites-enabled/eventq"
# The realm's shards before and after the reshard: user_id % 2 and % 3
# pick its shard, so some users move and some do not.
OLD_SHARDS = ["a", "b"]
NEW_SHARDS = ["a", "b", "c"]
# The notify queue's base name (no EVENTQ_NOTIFY_QUEUE in the env file):
# shard S consumes `notify_tornado_S` (generation.sharding.notify_queue), its
# dead letters go to `<queue>.dead` (server.delivery.consumer.dead_letter_queue).
NOTIFY_QUEUE = "notify_tornado"
NOTIFICATION_QUEUE = "eventq.notifications"  # the env example leaves the default
# Not copied into the source tree the wheel is built from: what a fresh clone
# does not have.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "var", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".schemathesis", "*.so", "compiled.json",
)  # fmt: skip
# The browser's files the shards serve (server/handlers/pages.py), from the
# wheel's package data, with a line each must hold.
BROWSER_FILES = (
    ("/static/eventq.js", "export class EventqClient"),
    ("/static/eventq.d.ts", "export class EventqClient"),
    ("/static/demo.js", 'from "/static/eventq.js"'),
    ("/static/style.css", "color-scheme"),
    ("/static/unknown-user-avatar.svg", "Unknown user"),
    ("/operator", "/static/operator.js"),
    ("/static/operator.js", "/operator/stats"),
)
# The demo page, served only by a server with EVENTQ_DEMO=1.
DEMO_PAGE = ("/demo", "/static/demo.js")
# Sends one event with the Python API, as the README's "Sending events" does;
# argv: realm id, the event, the user ids (JSON).
SEND_EVENT = """\
import json, sys
from generation.send import send_event
send_event(int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]))
"""


@dataclass(frozen=True)
class Installed:
    """The installed package: its venv, the wheel it came from, and a root
    standing in for `/`."""

    venv: Path
    wheel: Path
    root: Path

    def moved(self, path: str) -> str:
        """An installation path of the units and the guide, under `root`."""
        for prefix in INSTALL_PATHS:
            if path == prefix or path.startswith(prefix + "/"):
                if prefix == "/opt/eventq/.venv":
                    return str(self.venv) + path[len(prefix) :]
                return str(self.root) + path
        return path

    def at(self, path: str) -> Path:
        """Any absolute path of the guide, under `root` (the venv's, in the venv)."""
        moved = self.moved(path)
        return Path(moved) if moved != path else self.root / path.lstrip("/")

    def unit(self, name: str) -> str:
        """A unit file of deploy/systemd with the installation's paths moved."""
        text = (UNITS / name).read_text()
        for prefix in INSTALL_PATHS:
            text = text.replace(prefix, self.moved(prefix))
        return text


def unit_names() -> list[str]:
    return sorted(p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer", ".target"))


def copy_units(installed: Installed, directory: Path) -> None:
    """deploy/systemd's units into `directory`, their paths moved."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in unit_names():
        (directory / name).write_text(installed.unit(name))


# The first test of this module to run pays for `installed` (a venv, the
# wheel built, pip installing it with pyspark, pyarrow and matplotlib): 30 s
# here, 150 s on a loaded machine, too close to pytest's 180 s a test.
INSTALLING_TIMEOUT_SECS = 600


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The guide's install step: a venv, its pip building the wheel from the
    source tree (a copy of this checkout as a fresh clone has it), then
    installing that wheel with the analytics extra."""
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    venv = base / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTQ_", "PYTHON"))}
    pip = str(venv / "bin" / "pip")
    dist = base / "dist"

    def run(*command: str) -> None:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, cwd=base, timeout=900, check=False
        )
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stderr[-3000:]}"

    run(pip, "wheel", "--no-deps", "-q", "-w", str(dist), str(source))
    (wheel,) = dist.glob("eventq-*.whl")
    run(pip, "install", "-q", f"{wheel}[analytics]")
    root = base / "root"
    for prefix in INSTALL_PATHS[1:]:
        (root / prefix.lstrip("/")).mkdir(parents=True)
    return Installed(venv, wheel, root)


def environment_file(path: Path) -> dict[str, str]:
    """Variables of a systemd EnvironmentFile (KEY=VALUE lines, # comments)."""
    variables = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            variables[key.strip()] = value.strip().strip('"')
    return variables


@dataclass(frozen=True)
class Service:
    """What a unit's [Service] section says to run."""

    command: list[str]
    environment_files: list[Path]
    environment: dict[str, str]


def service(installed: Installed, name: str, instance: str = "") -> Service:
    """The command and environment of unit `name` as installed in
    /etc/systemd/system (`%i` is `instance`)."""
    text = (installed.at(UNIT_DIR) / name).read_text().replace("%i", instance)
    section = text.split("[Service]", 1)[1].split("\n[", 1)[0]
    entries: dict[str, list[str]] = {}
    for line in section.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            entries.setdefault(key.strip(), []).append(value.strip())
    (command,) = entries["ExecStart"]
    return Service(
        shlex.split(command),
        [Path(p) for p in entries.get("EnvironmentFile", [])],
        dict(e.split("=", 1) for e in entries.get("Environment", [])),
    )


class Operator:
    """Runs the installed `eventq` from outside the checkout: in the guide's
    root shell, or as systemd runs a unit's command (with only the unit's
    environment, and a PATH)."""

    def __init__(self, installed: Installed, work: Path):
        self.installed = installed
        self.work = work

    def env(self, unit: Service | None = None) -> dict[str, str]:
        """A bare environment, plus what `unit` sets (EnvironmentFile, Environment)."""
        env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": str(self.work)}
        if "JAVA_HOME" in os.environ:
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        if unit is not None:
            for path in unit.environment_files:
                env.update(environment_file(path))
            env.update(unit.environment)
        return env

    def shell(self, script: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """`script` (bash; `args` are its $1...) in the guide's root shell:
        the env file read (`set -a; . eventq.env; set +a`), the venv's bin
        first on PATH. Its stdout, asserting success."""
        env_file = shlex.quote(str(self.installed.at(ENV_FILE)))
        command = ["bash", "-c", f"set -a; . {env_file}; set +a; {script}", "bash", *args]
        env = self.env()
        env["PATH"] = f"{self.installed.venv / 'bin'}:{env['PATH']}"
        return self._run(command, env, stdin, timeout)

    def eventq(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """`eventq ARGS`, by name, in the guide's root shell."""
        return self.shell('exec eventq "$@"', *args, stdin=stdin, timeout=timeout)

    def run(
        self,
        command: list[str],
        stdin: str | None = None,
        timeout: float = 120,
        unit: Service | None = None,
    ) -> str:
        """`command` with a bare environment plus `unit`'s (a oneshot unit's
        command, as systemd runs it); its stdout, asserting success."""
        return self._run(command, self.env(unit), stdin, timeout)

    def _run(
        self, command: list[str], env: dict[str, str], stdin: str | None, timeout: float
    ) -> str:
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, env=env, cwd=self.work,
            timeout=timeout, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


class Daemons:
    """Long-running units' commands, started and stopped as systemd does: with
    the unit's environment, stopped by SIGTERM (the units' KillSignal),
    restarted as a stop then a start. Each unit logs to <work>/<name>.log, its
    journal, across restarts."""

    def __init__(self, operator: Operator):
        self.operator = operator
        # Unit name -> its process, while started (and not yet stopped).
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, name: str) -> Path:
        return self.operator.work / f"{name}.log"

    def start(self, name: str, unit: Service, ready: bytes = b"listening on") -> None:
        """Start `name` and return once its log says `ready` (a shard: it
        listens, and has restored its queues and consumes its notify queue
        by then)."""
        assert name not in self.processes, f"{name} is running"
        log = self.log(name)
        offset = log.stat().st_size if log.exists() else 0
        with log.open("ab") as handle:
            process = subprocess.Popen(
                unit.command, env=self.operator.env(unit), cwd=self.operator.work,
                stdout=handle, stderr=handle,
            )  # fmt: skip
        self.processes[name] = process
        # 60 s: a start restores the shard's queues and connects to PostgreSQL
        # and RabbitMQ, under a second here; a wait on the line, so only a
        # hang waits it out.
        wait_for(
            lambda: ready in log.read_bytes()[offset:] or process.poll() is not None,
            60,
            f"{name} to log {ready!r}",
        )
        assert process.poll() is None, f"{name} exited:\n{log.read_text()[-3000:]}"

    def stop(self, name: str) -> None:
        """`systemctl stop`: SIGTERM, then the exit (within the units'
        TimeoutStopSec; a process that outlives it is left to `kill_all`)."""
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        del self.processes[name]
        assert code == 0, self.log(name).read_text()[-3000:]

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        self.processes.clear()


@pytest.fixture
def own_database(database_url: str) -> Iterator[str]:
    """An empty database of this test's own: the migrations run from the wheel."""
    name = f"eventq_installed_{uuid.uuid4().hex[:8]}"
    admin = conninfo.make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield conninfo.make_conninfo(database_url, dbname=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@pytest.fixture
def own_vhost() -> Iterator[tuple[str, str, str]]:
    """The guide's RabbitMQ vhost and user for eventq, of this test's own."""
    tag = uuid.uuid4().hex[:8]
    vhost, user, password = f"eventq_installed_{tag}", f"eventq_{tag}", secrets.token_hex(12)
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("add_user", user, password)
        try:
            rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
            yield vhost, user, password
        finally:
            rabbitmqctl("delete_user", user)
    finally:
        rabbitmqctl("delete_vhost", vhost)


def env_file_values(installed: Installed, database_url: str, amqp_url: str) -> dict[str, str]:
    """/etc/eventq/eventq.env's variables: the example's, every CHANGE-ME
    replaced, its paths moved."""
    # As the example writes it, a URL: the file is read by shells too.
    parts = {k: str(v) for k, v in conninfo.conninfo_to_dict(database_url).items()}
    user = quote(parts.get("user", ""), safe="")
    if user and parts.get("password"):
        user += ":" + quote(parts["password"], safe="")
    url = f"postgresql://{user}{'@' if user else ''}{parts.get('host', '127.0.0.1')}"
    url += f":{parts.get('port', '5432')}"
    values = {
        "EVENTQ_DATABASE_URL": f"{url}/{parts['dbname']}",
        "EVENTQ_AMQP_URL": amqp_url,
        "EVENTQ_SHARED_SECRET": secrets.token_hex(32),
        "EVENTQ_API_KEY_SECRET": secrets.token_hex(32),
        # The notification worker's (eventq-notifications.service): a mail
        # server on this machine, the site its links point to.
        "EVENTQ_SMTP_URL": "smtp://127.0.0.1:25",
        "EVENTQ_SITE_URL": "http://127.0.0.1:9800",
    }
    example = environment_file(ENV_EXAMPLE)
    paths = {"EVENTQ_STATE_DIR", "EVENTQ_LOG_DIR", "EVENTQ_SHARDING", "EVENTQ_ANALYTICS_DIR"}
    unknown = set(example) - {*values, *paths}
    assert not unknown, f"the example names variables this test does not fill: {unknown}"
    written = {key: values.get(key, installed.moved(value)) for key, value in example.items()}
    assert not any("CHANGE-ME" in value for value in written.values())
    return written


def install_env_file(operator: Operator, variables: dict[str, str]) -> None:
    """The env file written aside, then installed mode 0600 and owned by root
    (`install -m 0600 -o root -g root`, which replaces it whole)."""
    aside = operator.work / "eventq.env.new"
    aside.write_text("".join(f"{key}={value}\n" for key, value in variables.items()))
    target = operator.installed.at(ENV_FILE)
    operator.run(["install", "-m", "0600", "-o", "root", "-g", "root", str(aside), str(target)])
    aside.unlink()
    stat = target.stat()
    assert (stat.st_mode & 0o777, stat.st_uid, stat.st_gid) == (0o600, 0, 0)


def sharding_toml(ports: dict[str, int], realm: tuple[int, list[str]] | None) -> str:
    """The sharding config: `ports`' shards, the realm (id, shards) if any."""
    lines = ['default_shard = "a"', "internal_networks = []"]
    for name, port in ports.items():
        lines += [f"[shards.{name}]", 'host = "127.0.0.1"', f"port = {port}"]
    if realm is not None:
        lines += [
            "[[realms]]",
            f"id = {realm[0]}",
            f"shards = {json.dumps(realm[1])}",
            'hosts = ["acme.events.test"]',
        ]
    return "\n".join(lines) + "\n"


def stats(url: str, secret: str, user_id: int) -> dict[str, Any]:
    response = requests.post(
        f"{url}/api/internal/stats", data={"secret": secret, "user_id": str(user_id)}, timeout=10
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@dataclass
class Listener:
    """One user's `zulip` client and its event queue (types "test" only)."""

    user: dict[str, Any]  # `eventq user create`'s answer
    client: zulip.Client
    queue_id: str = ""
    last_event_id: int = -1

    @property
    def user_id(self) -> int:
        user_id: int = self.user["user_id"]
        return user_id

    def register(self) -> None:
        registered = self.client.register(event_types=["test"])
        assert registered["result"] == "success", registered
        self.queue_id, self.last_event_id = registered["queue_id"], -1

    def poll(self) -> dict[str, Any]:
        """One long poll from the last event seen (it waits for the next)."""
        polled: dict[str, Any] = self.client.get_events(
            queue_id=self.queue_id, last_event_id=self.last_event_id
        )
        return polled

    def next_event(self) -> dict[str, Any]:
        """The queue's next event (the test sends one at a time). An answer
        without it is polled again: a heartbeat, or the empty answer to a
        request the client retried without blocking (after a dropped
        connection: nginx closes idle ones when it reloads)."""

        def arrived() -> list[dict[str, Any]]:
            polled = self.poll()
            assert polled["result"] == "success", polled
            return [event for event in polled["events"] if event["type"] != "heartbeat"]

        (event,) = wait_for(arrived, 120, f"an event on queue {self.queue_id}")
        self.last_event_id = event["id"]
        return dict(event)


@dataclass
class Deployment:
    """The guide's installation on this machine, followed step by step (the
    methods, in the guide's order). Its processes are stopped by the fixture."""

    installed: Installed
    operator: Operator
    daemons: Daemons
    vhost: str
    env: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)
    realm_id: int = 0
    subdomain: str = ""
    # The current sharding file's shards and the realm's (as the shards
    # route once restarted).
    realm_shards: list[str] = field(default_factory=list)
    nginx_port: int = 0
    nginx: Nginx | None = None

    @property
    def sharding_file(self) -> Path:
        return Path(self.env["EVENTQ_SHARDING"])

    @property
    def site(self) -> Path:
        return self.installed.at(NGINX_SITE)

    @property
    def nginx_url(self) -> str:
        assert self.nginx is not None
        return self.nginx.url

    def owner_queues(self, user_id: int) -> list[dict[str, Any]]:
        """`user_id`'s queues on the shard that holds them by the current
        file (its internal stats, on its own port)."""
        owner = self.realm_shards[user_id % len(self.realm_shards)]
        url = f"http://127.0.0.1:{self.ports[owner]}"
        found = stats(url, self.env["EVENTQ_SHARED_SECRET"], user_id)
        queues: list[dict[str, Any]] = found["user_queues"]
        return queues

    # -- install ------------------------------------------------------------

    def install(self) -> None:
        """The env file and the units in place; the operator's shell finds
        the venv's `eventq` by name."""
        found = self.operator.shell("command -v eventq").strip()
        assert found == str(self.installed.venv / "bin" / "eventq"), found
        install_env_file(self.operator, self.env)
        # The units into /etc/systemd/system (`systemctl daemon-reload` has
        # nothing to do without systemd): every command below is theirs.
        copy_units(self.installed, self.installed.at(UNIT_DIR))

    # -- configure ----------------------------------------------------------

    def write_sharding(self, ports: dict[str, int], realm_shards: list[str] | None) -> Path:
        """A new sharding file, written under another name (checked there);
        renamed into place by `put_sharding_in_place`."""
        realm = None if realm_shards is None else (self.realm_id, realm_shards)
        aside = self.sharding_file.with_name(self.sharding_file.name + ".new")
        aside.write_text(sharding_toml(ports, realm))
        return aside

    def put_sharding_in_place(self, aside: Path, ports: dict[str, int]) -> None:
        aside.rename(self.sharding_file)
        self.ports = dict(ports)

    def check_sharding(self, path: Path, ports: dict[str, int], realm_shards: list[str]) -> None:
        """`eventq sharding check`, and where it says things go."""
        checked = json.loads(self.operator.eventq("sharding", "check", "--config", str(path)))
        queues = {name: shard["notify_queue"] for name, shard in checked["shards"].items()}
        assert queues == {name: f"{NOTIFY_QUEUE}_{name}" for name in ports}
        assert checked["realms"] == {str(self.realm_id): realm_shards}

    def import_definitions(self, path: Path) -> None:
        """`eventq sharding rabbitmq ... | rabbitmqctl import_definitions`."""
        self.operator.shell(
            'set -o pipefail; eventq sharding rabbitmq --config "$1" --vhost "$2"'
            " | rabbitmqctl --quiet import_definitions",
            str(path), self.vhost,
        )  # fmt: skip

    def generate_site(self) -> str:
        assert self.nginx_port
        self.operator.eventq("sharding", "nginx", "--config", str(self.sharding_file),
                             "--listen", f"127.0.0.1:{self.nginx_port}",
                             "--output", str(self.site))  # fmt: skip
        return self.site.read_text()

    def configure(self) -> None:
        """The shards first (every command reads the file the env names), the
        schema through the migrate unit's own command, a realm, then the
        sharding file naming it; RabbitMQ's queues; the nginx site."""
        ports = dict(zip(OLD_SHARDS, free_ports(len(OLD_SHARDS)), strict=True))
        self.put_sharding_in_place(self.write_sharding(ports, None), ports)
        migrate = service(self.installed, "eventq-migrate.service")
        applied = json.loads(self.operator.run(migrate.command, unit=migrate))
        assert applied["applied"] == MIGRATIONS
        self.subdomain = f"acme{uuid.uuid4().hex[:6]}"
        created = self.operator.eventq("realm", "create", "--subdomain", self.subdomain,
                                       "--name", "Acme")  # fmt: skip
        self.realm_id = json.loads(created)["realm_id"]
        self.put_sharding_in_place(self.write_sharding(ports, OLD_SHARDS), ports)
        self.realm_shards = list(OLD_SHARDS)
        self.check_sharding(self.sharding_file, ports, OLD_SHARDS)
        self.import_definitions(self.sharding_file)
        self.nginx_port = free_ports(1)[0]
        self.site.parent.mkdir(parents=True, exist_ok=True)
        site = self.generate_site()
        # nginx -t, then nginx started (a running one is reloaded: see reshard).
        self.nginx = Nginx(self.operator.work / "nginx", site, self.nginx_port).start()

    # -- start --------------------------------------------------------------

    def start_shard(self, name: str) -> None:
        self.daemons.start(f"eventq@{name}", service(self.installed, "eventq@.service", name))

    def restart_shard(self, name: str) -> None:
        """`systemctl restart eventq@<name>`: SIGTERM, then a start."""
        self.daemons.stop(f"eventq@{name}")
        self.start_shard(name)

    def start(self) -> None:
        """eventq@a and eventq@b; the default shard runs the background
        updates the migrations enqueued."""
        for name in OLD_SHARDS:
            self.start_shard(name)

        def updates_done() -> bool:
            status = json.loads(self.operator.eventq("db", "background", "status", "--json"))
            return all(update["state"] == "done" for update in status["updates"])

        wait_for(updates_done, 60, "the background updates")
        runs = [name for name in OLD_SHARDS
                if "background updates: this process runs them"
                in self.daemons.log(f"eventq@{name}").read_text()]  # fmt: skip
        assert runs == ["a"]

        # Done: the lock is free, but for the runner's look at the table
        # every 5 s (it holds the lock for a moment).
        def idle_status() -> str | None:
            text = self.operator.eventq("db", "background", "status")
            return text if "runner: none working now" in text else None

        status = wait_for(idle_status, 60, "a status that finds no runner working")
        assert re.search(r"wrap_legacy_api_key_hashes +done", status), status

    # -- use ----------------------------------------------------------------

    def create_user(self, local: str) -> dict[str, Any]:
        created: dict[str, Any] = json.loads(
            self.operator.eventq("user", "create", "--realm", self.subdomain,
                                 "--email", f"{local}@acme.test", "--full-name", local)
        )  # fmt: skip
        return created

    def listener(self, user: dict[str, Any], site: str | None = None) -> Listener:
        """A registered client of `user`, through nginx unless `site` says."""
        client = zulip.Client(
            email=user["email"], api_key=user["api_key"], site=site or self.nginx_url
        )
        listener = Listener(user, client)
        listener.register()
        return listener

    def send_event(self, user_id: int, event: dict[str, Any]) -> None:
        """`eventq send-event`, which says it went through RabbitMQ."""
        sent = json.loads(
            self.operator.eventq("send-event", "--realm", self.subdomain, "--users", str(user_id),
                                 "--event", json.dumps(event))
        )  # fmt: skip
        assert sent == {"sent": True, "realm_id": self.realm_id, "users": 1, "via": NOTIFY_QUEUE}

    def send_event_from_python(self, user_id: int, event: dict[str, Any]) -> None:
        """`send_event` as a producer calls it: the venv's python, under the
        env file's settings, outside the checkout."""
        self.operator.shell(
            'exec python - "$@"', str(self.realm_id), json.dumps(event), json.dumps([user_id]),
            stdin=SEND_EVENT,
        )  # fmt: skip

    def use(self) -> Listener:
        """A user, their `zulip` client through nginx: a parked long poll woken
        by `eventq send-event`, then an event from `send_event`; the demo
        realm; the browser's files and the OpenAPI document."""
        ops = self.listener(self.create_user("ops"))
        polled: dict[str, Any] = {}
        poll = threading.Thread(target=lambda: polled.update(ops.poll()))
        poll.start()
        wait_for(
            lambda: any(q["parked"] for q in self.owner_queues(ops.user_id)),
            15,
            "the long poll to park on its owner shard",
        )
        self.send_event(ops.user_id, {"type": "test", "from": "the installed package"})
        poll.join(30)
        assert polled.get("events") == [{"type": "test", "from": "the installed package", "id": 0}]
        ops.last_event_id = 0
        self.send_event_from_python(ops.user_id, {"type": "test", "from": "send_event"})
        assert ops.next_event() == {"type": "test", "from": "send_event", "id": 1}

        demo = json.loads(self.operator.eventq("demo", "--site", self.nginx_url))
        assert {user["role"] for user in demo["users"]} >= {"member"}
        # The browser's files come from the wheel too.
        for path, marker in BROWSER_FILES:
            served = requests.get(f"{self.nginx_url}{path}", timeout=10)
            assert served.status_code == 200, (path, served.text)
            assert marker in served.text, path
        # The demo page is off on the shards (see one_process for it on).
        off = requests.get(f"{self.nginx_url}{DEMO_PAGE[0]}", timeout=10)
        assert off.status_code == 404, off.text
        assert "EVENTQ_DEMO=1" in off.json()["msg"]
        openapi = requests.get(f"{self.nginx_url}/api/v1/openapi.json", timeout=10)
        assert openapi.status_code == 200
        assert "/api/v1/events" in openapi.json()["paths"]
        return ops

    # -- notifications ------------------------------------------------------

    def notifications(self, sender: Listener) -> None:
        """eventq-notifications.service against a mail server on loopback
        (the env file's EVENTQ_SMTP_URL pointed at it, a 1 s window): a
        direct message to a user with no client is one email;
        `eventq notifications status` counts it; SIGTERM stops the worker."""
        mailbox = Mailbox()
        smtp = SmtpServer(mailbox)
        smtp.start()
        try:
            install_env_file(self.operator, {**self.env, "EVENTQ_SMTP_URL": smtp.url,
                                             "EVENTQ_NOTIFICATION_DELAY_SECS": "1"})  # fmt: skip
            unit = service(self.installed, "eventq-notifications.service")
            consuming = b"notification worker: consuming"
            self.daemons.start("eventq-notifications", unit, ready=consuming)
            away = self.create_user("away")
            sent = sender.client.send_message(
                {"type": "private", "to": [away["email"]], "content": "Back on Monday?"}
            )
            assert sent["result"] == "success", sent
            (mail,) = mailbox.wait_for(away["email"], timeout=60)
            assert "Back on Monday?" in mail.plain()
            assert "ops" in mail.plain()
            status = json.loads(self.operator.eventq("notifications", "status"))
            assert status["counters"]["email_sent"] == 1, status
            assert status["pending"] == {"email": 0, "push": 0}, status
            self.daemons.stop("eventq-notifications")
        finally:
            smtp.stop()
            install_env_file(self.operator, self.env)

    # -- reshard ------------------------------------------------------------

    def reshard_users(self) -> tuple[Listener, Listener]:
        """Registered users of the realm, one whose shard the reshard changes
        and one whose it does not (of 5 consecutive user ids, at least one
        keeps its shard and at least one moves)."""
        moved = kept = None
        for n in range(6):
            user = self.create_user(f"user{n}")
            user_id = user["user_id"]
            if OLD_SHARDS[user_id % len(OLD_SHARDS)] == NEW_SHARDS[user_id % len(NEW_SHARDS)]:
                kept = kept or self.listener(user)
            else:
                moved = moved or self.listener(user)
            if moved and kept:
                return moved, kept
        raise AssertionError("no user both moves and stays")

    def reshard(self) -> tuple[Listener, Listener]:
        """Shard c added, the realm on a, b and c, in the guide's order; a
        user who moves continues on their new shard with a new queue, one who
        does not keeps theirs. Returns them (moved, kept)."""
        moved, kept = self.reshard_users()
        ports = {**self.ports, "c": free_ports(1)[0]}
        # (1) The new file, checked under another name.
        aside = self.write_sharding(ports, NEW_SHARDS)
        self.check_sharding(aside, ports, NEW_SHARDS)
        # (2) RabbitMQ's definitions: c's queue exists before anyone publishes.
        self.import_definitions(aside)
        assert f"{NOTIFY_QUEUE}_c" in self.rabbitmq_queues()
        # (3) Renamed into place: producers switch at once.
        self.put_sharding_in_place(aside, ports)
        self.realm_shards = list(NEW_SHARDS)
        # (4) The new shard started, the others restarted without delay.
        self.start_shard("c")
        for name in OLD_SHARDS:
            self.restart_shard(name)
        # (5) The nginx site regenerated, nginx reloaded last.
        assert self.nginx is not None
        self.nginx.reload(self.generate_site())

        refused = moved.poll()
        assert (refused["result"], refused.get("code")) == ("error", "BAD_EVENT_QUEUE_ID"), refused
        moved.register()
        assert [q["queue_id"] for q in self.owner_queues(moved.user_id)] == [moved.queue_id]
        kept_queue = kept.queue_id
        for listener in (moved, kept):
            self.send_event(listener.user_id, {"type": "test", "after": "reshard"})
            assert listener.next_event()["after"] == "reshard"
        assert kept.queue_id == kept_queue
        return moved, kept

    # -- upgrade ------------------------------------------------------------

    def upgrade(self, listeners: list[Listener]) -> None:
        """The wheel reinstalled, the migrations run again (nothing to apply),
        the shards restarted one at a time: every queue survives."""
        self.operator.shell('exec pip install -q --force-reinstall --no-deps "$1"',
                            str(self.installed.wheel), timeout=300)  # fmt: skip
        migrate = service(self.installed, "eventq-migrate.service")
        again = json.loads(self.operator.run(migrate.command, unit=migrate))
        assert again["applied"] == []
        for name in self.ports:
            self.restart_shard(name)
        for listener in listeners:
            queue_id = listener.queue_id
            self.send_event(listener.user_id, {"type": "test", "after": "upgrade"})
            assert listener.next_event()["after"] == "upgrade"
            assert listener.queue_id == queue_id

    # -- back up, monitor ---------------------------------------------------

    def back_up(self) -> None:
        """`pg_dump` of the database: the schema the migrations made."""
        dump = self.operator.work / "eventq.sql"
        self.operator.shell('exec pg_dump --file "$1" "$EVENTQ_DATABASE_URL"', str(dump))
        text = dump.read_text()
        assert "CREATE TABLE public.realms (" in text
        assert "CREATE TABLE public.users (" in text

    def rabbitmq_queues(self) -> dict[str, int]:
        """`rabbitmqctl list_queues -p <vhost> name messages`: depth by name."""
        listed = self.operator.shell('exec rabbitmqctl list_queues -p "$1" name messages',
                                     self.vhost)  # fmt: skip
        rows = (line.split("\t") for line in listed.splitlines())
        return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}

    def monitor(self) -> None:
        """Each shard's /metrics on its own port, from loopback; RabbitMQ's
        notify queue of each shard and its dead-letter queue, and the
        notification worker's queue and its dead-letter queue."""
        for name, port in self.ports.items():
            metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
            assert metrics.status_code == 200, (name, metrics.text)
            assert re.search(r"^eventq_queues \d", metrics.text, re.M), (name, metrics.text)
        # Every notice was delivered and every notification sent (and
        # acknowledged): all of them empty.
        expected = {
            queue: 0 for name in self.ports for queue in (f"{NOTIFY_QUEUE}_{name}",
                                                          f"{NOTIFY_QUEUE}_{name}.dead")
        } | {NOTIFICATION_QUEUE: 0, f"{NOTIFICATION_QUEUE}.dead": 0}  # fmt: skip
        wait_for(
            lambda: self.rabbitmq_queues() == expected, 30, f"RabbitMQ's queues to be {expected}"
        )

    # -- stop, analytics ----------------------------------------------------

    def stop_shards(self) -> None:
        for name in self.ports:
            self.daemons.stop(f"eventq@{name}")

    def analytics(self) -> None:
        """`eventq logs compact`, then the analytics unit's command."""
        self.operator.eventq("logs", "compact")
        unit = service(self.installed, "eventq-analytics.service")
        summary = self.operator.run(unit.command, unit=unit, timeout=600)
        deliveries = re.search(r"deliveries: (\d+)", summary)
        assert deliveries, summary
        assert int(deliveries.group(1)) >= 1, summary
        out = Path(unit.command[unit.command.index("--out") + 1])
        assert (out / "report" / "report.html").is_file()

    # -- one process --------------------------------------------------------

    def one_process(self, user: dict[str, Any]) -> None:
        """eventq.service, with EVENTQ_SHARDING removed from the env file:
        a client registers, gets one event; stopped, it saves its queues
        under the single process's name. It also serves the demo page."""
        port = free_ports(1)[0]
        variables = {key: value for key, value in self.env.items() if key != "EVENTQ_SHARDING"}
        # Its port: the default, 9800, may be taken on this machine. The demo
        # page on, as deploy/run.sh's one process has it: the only server
        # that serves /demo.
        install_env_file(self.operator, {**variables, "EVENTQ_PORT": str(port),
                                         "EVENTQ_DEMO": "1"})  # fmt: skip
        self.daemons.start("eventq", service(self.installed, "eventq.service"))
        url = f"http://127.0.0.1:{port}"
        listener = self.listener(user, site=url)
        self.send_event(listener.user_id, {"type": "test", "from": "one process"})
        assert listener.next_event() == {"type": "test", "from": "one process", "id": 0}
        page = requests.get(f"{url}{DEMO_PAGE[0]}", timeout=10)
        assert page.status_code == 200, page.text
        assert DEMO_PAGE[1] in page.text
        self.daemons.stop("eventq")
        saved = Path(self.env["EVENTQ_STATE_DIR"]) / "event_queues.json"
        assert listener.queue_id in saved.read_text()


@pytest.fixture
def deployment(
    installed: Installed, own_database: str, own_vhost: tuple[str, str, str], tmp_path: Path
) -> Iterator[Deployment]:
    """The guide's installation with this test's database and vhost; every
    process it started is stopped at the end."""
    vhost, amqp_user, amqp_password = own_vhost
    amqp_url = f"amqp://{amqp_user}:{amqp_password}@127.0.0.1:5672/{vhost}"
    operator = Operator(installed, tmp_path)
    daemons = Daemons(operator)
    env = env_file_values(installed, own_database, amqp_url)
    deployment = Deployment(installed, operator, daemons, vhost, env)
    try:
        yield deployment
    finally:
        daemons.kill_all()
        if deployment.nginx is not None:
            deployment.nginx.stop()


def installed_python(installed: Installed, script: str) -> subprocess.CompletedProcess[str]:
    """`script` run by the installed venv's Python, outside the checkout."""
    done = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c", script],
        capture_output=True, text=True, cwd=installed.root, env={"PATH": os.environ["PATH"]},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.timeout(INSTALLING_TIMEOUT_SECS)
def test_the_installed_package_imports_nothing_from_the_checkout(installed: Installed):
    where = installed_python(
        installed,
        "import analytics, apply_events, generation, queues, server, server.migrations;"
        "print('\\n'.join(m.__file__ for m in (analytics, apply_events, generation, queues,"
        " server, server.migrations)))",
    )
    site_packages = next((installed.venv / "lib").glob("python3.*/site-packages"))
    for module_file in where.stdout.split():
        assert Path(module_file).is_relative_to(site_packages), module_file


@pytest.mark.timeout(INSTALLING_TIMEOUT_SECS)
def test_the_wheel_runs_the_delivery_path_compiled(installed: Installed):
    """The wheel holds the modules setup.py compiles (queues/compiled.py),
    and the installed server loads them, not their sources beside them."""
    names = zipfile.ZipFile(installed.wheel).namelist()
    assert "queues/compiled.json" in names
    loaded = installed_python(
        installed,
        "import importlib, queues.compiled as c\n"
        "for name in c.COMPILED: print(importlib.import_module(name).__file__)\n"
        "print(c.describe())",
    )
    *files, described = loaded.stdout.splitlines()
    assert len(files) == len(COMPILED) > 20
    for module_file in files:
        assert module_file.endswith(".so"), module_file
        assert Path(module_file).relative_to(installed.venv).parts[0] == "lib"
        assert Path(module_file).name in {Path(name).name for name in names}
    assert described == f"compiled to C ({len(COMPILED)} modules)"
    assert loaded.stderr == ""


@pytest.mark.timeout(900)
def test_the_operators_guide_with_the_installed_package(deployment: Deployment):
    deployment.install()
    deployment.configure()
    deployment.start()
    ops = deployment.use()
    deployment.notifications(ops)
    moved, kept = deployment.reshard()
    deployment.upgrade([ops, moved, kept])
    deployment.back_up()
    deployment.monitor()
    deployment.stop_shards()
    deployment.analytics()
    deployment.one_process(ops.user)


@pytest.mark.timeout(INSTALLING_TIMEOUT_SECS)
def test_the_systemd_units_pass_systemd_analyze_verify(installed: Installed, tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: run `bash deploy/test.sh` (it installs systemd)"
    units = tmp_path / "units"
    copy_units(installed, units)
    # A template is verified through an instance of it.
    targets = [str(units / n.replace("@.", "@a.")) for n in unit_names()]
    done = subprocess.run(
        [analyze, "verify", "--man=no", *targets],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
