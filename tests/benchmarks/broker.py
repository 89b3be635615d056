"""The RabbitMQ broker of this machine, for the benchmarks that publish
through it (rabbitmq.py, fanout.py's small events, amqp_ceiling.py): a vhost
of a run's own, made and removed with rabbitmqctl, the broker's CPU time,
and a notice published as `send_event` publishes it."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pika

from generation.notice import NOTICE_ID_HEADER, PUBLISHED_HEADER

TICKS = os.sysconf("SC_CLK_TCK")


class BrokerError(RuntimeError):
    """rabbitmqctl is missing or refused what it was asked."""


def rabbitmqctl(*args: str) -> None:
    """rabbitmqctl needs root's Erlang cookie: through sudo otherwise (as the tests do)."""
    command = ["rabbitmqctl", "--quiet", *args]
    if os.geteuid() != 0 and shutil.which("sudo"):
        command = ["sudo", "-n", *command]
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=120)
    except FileNotFoundError:
        raise BrokerError("rabbitmqctl is not on PATH (it creates the benchmark's vhost)") from None
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or exc.stdout or b"").decode(errors="replace").strip()
        raise BrokerError(f"rabbitmqctl {' '.join(args)} failed: {detail[-500:]}") from None


class Vhost:
    """A RabbitMQ vhost of this run's own; `delete` removes it and its queues."""

    def __init__(self, base_url: str):
        self.name = f"eventq_bench_{secrets.token_hex(4)}"
        self.url = f"{base_url.rstrip('/')}/{self.name}"
        self.created = False

    def create(self) -> None:
        rabbitmqctl("add_vhost", self.name)
        self.created = True
        rabbitmqctl("set_permissions", "-p", self.name, "guest", ".*", ".*", ".*")

    def delete(self) -> None:
        if self.created:
            rabbitmqctl("delete_vhost", self.name)
            self.created = False


def broker_pid() -> int | None:
    """The RabbitMQ node on this machine (the Erlang VM, beam.smp), for its CPU."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "beam.smp":
                    return int(entry.name)
    return None


def process_cpu_secs(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def publish_notice(channel: Any, queue: str, body: bytes) -> None:
    """Publish the notice `body` to `queue` on a pika blocking channel as
    `send_event` does (persistent, its id and the publish time in the
    headers), without waiting for a confirmation."""
    notice_id = uuid.uuid4().hex
    channel.basic_publish(
        "",
        queue,
        body,
        pika.BasicProperties(
            content_type="application/json",
            delivery_mode=pika.DeliveryMode.Persistent,
            message_id=notice_id,
            headers={NOTICE_ID_HEADER: notice_id, PUBLISHED_HEADER: time.time_ns() // 1000},
        ),
    )
