"""The `eventq` command as scripts and operators use it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import requests

from tests.support import REPO, Api, run_eventq


def eventq(database_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Commands that send events (user create) must not reach a real broker's
    # default vhost: no broker, and a notify endpoint nobody listens on.
    defaults = {
        "EVENTQ_DATABASE_URL": database_url,
        "EVENTQ_AMQP_URL": "",
        "EVENTQ_NOTIFY_URL": "http://127.0.0.1:1/api/internal/notify_tornado",
        "EVENTQ_SHARED_SECRET": "cli-tests",
    }
    return run_eventq(*args, **(defaults | env))


def test_migrate_applies_each_migration_once(database_url):
    # The session's database is already migrated: nothing is pending.
    result = eventq(database_url, "db", "migrate")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"applied": []}


def test_realm_and_user_creation_print_json_with_a_working_key(database_url, server):
    subdomain = f"cli{uuid.uuid4().hex[:8]}"
    created = eventq(database_url, "realm", "create", "--subdomain", subdomain, "--name", "CLI")
    assert created.returncode == 0, created.stderr
    realm = json.loads(created.stdout)
    assert isinstance(realm["realm_id"], int)

    made = eventq(
        database_url,
        "user", "create", "--realm", subdomain, "--email", "ada@example.com",
        "--full-name", "Ada Lovelace",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    user = json.loads(made.stdout)
    assert user["email"] == "ada@example.com"
    assert user["realm_id"] == realm["realm_id"]
    assert len(user["api_key"]) == 32
    response = requests.post(
        f"{server.url}/api/v1/register", auth=(user["email"], user["api_key"]), timeout=10
    )
    assert response.status_code == 200
    assert response.json()["realm_name"] == "CLI"

    rotated = eventq(
        database_url, "user", "rotate-key", "--realm", subdomain, "--email", "ada@example.com"
    )
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["api_key"] != user["api_key"]


def test_account_errors_exit_1_with_a_message(database_url):
    subdomain = f"dup{uuid.uuid4().hex[:8]}"
    assert (
        eventq(database_url, "realm", "create", "--subdomain", subdomain, "--name", "A").returncode
        == 0
    )
    again = eventq(database_url, "realm", "create", "--subdomain", subdomain, "--name", "B")
    assert again.returncode == 1
    assert f"a realm with subdomain {subdomain!r} already exists" in again.stderr
    bad = eventq(database_url, "realm", "create", "--subdomain", "Not Valid", "--name", "C")
    assert bad.returncode == 1
    assert "invalid subdomain" in bad.stderr
    nowhere = eventq(
        database_url, "user", "create", "--realm", "no-such-realm", "--email", "a@b.c",
        "--full-name", "A",
    )  # fmt: skip
    assert nowhere.returncode == 1
    assert "no realm with subdomain 'no-such-realm'" in nowhere.stderr


def test_bad_configuration_exits_2_naming_the_variable(database_url):
    result = eventq(database_url, "db", "migrate", EVENTQ_HEARTBEAT_SECS="soon")
    assert result.returncode == 2
    assert "EVENTQ_HEARTBEAT_SECS must be a number, got 'soon'" in result.stderr


def test_unreachable_database_is_a_clear_error():
    result = eventq("host=127.0.0.1 port=1 dbname=x connect_timeout=2", "db", "migrate")
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr


def test_demo_creates_the_demo_realm_and_prints_fresh_keys(database_url, server):
    first = eventq(database_url, "demo", "--site", server.url)
    assert first.returncode == 0, first.stderr
    demo = json.loads(first.stdout)
    assert demo["site"] == server.url
    assert {u["role"] for u in demo["users"]} >= {"administrator", "member", "guest"}
    second = json.loads(eventq(database_url, "demo", "--site", server.url).stdout)
    assert [u["user_id"] for u in second["users"]] == [u["user_id"] for u in demo["users"]]
    member = next(u for u in second["users"] if u["role"] == "member")
    response = requests.post(
        f"{server.url}/api/v1/register", auth=(member["email"], member["api_key"]), timeout=10
    )
    assert response.status_code == 200
    old = next(u for u in demo["users"] if u["role"] == "member")
    assert (
        requests.post(
            f"{server.url}/api/v1/register", auth=(old["email"], old["api_key"]), timeout=10
        ).status_code
        == 401
    )


def test_users_created_by_the_cli_can_use_the_api_class(database_url, server, world):
    user = world.user()
    client = Api(server, user)
    assert client.register()["queue_id"]
    client.close()


def test_analytics_without_java_says_what_to_install(tmp_path):
    # A PATH with this Python and nothing else: no `java`.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    environ = {"PATH": str(bin_dir), "EVENTQ_STATE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "server", "analytics", "run", "--logs", str(tmp_path),
         "--out", str(tmp_path / "out")],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "eventq: the analytics jobs run Spark, which needs Java 17 or 21: install it"
        " (Debian: apt install openjdk-17-jre-headless) or set JAVA_HOME"
    )
    assert not (tmp_path / "out").exists()


def test_eventq_analytics_starts_the_jobs_without_the_servers_imports():
    # `eventq analytics` runs `python -m analytics` in a process of its own:
    # the server's database driver and Tornado are not worth importing first.
    probe = (
        "import sys\n"
        "from server.admin import entry\n"
        "status = entry.main(['analytics', 'run', '--help'])\n"
        "print(sorted(m for m in ('tornado', 'psycopg', 'pika', 'server.admin.cli')"
        " if m in sys.modules), status)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "usage: python -m analytics run" in done.stdout
    assert done.stdout.splitlines()[-1] == "[] 0"
