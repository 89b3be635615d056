"""A Spark standalone cluster on loopback, from the pyspark package: a master
and workers started as plain processes (`<pyspark>/bin/spark-class
org.apache.spark.deploy.master.Master ...` and `...worker.Worker ...`, no
daemon scripts), for tests/deploy/test_spark_cluster.py and spark_job.py's
`--cluster`.

Under the cluster's directory each process has one of its own holding its
log (stdout and stderr), and each worker its work directory (an executor's
stderr is `<work>/<application id>/<executor id>/stderr`) and its local
directory (shuffle files). Each process leads a process group of its own,
which the executors its worker starts join: `stop()` ends every one of
them, whatever state the cluster was left in.

Standard library only: spark_job.py imports it from beside itself, the tests
as `tests.benchmarks.sparkcluster`.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

HOST = "127.0.0.1"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
# The master and two workers were up in 4 to 17 s on the 2-core machine (as
# loaded as it was), 8 to 10 s pinned to one core; the CI's slow run (half of
# one core) takes several times that.
START_SECS = 300.0
# After SIGTERM, how long the JVMs get to run their shutdown hooks (a worker
# kills its executors) before their groups are killed.
STOP_SECS = 30.0
# Environment variables a user's Spark set-up may hold: another Spark, another
# configuration directory, daemon options. The cluster is pip's pyspark, bare.
FOREIGN_PREFIXES = ("SPARK_", "PYSPARK_")


class ClusterError(RuntimeError):
    """A process of the cluster exited, or the cluster was not up in time
    (raised by StandaloneCluster.start and wait_for, with the logs' ends)."""


def free_ports(count: int) -> list[int]:
    """Ports free on HOST now (held together, so they differ)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]


def spark_class() -> Path:
    """`bin/spark-class` of the pyspark package this Python imports."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ClusterError("pyspark is not installed in this Python")
    return Path(spec.origin).parent / "bin" / "spark-class"


def fetch_json(url: str) -> Any:
    """The JSON document at `url` (a master's or a worker's `/json/`), or
    None while nothing answers there."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (our http URL)
            return json.load(response)
    # Refused, reset or timed out; a page cut short or half written.
    except (OSError, http.client.HTTPException, ValueError):
        return None


@dataclass(frozen=True)
class Worker:
    """A worker's ports and directories (`directory` holds `work/`, `local/`
    and its `log`)."""

    name: str
    port: int
    webui_port: int
    directory: Path

    @property
    def work_dir(self) -> Path:
        return self.directory / "work"

    @property
    def web_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"


class StandaloneCluster:
    """A master and `workers` workers of `cores` cores and `memory` (as
    spark-class takes it: "1g") each, on HOST, under `directory` (one that
    does not exist yet, or an empty one). `env` is added to the processes'
    environment (the caller's, less its Spark settings; `self.env`, for a
    client of the cluster too); the executors inherit it from their worker.

    Created stopped; `start()` returns once the master lists every worker
    ALIVE, `stop()` ends all processes. As a context manager, it is started
    and stopped around the block.
    """

    def __init__(
        self,
        directory: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Mapping[str, str] | None = None,
    ):
        self.directory = directory
        self.cores = cores
        self.memory = memory
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_PREFIXES)},
            "SPARK_LOCAL_IP": HOST,
            **(env or {}),
        }
        self.port, self.webui_port, *ports = free_ports(2 + 2 * workers)
        self.workers = [
            Worker(f"worker-{n + 1}", ports[2 * n], ports[2 * n + 1], directory / f"worker-{n + 1}")
            for n in range(workers)
        ]
        # name -> process, each the leader of its own process group; every
        # process started is here until stop() has ended its group.
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The master's URL, for `--master`."""
        return f"spark://{HOST}:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def status(self) -> Any:
        """The master's `/json/` (workers, active and completed applications),
        or None while it does not answer."""
        return fetch_json(f"{self.web_url}/json/")

    def worker_status(self, worker: Worker) -> Any:
        """A worker's `/json/` (its executors, running and finished), or None."""
        return fetch_json(f"{worker.web_url}/json/")

    def _launch(self, name: str, main: str, args: list[str], env: Mapping[str, str]) -> None:
        directory = self.directory / name
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / "log").open("wb") as log:
            self.processes[name] = subprocess.Popen(
                [str(spark_class()), main, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a group of its own: stop() ends it whole
            )

    def start(self, timeout: float = START_SECS) -> Self:
        """Start the master and the workers (at once: the workers retry until
        the master answers) and wait until the master lists them all ALIVE.
        Raises ClusterError, having stopped what it started, if a process
        exits or `timeout` seconds pass first."""
        try:
            master_args = ["--host", HOST, "--port", str(self.port)]
            master_args += ["--webui-port", str(self.webui_port)]
            self._launch("master", MASTER, master_args, self.env)
            for worker in self.workers:
                (worker.directory / "local").mkdir(parents=True)
                worker.work_dir.mkdir()
                args = ["--host", HOST, "--port", str(worker.port),
                        "--webui-port", str(worker.webui_port),
                        "--cores", str(self.cores), "--memory", self.memory,
                        "--work-dir", str(worker.work_dir), self.url]  # fmt: skip
                env = {**self.env, "SPARK_LOCAL_DIRS": str(worker.directory / "local")}
                self._launch(worker.name, WORKER, args, env)
            self.wait_for(self._all_alive, timeout, f"{len(self.workers)} ALIVE workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _all_alive(self) -> bool:
        status = self.status()
        if status is None:
            return False
        if status["url"] != self.url:  # the port was taken meanwhile: Spark moved on
            raise ClusterError(f"the master runs at {status['url']}, not {self.url}")
        alive = [w for w in status["workers"] if w["state"] == "ALIVE"]
        return len(alive) == len(self.workers)

    def wait_for(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll `predicate` until it returns something truthy, and return that.
        Raises ClusterError, with the end of every process's log, when a
        process of the cluster exits or `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            exited = [name for name, p in self.processes.items() if p.poll() is not None]
            if exited:
                raise ClusterError(f"{', '.join(exited)} exited waiting for {what}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} after {timeout:g} s\n{self.logs()}")
            time.sleep(0.2)

    def logs(self, lines: int = 20) -> str:
        """The end of each process's log, for a failure's message."""
        parts = []
        for name in self.processes:
            path = self.directory / name / "log"
            text = path.read_text(errors="replace") if path.exists() else ""
            tail = "\n".join(f"    {line}" for line in text.splitlines()[-lines:])
            parts.append(f"  {name} ({path}):\n{tail or '    (empty)'}")
        return "\n".join(parts)

    def stop(self, timeout: float = STOP_SECS) -> None:
        """End every process and its group: SIGTERM, then SIGKILL to what is
        left after `timeout` seconds (or at once if the leader is gone: its
        executors may not be)."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.processes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
