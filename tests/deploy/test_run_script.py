"""The README's first command, `./deploy/run.sh`, as a new user runs it: it
bootstraps (everything is there already, so each step says so), migrates,
creates the demo realm, prints the demo users' fresh keys and serves, with
the demo page on. Pointed at this run's database, vhost and a state
directory of its own through the environment (bootstrap keeps what the
caller set), on a free port; stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import requests

from tests.support import REPO, wait_for


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_run_sh_serves_the_demo_with_the_printed_keys(
    database_url: str, amqp_url: str, tmp_path: Path
):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTQ_")}
    env |= {
        "EVENTQ_PORT": str(port),
        "EVENTQ_DATABASE_URL": database_url,
        "EVENTQ_AMQP_URL": amqp_url,
        "EVENTQ_NOTIFY_QUEUE": f"notify_tornado.run_sh.{port}",
        "EVENTQ_STATE_DIR": str(tmp_path / "state"),
        "EVENTQ_BACKGROUND_TASKS": "off",  # the session's database is shared
    }
    out = tmp_path / "run.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", str(REPO / "deploy" / "run.sh")],
            cwd=REPO,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "listening on" in out.read_text(), 120, "run.sh to serve")
        text = out.read_text()
        site = f"http://127.0.0.1:{port}"
        assert f"eventq: serving on {site}" in text
        assert f"In a browser: {site}/demo" in text
        keys = dict(re.findall(r"^  (\S+@demo\.example\.com)\s+\S+\s+(\S{32})$", text, re.M))
        assert "hamlet@demo.example.com" in keys, text
        # The banner's curl example, as a request.
        registered = requests.post(
            f"{site}/api/v1/register",
            auth=("hamlet@demo.example.com", keys["hamlet@demo.example.com"]),
            data={"event_types": '["test"]'},
            timeout=10,
        )
        assert registered.status_code == 200, registered.text
        page = requests.get(f"{site}/demo", timeout=10)
        assert page.status_code == 200
        assert "demo.js" in page.text
        users = requests.get(f"{site}/json/dev_users", timeout=10).json()["users"]
        assert {u["email"] for u in users} >= set(keys)
        assert requests.get(f"{site}/operator", timeout=10).status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        try:
            status = process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    assert status == 0, out.read_text()[-3000:]
    assert "saved 1 queues" in out.read_text()
