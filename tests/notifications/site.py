"""The notification pipeline end to end (docs/notifications.md): a real test
server (tests/support.py) that finds users away and publishes to its own
RabbitMQ notification queue, the worker as a real process consuming it
(`python -m server notifications run`), a real SMTP server and a webhook
receiver on loopback. Messages are sent through the HTTP API, as a user
would; the tests assert what users and operators observe."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from tests.notifications.mailbox import Mailbox
from tests.notifications.receiver import WebhookReceiver
from tests.support import REPO, Api, ServerProcess, World, ok, wait_for

WEBHOOK_SECRET = "test-webhook-secret-0123456789"
SENDER = "Test site <notifications@example.com>"


class Worker:
    """`python -m server notifications run` with the test server's
    environment and `env`; its output goes to a file of the test's."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Worker:
        with self.log_path.open("ab") as log:
            proc = self.proc = subprocess.Popen(
                [sys.executable, "-m", "server", "notifications", "run"],
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        queue = self.env["EVENTQ_NOTIFICATION_QUEUE"]
        wait_for(
            lambda: f"consuming {queue}" in self.log() or proc.poll() is not None,
            timeout,
            "the worker to consume",
        )
        assert proc.poll() is None, f"the worker exited:\n{self.log()}"
        return self

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace") if self.log_path.exists() else ""

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, as systemd stops it; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def status(self) -> dict[str, Any]:
        """`eventq notifications status`, as an operator runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "server", "notifications", "status"],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        body: dict[str, Any] = json.loads(done.stdout)
        return body


class Site:
    """One test's installation: a server, a realm of its users, an SMTP
    server, a webhook receiver, and the workers the test starts."""

    def __init__(
        self,
        server: ServerProcess,
        world: World,
        tmp_path: Path,
        mailbox: Mailbox,
        smtp_url: str,
        realm_name: str = "Notified Inc",
    ):
        self.server = server
        self.world = world
        self.tmp_path = tmp_path
        self.realm = world.realm(realm_name)
        self.mailbox = mailbox
        self.smtp_url = smtp_url
        self.webhook = WebhookReceiver(WEBHOOK_SECRET).start()
        self.workers: list[Worker] = []
        self.clients: list[Api] = []

    def user(self, name: str, role: str = "member") -> Api:
        client = Api(self.server, self.world.user(self.realm, role, name))
        self.clients.append(client)
        return client

    def worker(
        self, *, email: bool = True, webhook: bool = False, delay: float | None = 1.0, **env: str
    ) -> Worker:
        """Start a worker sending emails (after a window of `delay` s, or
        None: each user's own) and/or webhook calls; `env`: more EVENTQ_*
        settings."""
        environ = self.server.env()
        environ.update(
            EVENTQ_LOG_LEVEL="INFO",
            EVENTQ_SITE_URL=self.server.url,
            EVENTQ_NOTIFICATION_FROM=SENDER,
            EVENTQ_NOTIFICATION_TICK_SECS="0.1",
            EVENTQ_NOTIFICATION_RETRY_SECS="0.2",
        )
        if delay is not None:
            environ["EVENTQ_NOTIFICATION_DELAY_SECS"] = str(delay)
        if email:
            environ["EVENTQ_SMTP_URL"] = self.smtp_url
        if webhook:
            environ["EVENTQ_NOTIFICATION_WEBHOOK_URL"] = self.webhook.url
            environ["EVENTQ_NOTIFICATION_WEBHOOK_SECRET"] = WEBHOOK_SECRET
        environ.update(env)
        worker = Worker(environ, self.tmp_path / f"worker-{len(self.workers)}.log")
        self.workers.append(worker)
        return worker.start()

    def rows(self, user: Api) -> list[dict[str, Any]]:
        """The worker's records of `user` (deploy/migrations/0024_notifications.sql)."""
        with psycopg.connect(self.server.database_url, autocommit=True) as conn:
            cur = conn.execute(
                "SELECT message_id, via, email, push, email_attempts, push_attempts, push_removed"
                " FROM notifications WHERE user_id = %s ORDER BY message_id",
                (user.user.user_id,),
            )
            names = [column.name for column in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def wait_rows(
        self, user: Api, condition: Callable[[list[dict[str, Any]]], bool], what: str
    ) -> list[dict[str, Any]]:
        return list(
            wait_for(lambda: (rows := self.rows(user)) and condition(rows) and rows, 30, what)
        )

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.mailbox.release()
        self.webhook.close()
        for client in self.clients:
            client.close()
        # A failed test may leave rows pending: the next test's worker must
        # not send them (every test's worker reads the session's database).
        if self.clients:
            with psycopg.connect(self.server.database_url, autocommit=True) as conn:
                conn.execute(
                    "DELETE FROM notifications WHERE realm_id = %s",
                    (self.clients[0].user.realm_id,),
                )


def send_dm(sender: Api, to: Api, content: str) -> int:
    sent = ok(
        sender.request("POST", "messages", type="direct", to=[to.user.user_id], content=content)
    )
    return int(sent["id"])


def mark_read(user: Api, *message_ids: int) -> None:
    ok(user.request("POST", "messages/flags", messages=list(message_ids), op="add", flag="read"))
