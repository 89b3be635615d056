"""The package as an operator installs it: a wheel built from this checkout,
installed with its analytics extra into a fresh virtual environment outside the
checkout, then the README's operator's guide run with it, step by step.

Every other test runs the editable checkout, which cannot see a file missing
from the wheel or a path into the checkout (issue 13: `eventq db migrate` from
a wheel found no migrations). Here nothing of the checkout is on the path: the
commands run from the installed venv, from a directory outside the checkout,
with the environment the systemd units give them (their EnvironmentFile and
Environment lines, their ExecStart commands with the installation's paths
moved under a temporary root).

Steps of the operator's guide and where they run here (what the test cannot
do on a machine without systemd as init, `systemctl`, is checked with
`systemd-analyze verify`, and the units' commands are run as they say):

- install: `pip wheel` + a venv + `pip install <wheel>[analytics]` (fixture);
- the env file from deploy/systemd/eventq.env.example, with real values;
- RabbitMQ: `rabbitmqctl add_vhost`, `add_user`, `set_permissions`;
- `eventq-migrate.service`'s command (`eventq db migrate`);
- realm and user creation; the sharding file written and renamed over;
- `eventq sharding check`, `eventq sharding rabbitmq ... | rabbitmqctl
  import_definitions`, `eventq sharding nginx --output`, `nginx -t`;
- `eventq@a` and `eventq@b` as their unit runs them; the `zulip` client
  through nginx: register, long-poll; `eventq send-event` through RabbitMQ;
- the background updates run by the default shard (`eventq db background
  status`);
- the demo (`eventq demo`), the OpenAPI document;
- SIGTERM (the units' KillSignal), `eventq logs compact`, then
  `eventq-analytics.service`'s command (`eventq analytics run ...`).
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import requests
import zulip
from psycopg import conninfo

from tests.shards import Nginx, free_ports
from tests.support import rabbitmqctl, wait_for

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
ENV_EXAMPLE = UNITS / "eventq.env.example"
# Where the units and the guide put things, and where this test puts them.
INSTALL_PATHS = ("/opt/eventq/.venv", "/etc/eventq", "/var/lib/eventq", "/var/log/eventq")
# Not copied into the source tree the wheel is built from: what a fresh clone
# does not have.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "var", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".schemathesis",
)  # fmt: skip


@dataclass(frozen=True)
class Installed:
    """The installed package: its venv, and a root standing in for `/`."""

    venv: Path
    root: Path

    def moved(self, path: str) -> str:
        """An installation path of the units and the guide, under `root`."""
        for prefix in INSTALL_PATHS:
            if path == prefix or path.startswith(prefix + "/"):
                if prefix == "/opt/eventq/.venv":
                    return str(self.venv) + path[len(prefix) :]
                return str(self.root) + path
        return path

    def unit(self, name: str) -> str:
        """A unit file of deploy/systemd with the installation's paths moved."""
        text = (UNITS / name).read_text()
        for prefix in INSTALL_PATHS:
            text = text.replace(prefix, self.moved(prefix))
        return text


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
    return Installed(venv, root)


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
    """The command and environment of unit `name` (`%i` is `instance`)."""
    text = installed.unit(name).replace("%i", instance)
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
    """Runs the installed `eventq` as systemd would: from outside the checkout,
    with only the unit's environment (and a PATH)."""

    def __init__(self, installed: Installed, work: Path):
        self.installed = installed
        self.work = work
        self.logs: list[Path] = []

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

    def eventq(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """`eventq ARGS` from the venv, in a shell that read the env file as
        the guide says (`set -a; . eventq.env; set +a`); its stdout,
        asserting success."""
        env_file = self.installed.root / "etc" / "eventq" / "eventq.env"
        shell = ["bash", "-c", 'set -a; . "$0"; set +a; exec "$@"', str(env_file)]
        return self.run(
            [*shell, str(self.installed.venv / "bin" / "eventq"), *args], stdin, timeout
        )

    def run(
        self,
        command: list[str],
        stdin: str | None = None,
        timeout: float = 120,
        unit: Service | None = None,
    ) -> str:
        done = subprocess.run(
            command, input=stdin, capture_output=True, text=True, env=self.env(unit),
            cwd=self.work, timeout=timeout, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{shlex.join(command)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, unit: Service, name: str) -> subprocess.Popen[bytes]:
        log = self.work / f"{name}.log"
        self.logs.append(log)
        with log.open("ab") as handle:
            return subprocess.Popen(
                unit.command, env=self.env(unit), cwd=self.work, stdout=handle, stderr=handle
            )


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


def write_env_file(installed: Installed, database_url: str, amqp_url: str) -> dict[str, str]:
    """/etc/eventq/eventq.env from the example, every CHANGE-ME replaced."""
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
    }
    example = environment_file(ENV_EXAMPLE)
    paths = {"EVENTQ_STATE_DIR", "EVENTQ_LOG_DIR", "EVENTQ_SHARDING", "EVENTQ_ANALYTICS_DIR"}
    unknown = set(example) - {*values, *paths}
    assert not unknown, f"the example names variables this test does not fill: {unknown}"
    written = {key: values.get(key, installed.moved(value)) for key, value in example.items()}
    assert not any("CHANGE-ME" in value for value in written.values())
    path = installed.root / "etc" / "eventq" / "eventq.env"
    path.write_text("".join(f"{key}={value}\n" for key, value in written.items()))
    return written


def write_sharding(path: Path, ports: dict[str, int], realm: tuple[int, str] | None) -> None:
    """The sharding config, written aside and renamed over (as the guide says)."""
    lines = ['default_shard = "a"', "internal_networks = []"]
    for name, port in ports.items():
        lines += [f"[shards.{name}]", 'host = "127.0.0.1"', f"port = {port}"]
    if realm is not None:
        lines += [
            "[[realms]]",
            f"id = {realm[0]}",
            'shards = ["a", "b"]',
            f'hosts = ["{realm[1]}"]',
        ]
    aside = path.with_name(path.name + ".new")
    aside.write_text("\n".join(lines) + "\n")
    aside.rename(path)


def stats(url: str, secret: str, user_id: int) -> dict[str, Any]:
    response = requests.post(
        f"{url}/api/internal/stats", data={"secret": secret, "user_id": str(user_id)}, timeout=10
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_installed_package_imports_nothing_from_the_checkout(installed: Installed):
    where = subprocess.run(
        [str(installed.venv / "bin" / "python"), "-c",
         "import analytics, apply_events, generation, queues, server, server.migrations;"
         "print('\\n'.join(m.__file__ for m in (analytics, apply_events, generation, queues,"
         " server, server.migrations)))"],
        capture_output=True, text=True, cwd=installed.root, env={"PATH": os.environ["PATH"]},
        check=False,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    site_packages = next((installed.venv / "lib").glob("python3.*/site-packages"))
    for module_file in where.stdout.split():
        assert Path(module_file).is_relative_to(site_packages), module_file


@pytest.mark.timeout(900)
def test_the_operators_guide_with_the_installed_package(
    installed: Installed, own_database: str, own_vhost: tuple[str, str, str], tmp_path: Path
):
    vhost, amqp_user, amqp_password = own_vhost
    amqp_url = f"amqp://{amqp_user}:{amqp_password}@127.0.0.1:5672/{vhost}"
    env = write_env_file(installed, own_database, amqp_url)
    operator = Operator(installed, tmp_path)
    sharding_file = Path(env["EVENTQ_SHARDING"])
    ports = dict(zip("ab", free_ports(2), strict=True))
    nginx_port = free_ports(1)[0]
    processes: list[subprocess.Popen[bytes]] = []
    nginx: Nginx | None = None
    try:
        # The shards first (every command reads the file the env names), the
        # schema through the migrate unit's own command, a realm, then the
        # sharding file naming it (written aside, renamed over).
        write_sharding(sharding_file, ports, None)
        migrate = service(installed, "eventq-migrate.service")
        applied = json.loads(operator.run(migrate.command, unit=migrate))["applied"]
        assert applied == sorted(p.name for p in (REPO / "deploy" / "migrations").glob("*.sql"))
        subdomain = f"acme{uuid.uuid4().hex[:6]}"
        realm_id = json.loads(operator.eventq("realm", "create", "--subdomain", subdomain,
                                              "--name", "Acme"))["realm_id"]  # fmt: skip
        write_sharding(sharding_file, ports, (realm_id, "acme.events.test"))
        checked = operator.eventq("sharding", "check", "--config", str(sharding_file))
        assert "a" in checked
        assert "b" in checked

        # RabbitMQ's queues, on stdin as the guide says; the nginx site, tested.
        definitions = operator.eventq(
            "sharding", "rabbitmq", "--config", str(sharding_file), "--vhost", vhost
        )
        operator.run(["rabbitmqctl", "--quiet", "import_definitions"], stdin=definitions)
        site = installed.root / "etc" / "nginx" / "sites-enabled" / "eventq"
        site.parent.mkdir(parents=True)
        operator.eventq("sharding", "nginx", "--config", str(sharding_file),
                        "--listen", f"127.0.0.1:{nginx_port}", "--output", str(site))  # fmt: skip
        nginx = Nginx(tmp_path / "nginx", site.read_text(), nginx_port).start()  # runs nginx -t

        # The shards, as eventq@a and eventq@b run them.
        for name in ports:
            unit = service(installed, "eventq@.service", instance=name)
            processes.append(operator.start(unit, f"eventq@{name}"))
        for log in operator.logs:
            wait_for(lambda log=log: "listening on" in log.read_text(), 30, f"{log.name} to listen")

        created = json.loads(
            operator.eventq("user", "create", "--realm", subdomain, "--email", "ops@acme.test",
                            "--full-name", "Ops")
        )  # fmt: skip
        client = zulip.Client(email=created["email"], api_key=created["api_key"], site=nginx.url)
        registered = client.register(event_types=["test"])
        assert registered["result"] == "success", registered
        queue_id = registered["queue_id"]
        polled: dict[str, Any] = {}
        poll = threading.Thread(
            target=lambda: polled.update(client.get_events(queue_id=queue_id, last_event_id=-1))
        )
        poll.start()
        owner = f"http://127.0.0.1:{ports['ab'[created['user_id'] % 2]]}"
        secret = env["EVENTQ_SHARED_SECRET"]
        wait_for(
            lambda: any(
                q["parked"] for q in stats(owner, secret, created["user_id"])["user_queues"]
            ),
            15,
            "the long poll to park on its owner shard",
        )
        operator.eventq("send-event", "--realm", subdomain, "--users", str(created["user_id"]),
                        "--event", '{"type": "test", "from": "the installed package"}')  # fmt: skip
        poll.join(30)
        assert polled.get("events") == [{"type": "test", "from": "the installed package", "id": 0}]

        # The background updates of the migrations, run by the default shard.
        def updates_done() -> bool:
            status = json.loads(operator.eventq("db", "background", "status", "--json"))
            return all(update["state"] == "done" for update in status["updates"])

        wait_for(updates_done, 60, "the background updates")
        runs = [name for name, log in zip(ports, operator.logs, strict=True)
                if "background updates: this process runs them" in log.read_text()]  # fmt: skip
        assert runs == ["a"]
        status = operator.eventq("db", "background", "status")
        assert "runner: none working now" in status, status  # done: the lock is free
        assert re.search(r"wrap_legacy_api_key_hashes +done", status), status

        demo = json.loads(operator.eventq("demo", "--site", nginx.url))
        assert {user["role"] for user in demo["users"]} >= {"member"}
        # The browser's files come from the wheel too.
        for path, marker in (
            ("/static/eventq.js", "export class EventqClient"),
            ("/operator", "operator.js"),
            ("/static/operator.js", "/operator/stats"),
        ):
            served = requests.get(f"{nginx.url}{path}", timeout=10)
            assert served.status_code == 200, (path, served.text)
            assert marker in served.text, path  # fmt: skip
        openapi = requests.get(f"{nginx.url}/api/v1/openapi.json", timeout=10)
        assert openapi.status_code == 200
        assert "/api/v1/events" in openapi.json()["paths"]

        # Stopped as systemd stops them; then the analytics unit's command.
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            assert process.wait(30) == 0
        operator.eventq("logs", "compact")
        analytics = service(installed, "eventq-analytics.service")
        summary = operator.run(analytics.command, unit=analytics, timeout=600)
        deliveries = re.search(r"deliveries: (\d+)", summary)
        assert deliveries, summary
        assert int(deliveries.group(1)) >= 1, summary
        out = Path(analytics.command[analytics.command.index("--out") + 1])
        assert (out / "report" / "report.html").is_file()
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        if nginx is not None:
            nginx.stop()


def test_the_systemd_units_pass_systemd_analyze_verify(installed: Installed, tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: run `bash deploy/test.sh` (it installs systemd)"
    units = tmp_path / "units"
    units.mkdir()
    names = sorted(p.name for p in UNITS.iterdir() if p.suffix in (".service", ".timer", ".target"))
    for name in names:
        (units / name).write_text(installed.unit(name))
    # A template is verified through an instance of it.
    targets = [str(units / n.replace("@.", "@a.")) for n in names]
    done = subprocess.run(
        [analyze, "verify", "--man=no", *targets],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr
