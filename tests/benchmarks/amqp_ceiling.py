"""How many notices a second fanout.py's path through RabbitMQ carries on
this machine with no eventq behind it: with that publisher and window, the
ceiling of any server consuming the notify queue there (more publishers or
a cheaper client than pika's blocking connection would carry more).

The path is fanout.py's small events through RabbitMQ minus the server: a
thread of this process publishes each notice as fanout.py's `AmqpPublisher`
does (pika blocking connection, persistent, the notice id and the publish
time in the headers, no confirms), keeping `window` notices in flight until
consumed; a process of its own consumes them as eventq's consumer does
(pika's AsyncioConnection on uvloop, prefetch 1,000, one acknowledgement
with `multiple` per loop iteration) and does nothing else with them. The
publisher, the broker and the consumer share this machine's cores as they
do in fanout.py's run, where the clients and the server come on top.

    .venv/bin/python tests/benchmarks/amqp_ceiling.py --duration 10
    .venv/bin/python tests/benchmarks/amqp_ceiling.py --consume URL QUEUE  # the consumer

fanout.py runs `measure` in the vhost of its run, after eventq's small
events through RabbitMQ, and prints the figure beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
from broker import (  # beside this script
    BrokerError,
    Vhost,
    broker_pid,
    process_cpu_secs,
    publish_notice,
)

from server.delivery.consumer import PREFETCH

QUEUE = "eventq_bench_ceiling"
DRAIN_TIMEOUT_SECS = 30.0
# A broker under a memory or disk alarm blocks publishers: fail, not hang.
BLOCKED_TIMEOUT_SECS = 30.0


def consume(url: str, queue_name: str) -> None:
    """The consumer process: writes "ready" once consuming, then after each
    loop iteration that took notices, how many it took, a line each."""
    from pika.adapters.asyncio_connection import AsyncioConnection

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # eventq runs on asyncio's own loop then too
        pass

    async def run() -> None:
        loop = asyncio.get_running_loop()
        taken = 0
        last_tag = 0
        flushing = False
        opened: asyncio.Future[Any] = loop.create_future()
        closed: asyncio.Future[None] = loop.create_future()

        def flush() -> None:
            nonlocal taken, flushing
            flushing = False
            if not channel.is_open:  # closed under us: the publisher sees no progress
                return
            channel.basic_ack(last_tag, multiple=True)
            sys.stdout.write(f"{taken}\n")
            sys.stdout.flush()
            taken = 0

        def on_message(_channel: Any, method: Any, _properties: Any, _body: bytes) -> None:
            nonlocal taken, last_tag, flushing
            taken += 1
            last_tag = method.delivery_tag
            if not flushing:
                flushing = True
                loop.call_soon(flush)

        def on_open(connection: Any) -> None:
            connection.channel(on_open_callback=opened.set_result)

        def on_closed(_connection: Any, reason: BaseException) -> None:
            if not closed.done():
                closed.set_result(None)
            if not opened.done():
                opened.set_exception(RuntimeError(f"could not connect: {reason!r}"))

        connection = AsyncioConnection(
            pika.URLParameters(url),
            on_open_callback=on_open,
            on_open_error_callback=on_closed,
            on_close_callback=on_closed,
            custom_ioloop=loop,
        )
        channel = await opened
        channel.basic_qos(prefetch_count=PREFETCH)  # eventq's consumer's
        channel.basic_consume(queue_name, on_message, auto_ack=False)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        # Until the measuring process closes our stdin (or the broker us).
        await asyncio.wait(
            [asyncio.ensure_future(reader.read()), closed], return_when=asyncio.FIRST_COMPLETED
        )
        if not closed.done():
            connection.close()
            await asyncio.wait([closed], timeout=5)

    asyncio.run(run())


class _Consumed:
    """The consumer's count, read from its lines by a thread of ours."""

    def __init__(self, process: subprocess.Popen[str]):
        self.count = 0
        self.ready = threading.Event()  # set by its "ready" line, or when it ends
        self.started = False  # by its "ready" line only
        self.changed = threading.Condition()
        self.process = process
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == "ready":
                self.started = True
                self.ready.set()
                continue
            with self.changed:
                self.count += int(line)  # anything else ends the count: the run fails
                self.changed.notify_all()
        self.ready.set()  # it ended: `measure` sees that


def measure(
    url: str,
    notice: Callable[[int], bytes],
    window: int,
    duration: float,
) -> dict[str, Any]:
    """Notices `notice(seq)` through RabbitMQ at `url` for `duration` s,
    `window` in flight until consumed; then every one is waited for. The
    notices a second, each side's CPU per notice (publisher, consumer, the
    broker), and whether the consumer took exactly what was published."""
    parameters = pika.URLParameters(url)
    parameters.blocked_connection_timeout = BLOCKED_TIMEOUT_SECS
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        channel.queue_declare(QUEUE, durable=True)
        channel.queue_purge(QUEUE)
        process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--consume", url, QUEUE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            consumed = _Consumed(process)
            if not consumed.ready.wait(30) or not consumed.started:
                raise BrokerError("the ceiling's consumer did not start")
            broker = broker_pid()
            broker_before = process_cpu_secs(broker)
            consumer_before = process_cpu_secs(process.pid) or 0.0
            published = 0
            started = time.perf_counter()
            cpu_started = time.thread_time()
            while time.perf_counter() - started < duration:
                with consumed.changed:
                    consumed.changed.wait_for(
                        lambda sent=published: sent - consumed.count < window, 5
                    )
                if published - consumed.count >= window:
                    raise BrokerError("the ceiling's consumer took nothing for 5 s")
                published += 1
                publish_notice(channel, QUEUE, notice(published))
            publisher_cpu = time.thread_time() - cpu_started
            window_secs = time.perf_counter() - started
            with consumed.changed:
                consumed.changed.wait_for(lambda: consumed.count >= published, DRAIN_TIMEOUT_SECS)
            consumer_cpu = (process_cpu_secs(process.pid) or 0.0) - consumer_before
            broker_after = process_cpu_secs(broker)
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
            if channel.is_open:
                channel.queue_delete(QUEUE)
    finally:
        if connection.is_open:
            connection.close()
    if consumed.count != published:
        raise BrokerError(f"the ceiling's consumer took {consumed.count} of {published} notices")
    broker_cpu = (
        broker_after - broker_before
        if broker_after is not None and broker_before is not None
        else None
    )
    return {
        "notices": published,
        "window": window,
        "secs": window_secs,
        "notices_per_sec": published / window_secs,
        "publisher_cpu_per_notice_us": publisher_cpu / published * 1e6,
        "consumer_cpu_per_notice_us": consumer_cpu / published * 1e6,
        "broker_cpu_per_notice_us": None if broker_cpu is None else broker_cpu / published * 1e6,
    }


def render(figures: dict[str, Any]) -> str:
    broker = figures["broker_cpu_per_notice_us"]
    return (
        f"RabbitMQ alone (no server, a bare pika consumer): {figures['notices_per_sec']:,.0f}"
        f" notices/s, {figures['window']} in flight; CPU per notice: publisher"
        f" {figures['publisher_cpu_per_notice_us']:.0f} us, broker"
        f" {'n/a' if broker is None else f'{broker:.0f} us'}, consumer"
        f" {figures['consumer_cpu_per_notice_us']:.0f} us"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--consume", nargs=2, metavar=("URL", "QUEUE"), help=argparse.SUPPRESS)
    parser.add_argument("--amqp-base", default="amqp://guest:guest@127.0.0.1:5672")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--window", type=int, default=64, help="notices in flight")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.consume:
        consume(*args.consume)
        return 0
    if args.window < 1 or args.duration <= 0:
        parser.error("--window and --duration must be positive")
    body = json.dumps(
        {"event": {"type": "message", "message": {"content": "x" * 600}}, "users": [2]}
    ).encode()
    vhost = Vhost(args.amqp_base)
    vhost.create()
    try:
        figures = measure(vhost.url, lambda _seq: body, args.window, args.duration)
    finally:
        vhost.delete()
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
