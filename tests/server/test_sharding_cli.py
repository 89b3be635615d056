"""The operator's side of sharding: `eventq sharding check|nginx|rabbitmq`,
what `eventq serve` refuses, and the deploy files (docs/operating.md, "Several shards")."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from server.admin.cli import build_parser
from tests.shards import Nginx, free_ports, port_open, sharding_toml
from tests.support import REPO, ServerProcess, run_eventq, wait_for

DEPLOY = REPO / "deploy"


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "sharding.toml"
    a, b = free_ports(2)
    path.write_text(sharding_toml({"a": a, "b": b}, {7: ["a", "b"], 8: ["b"]}, "a"))
    return path


def test_check_prints_where_everything_goes(config: Path):
    done = run_eventq("sharding", "check", "--config", str(config), EVENTQ_NOTIFY_QUEUE="nq")
    assert done.returncode == 0, done.stderr
    layout = json.loads(done.stdout)
    assert layout["default_shard"] == "a"
    assert layout["realms"] == {"7": ["a", "b"], "8": ["b"]}
    assert layout["shards"]["b"]["notify_queue"] == "nq_b"
    assert layout["shards"]["b"]["state_file"] == "event_queues.b.json"


def test_check_refuses_an_inconsistent_config_with_the_reason(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text('default_shard = "a"\n[shards.a]\nport = 9800\n[shards.b]\nport = 9800\n')
    done = run_eventq("sharding", "check", "--config", str(path))
    assert done.returncode == 1
    assert "duplicate port: shards 'a' and 'b' both listen on 127.0.0.1:9800" in done.stderr
    path.write_text("[shards.a]\nport = 9800\n")
    done = run_eventq("sharding", "check", "--config", str(path))
    assert done.returncode == 1
    assert "missing default_shard" in done.stderr
    done = run_eventq("sharding", "check")
    assert done.returncode == 1
    assert "pass --config or set EVENTQ_SHARDING" in done.stderr


def test_serve_refuses_to_start_without_knowing_its_shard(config: Path, database_url: str):
    env = {"EVENTQ_SHARDING": str(config), "EVENTQ_DATABASE_URL": database_url}
    done = run_eventq("serve", **env)
    assert done.returncode == 2
    assert "EVENTQ_SHARD must name the shard this process serves (one of a, b)" in done.stderr
    done = run_eventq("serve", EVENTQ_SHARD="z", **env)
    assert done.returncode == 2
    assert "got 'z'" in done.stderr
    done = run_eventq("serve", EVENTQ_SHARD="a", EVENTQ_PORT="1", **env)
    assert done.returncode == 2
    assert "EVENTQ_PORT=1 disagrees with" in done.stderr
    done = run_eventq("serve", "--port", "1", EVENTQ_SHARD="a", **env)
    assert done.returncode == 2
    assert "--port 1 disagrees with" in done.stderr
    broken = config.with_name("broken.toml")
    broken.write_text("default_shard = 1")
    done = run_eventq("serve", EVENTQ_SHARD="a", EVENTQ_SHARDING=str(broken))
    assert done.returncode == 2
    assert "EVENTQ_SHARDING" in done.stderr


def test_the_generated_nginx_site_is_what_nginx_accepts(config: Path, tmp_path: Path):
    out = tmp_path / "eventq.conf"
    port = free_ports(1)[0]
    done = run_eventq(
        "sharding", "nginx", "--config", str(config), "--listen", f"127.0.0.1:{port}",
        "--output", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    site = out.read_text()
    # An upstream per shard with keepalive; the long poll unbuffered with a
    # read timeout far above the heartbeat; the redirect target internal.
    for name in ("a", "b"):
        assert f"upstream eventq_shard_{name} {{" in site
    assert site.count("keepalive 10000;") >= 3
    events = site[site.index("location ~ ^/(api/v1|json)/events$") :]
    events = events[: events.index("}")]
    assert "proxy_buffering off;" in events
    assert "proxy_read_timeout 1200s;" in events
    assert "proxy_set_header X-Eventq-Accel on;" in events
    internal = site[site.index("location ~ ^/internal/eventq/") :]
    assert internal.splitlines()[1].strip() == "internal;"
    api_internal = site[site.index("location /api/internal/") :]
    assert "allow 127.0.0.1;" in api_internal
    assert "deny all;" in api_internal
    nginx = Nginx(tmp_path / "nginx", site, port).start()
    try:
        assert port_open(port)
    finally:
        nginx.stop()


def test_rabbitmq_definitions_declare_what_the_shards_consume(
    config: Path, amqp_url: str, database_url: str, tmp_path: Path
):
    vhost = amqp_url.rsplit("/", 1)[1]
    base = "defs_test"
    done = run_eventq(
        "sharding", "rabbitmq", "--config", str(config), "--vhost", vhost,
        EVENTQ_NOTIFY_QUEUE=base,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # On stdin: Debian's rabbitmqctl runs as the rabbitmq user, which may not
    # read the caller's files.
    imported = subprocess.run(
        ["rabbitmqctl", "--quiet", "import_definitions"],
        input=done.stdout,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    wanted = {f"{base}_a", f"{base}_a.dead", f"{base}_b", f"{base}_b.dead"}

    def declared() -> set[str]:
        command = ["rabbitmqctl", "--quiet", "list_queues", "-p", vhost, "name", "durable"]
        listing = subprocess.run(command, capture_output=True, text=True, check=True)
        rows = [line.split("\t") for line in listing.stdout.splitlines()]
        return {row[0] for row in rows if len(row) == 2 and row[1] == "true"} & wanted

    wait_for(lambda: declared() == wanted, 30, "the imported queues")
    # A shard then declares the same queues without a conflict and consumes.
    shard = ServerProcess(
        database_url,
        tmp_path / "state",
        {"EVENTQ_SHARDING": str(config), "EVENTQ_SHARD": "a", "EVENTQ_NOTIFY_QUEUE": base},
        amqp_url,
        serve_args=(),
    )
    try:
        shard.start()
        shard.wait_consuming()
        assert shard.stats()["consumer"]["queue"] == f"{base}_a"
    finally:
        shard.stop()


def _exec_start(unit: Path) -> list[str]:
    [line] = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


@pytest.mark.parametrize(
    "unit",
    ["eventq.service", "eventq@.service", "eventq-migrate.service", "eventq-analytics.service"],
)
def test_the_systemd_units_run_commands_eventq_has(unit: str):
    command = _exec_start(DEPLOY / "systemd" / unit)
    assert command[0] == "/opt/eventq/.venv/bin/eventq"
    args = build_parser().parse_args(command[1:])
    if args.command == "analytics":
        from analytics.__main__ import build_parser as analytics_parser

        analytics_parser().parse_args(args.rest)


def test_the_shard_unit_names_its_shard_by_instance():
    text = (DEPLOY / "systemd" / "eventq@.service").read_text()
    assert "Environment=EVENTQ_SHARD=%i" in text
    assert "KillSignal=SIGTERM" in text
    timer = (DEPLOY / "systemd" / "eventq-analytics.timer").read_text()
    assert "OnCalendar=" in timer


def test_the_env_example_names_only_variables_the_server_reads():
    """(or the notification worker, which reads the same file)."""
    names = [
        line.split("=", 1)[0]
        for line in (DEPLOY / "systemd" / "eventq.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    sources = "".join(
        path.read_text()
        for path in (
            REPO / "server" / "config.py",
            REPO / "generation" / "config.py",
            REPO / "server" / "notifications" / "settings.py",
        )
    )
    for name in names:
        assert f'"{name}"' in sources, name


@pytest.mark.parametrize(
    ("command", "example"),
    [
        (("nginx",), DEPLOY / "nginx" / "eventq.example.conf"),
        (("rabbitmq", "--vhost", "eventq"), DEPLOY / "rabbitmq" / "definitions.example.json"),
    ],
)
def test_the_example_files_in_deploy_are_what_eventq_generates(command, example):
    """deploy/ ships what the commands make of deploy/sharding.example.toml;
    regenerate them with the same command when either changes."""
    done = run_eventq("sharding", *command, "--config", "deploy/sharding.example.toml")
    assert done.returncode == 0, done.stderr
    assert example.read_text() == done.stdout
