"""The delivery log (server/observability/deliverylog.py,
server/observability/logfiles.py): records of
every kind in the v1 format (docs/delivery-log.md's column table), files that become visible only
when complete, crash recovery, idempotent compaction, retention, a failing
disk; then a real server's log, and the `eventq logs` commands."""

from __future__ import annotations

import asyncio
import calendar
import errno
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from queues.client import ClientDescriptor, QueueOptions
from server.config import ConfigError, Settings
from server.observability import logfiles
from server.observability.deliverylog import DeliveryLog
from server.observability.logfiles import Record, Spool, compact, encode_record, prune
from server.observability.observe import Observers, make_origin
from tests.logrecords import payload, push, queue_client
from tests.support import error, ok, run_eventq, wait_for

# docs/delivery-log.md's column table, written out again on purpose: the
# module's COLUMNS must match it, not the other way round.
SPEC = [
    ("v", pa.int32()), ("kind", pa.string()), ("time", pa.float64()),
    ("shard", pa.string()), ("realm_id", pa.int64()), ("user_id", pa.int64()),
    ("queue_id", pa.string()), ("client", pa.string()), ("event_id", pa.int64()),
    ("event_type", pa.string()), ("enqueued_at", pa.float64()),
    ("published_at", pa.float64()), ("response_bytes", pa.int64()),
    ("batch_events", pa.int32()), ("queue_depth", pa.int32()), ("outcome", pa.string()),
    ("code", pa.string()), ("waited_secs", pa.float64()), ("reason", pa.string()),
    ("lifetime_secs", pa.float64()), ("latency_secs", pa.float64()),
    ("options", pa.string()), ("notice_id", pa.string()), ("failures", pa.int32()),
    ("error", pa.string()),
]  # fmt: skip
NAMES = [name for name, _ in SPEC]

# 2026-11-23 10:59:59.5 UTC and one second later: two hours.
BEFORE_HOUR = calendar.timegm((2026, 11, 23, 10, 59, 59)) + 0.5
AFTER_HOUR = BEFORE_HOUR + 1.0


def make_client(queue_id="q1", user_id=7, realm_id=3, **options) -> ClientDescriptor:
    options.setdefault("client_name", "ZulipMobile")
    return queue_client(queue_id, user_id, realm_id, **options)


def stop(log: DeliveryLog) -> None:
    asyncio.run(log.stop())


def rows(log_dir: Path) -> list[dict[str, Any]]:
    """Every row the jobs would read, with the partition columns from the path."""
    files = sorted((log_dir / "deliveries").rglob("*.parquet"))
    found = []
    for path in files:
        assert not path.name.startswith(".")
        table = pq.read_table(path)
        assert table.schema.remove_metadata() == pa.schema(SPEC)
        date, hour = path.parent.parent.name, path.parent.name
        found += [row | {"date": date[5:], "hour": int(hour[5:])} for row in table.to_pylist()]
    return sorted(found, key=lambda row: (row["time"], row["kind"], row["event_id"] or 0))


def spool_files(log_dir: Path, hidden: bool | None = None) -> list[Path]:
    return sorted(
        path
        for path in (log_dir / "spool").rglob("*")
        if path.name.endswith((logfiles.SPOOL_SUFFIX, logfiles.OBJECTS_SUFFIX))
        and (hidden is None or path.name.startswith(".") == hidden)
    )


def write_closed(log_dir: Path, shard: str, records: list[Record], hour: int) -> Path:
    spool = Spool(log_dir, shard)
    spool.append(hour, b"".join(encode_record(record) for record in records))
    closed = spool.roll()
    assert closed is not None
    return closed


def record(kind="dead_letter", when=BEFORE_HOUR, shard="s", **fields) -> Record:
    row = dict.fromkeys(NAMES) | {"v": 1, "kind": kind, "time": when, "shard": shard} | fields
    return tuple(row.values())


# -- records -------------------------------------------------------------------


def test_module_columns_are_the_spec():
    assert logfiles.schema() == pa.schema(SPEC)
    assert list(logfiles.NAMES) == NAMES


def test_every_kind_of_record_reads_back_from_parquet(tmp_path):
    log = DeliveryLog(tmp_path, "alpha", flush_secs=0.01)
    log.start()
    client = make_client(event_types=frozenset({"message"}), lifespan_secs=300.0)
    log.registered(client, 0.25, BEFORE_HOUR)
    message = payload("message", make_origin(BEFORE_HOUR - 2, BEFORE_HOUR - 3))
    restored = payload("message")  # restored from a saved queue: times unknown
    items = push(client, message, restored, payload("heartbeat"))
    log.responded(client, items, 321, "events", 1.5, BEFORE_HOUR + 0.1)
    client.event_queue.prune(2)
    items = push(client, payload("heartbeat"))
    log.responded(client, items, 40, "heartbeat", 50.0, BEFORE_HOUR + 0.2)
    log.poll_failed(7, 3, None, "BAD_REQUEST", BEFORE_HOUR + 0.3)
    log.poll_failed(7, 3, "gone", "BAD_EVENT_QUEUE_ID", BEFORE_HOUR + 0.3)
    log.queue_ended(client, "expired", 600.5, BEFORE_HOUR + 0.4)
    log.notice_dead_lettered(None, 4, "BadNotice: no type", AFTER_HOUR, None)
    stop(log)

    assert (log.written, log.dropped, log.pending) == (9, 0, 0)
    assert log.files_compacted == 2  # one file per hour
    assert spool_files(tmp_path) == []
    got = rows(tmp_path)
    common = {"v": 1, "shard": "alpha", "date": "2026-11-23"}
    queue = {"realm_id": 3, "user_id": 7, "queue_id": "q1", "client": "ZulipMobile"}
    register = got[0]
    assert (
        json.loads(register.pop("options"))
        == QueueOptions(
            event_types=frozenset({"message"}), lifespan_secs=300.0, client_name="ZulipMobile"
        ).to_dict()
    )
    expected: list[dict[str, Any]] = [
        {"kind": "register", "time": BEFORE_HOUR, "latency_secs": 0.25, **queue},
        *(
            {
                "kind": "delivery", "time": BEFORE_HOUR + 0.1, **queue, "event_id": event_id,
                "event_type": "message", "enqueued_at": enqueued, "published_at": published,
                "response_bytes": 321, "batch_events": 2, "queue_depth": 3,
            }
            for event_id, enqueued, published in (
                (0, BEFORE_HOUR - 2, BEFORE_HOUR - 3), (1, None, None)
            )
        ),
        {
            "kind": "poll", "time": BEFORE_HOUR + 0.1, **queue, "response_bytes": 321,
            "batch_events": 2, "queue_depth": 3, "outcome": "events", "waited_secs": 1.5,
        },
        {
            "kind": "poll", "time": BEFORE_HOUR + 0.2, **queue, "response_bytes": 40,
            "batch_events": 0, "queue_depth": 1, "outcome": "heartbeat", "waited_secs": 50.0,
        },
        *(
            {
                "kind": "poll", "time": BEFORE_HOUR + 0.3, "realm_id": 3, "user_id": 7,
                "queue_id": queue_id, "batch_events": 0, "outcome": "error", "code": code,
                "waited_secs": 0.0,
            }
            for queue_id, code in ((None, "BAD_REQUEST"), ("gone", "BAD_EVENT_QUEUE_ID"))
        ),
        {
            "kind": "end", "time": BEFORE_HOUR + 0.4, **queue, "queue_depth": 1,
            "reason": "expired", "lifetime_secs": 600.5,
        },
        {
            "kind": "dead_letter", "time": AFTER_HOUR, "failures": 4,
            "error": "BadNotice: no type",
        },
    ]  # fmt: skip
    hours = [10, 10, 10, 10, 10, 10, 10, 10, 11]
    for row, fields, hour in zip(got, expected, hours, strict=True):
        full = dict.fromkeys(NAMES) | common | {"options": None, "hour": hour} | fields
        assert row == {key: full[key] for key in row}, row


def test_one_line_per_record_whatever_the_strings_hold():
    tricky = ['},{"v":1}', "a\nb", '"quoted"\\', "{}", "é\u2028"]
    records = [record(error=text, notice_id=text) for text in tricky]
    lines = logfiles.encode_records(records).splitlines()
    values = [logfiles.decode_line(line) for line in lines]
    assert [dict(zip(NAMES, each, strict=True))["error"] for each in values] == tricky


def test_strings_of_every_kind_come_out_of_the_compaction_as_they_went_in(tmp_path):
    tricky = [
        "", "null", "a\nb\r\tc", '"quoted"\\', "\\", "\\n", "x\x01\x1f\x7f", "é\u2028😀",
        '],[1,"poll",', 'ends],[1,', "{}", "a,b", " padded ",
    ]  # fmt: skip
    hour = int(BEFORE_HOUR // 3600)
    write_closed(tmp_path, "s", [record(error=text, client=text) for text in tricky], hour)
    write_closed(tmp_path, "s", [record(error="plain", notice_id=None)], hour)
    done = compact(tmp_path)
    assert (done.records, done.skipped_lines) == (len(tricky) + 1, 0)
    got = rows(tmp_path)
    assert [row["error"] for row in got] == [*tricky, "plain"]
    assert [row["client"] for row in got] == [*tricky, None]


def test_records_are_appended_on_the_loop_without_touching_the_disk(tmp_path):
    log = DeliveryLog(tmp_path / "logs", "s")  # never started: no writer
    client = make_client()
    log.responded(client, push(client, payload("message")), 10, "events", 0.0, time.time())
    assert log.pending == 2
    assert not (tmp_path / "logs").exists()


def test_a_full_buffer_drops_and_counts(tmp_path, caplog):
    log = DeliveryLog(tmp_path, "s", max_pending=5)
    client = make_client()
    items = push(client, *(payload("message") for _ in range(3)))
    log.responded(client, items, 10, "events", 0.0, time.time())  # 4 records
    log.responded(client, items, 10, "events", 0.0, time.time())  # 1 fits
    log.queue_ended(client, "deleted", 1.0, time.time())
    assert (log.pending, log.dropped) == (5, 4)
    with caplog.at_level(logging.WARNING, logger="eventq.deliverylog"):
        log.start()
        stop(log)
    assert (log.written, log.dropped) == (5, 4)
    assert "4 records dropped because 5 were already waiting" in caplog.text


def test_the_servers_hook_is_the_compiled_buffers_and_records_as_responded_does(tmp_path):
    """What the server calls for each answer (`responder`, through
    `Observers.responders`) records what `responded` records, into the
    same bounded buffer."""
    log = DeliveryLog(tmp_path, "s", max_pending=3)
    observers = Observers([log])
    [respond] = observers.responders
    assert respond == log.responder()
    assert respond.__self__ is not log  # the buffer's own, not a frame of DeliveryLog
    client = make_client()
    items = push(client, payload("message"))
    now = time.time()
    respond(client, items, 10, "events", 0.5, now)
    log.responded(client, items, 10, "events", 0.5, now)
    assert (log.pending, log.dropped, log.overflowed) == (3, 1, 1)
    log.start()
    stop(log)
    got = rows(tmp_path)
    assert sorted(row["kind"] for row in got) == ["delivery", "delivery", "poll"]
    assert {row["waited_secs"] for row in got if row["kind"] == "poll"} == {0.5}


# -- files ----------------------------------------------------------------------


def test_the_open_file_is_hidden_until_it_is_rolled(tmp_path):
    spool = Spool(tmp_path, "s")
    hour = int(BEFORE_HOUR // 3600)
    spool.append(hour, encode_record(record()))
    opened = spool.open_path
    assert opened is not None
    assert opened.name.startswith(".s-")
    assert opened.parent == tmp_path / "spool/date=2026-11-23/hour=10"
    assert spool_files(tmp_path) == [opened]
    spool.append(hour + 1, encode_record(record(when=AFTER_HOUR)))  # next hour: rolls
    visible = spool_files(tmp_path, hidden=False)
    assert len(visible) == 1
    assert visible[0].parent.name == "hour=10"
    assert spool_files(tmp_path, hidden=True)[0].parent.name == "hour=11"
    closed = spool.roll()
    assert closed is not None
    assert spool_files(tmp_path, hidden=True) == []
    assert closed.read_bytes() == encode_record(record(when=AFTER_HOUR))


def test_by_default_an_hour_of_a_shard_is_one_file(tmp_path):
    # Spark pays per file it opens: a file stays open the whole hour unless
    # EVENTQ_LOG_ROLL_SECS is shorter (or it reaches MAX_FILE_BYTES).
    spool = Spool(tmp_path, "s")
    hour = int(BEFORE_HOUR // 3600)
    spool.append(hour, encode_record(record(when=BEFORE_HOUR - 3000)))
    assert spool._file is not None
    spool._file.opened_at -= 59 * 60  # open since 10:00:59
    spool.append(hour, encode_record(record(when=BEFORE_HOUR)))
    assert not spool.due(BEFORE_HOUR)
    assert spool.due(AFTER_HOUR)
    spool.roll()
    compact(tmp_path)
    [parquet] = (tmp_path / "deliveries").rglob("*.parquet")
    assert pq.read_table(parquet).num_rows == 2


def test_files_roll_by_size_and_age_and_compact_while_running(tmp_path):
    log = DeliveryLog(tmp_path, "s", flush_secs=0.01, roll_secs=600, max_file_bytes=1500)
    log.start()
    client = make_client()
    items = push(client, *(payload("message") for _ in range(5)))

    # By size: 6 records of about 175 bytes fit in a 1,500 byte file, 12 do not.
    def written(count: int) -> Callable[[], bool]:
        return lambda: log.written == count

    for n in range(1, 4):
        log.responded(client, items, 10, "events", 0.0, time.time())
        wait_for(written(6 * n), what="a write")
    wait_for(lambda: log.files_compacted == 2, what="a roll by size")
    assert len(spool_files(tmp_path, hidden=True)) == 1
    assert len(rows(tmp_path)) == 12
    # By age: what is in the open file becomes readable within roll_secs.
    log.spool.roll_secs = 0.1
    log.queue_ended(client, "deleted", 1.0, time.time())
    # Written, then rolled: the open file may roll by age before the record
    # is written (a slow test step), leaving no spool file for a moment.
    wait_for(lambda: log.written == 19 and not spool_files(tmp_path), what="a roll by age")
    assert {row["kind"] for row in rows(tmp_path)} == {"delivery", "poll", "end"}
    stop(log)
    assert len(rows(tmp_path)) == 19


def test_a_crash_leftover_is_recovered_without_its_torn_line(tmp_path):
    # A hidden file of a process that died mid-write, and one of a live process.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    directory = tmp_path / "spool/date=2026-11-23/hour=10"
    directory.mkdir(parents=True)
    lines = [encode_record(record(failures=n)) for n in range(3)]
    leftover = directory / f".s-{dead.stdout.strip()}-1.rows"
    leftover.write_bytes(b"".join(lines)[:-10])
    alive = directory / f".s-{os.getppid()}-1.rows"
    alive.write_bytes(lines[0])
    other_shard = directory / f".other-{dead.stdout.strip()}-1.rows"
    other_shard.write_bytes(lines[0])

    log = DeliveryLog(tmp_path, "s", flush_secs=0.01)
    log.start()
    wait_for(lambda: log.files_compacted == 1, what="recovery")
    stop(log)
    assert [row["failures"] for row in rows(tmp_path)] == [0, 1]
    assert not leftover.exists()
    assert alive.exists()
    assert other_shard.exists()


def test_files_of_the_earlier_format_are_recovered_and_compacted(tmp_path):
    """An upgrade: a JSON object per line, `.jsonl`, left closed or open
    (by a process now gone) by the version before."""
    directory = tmp_path / "spool/date=2026-11-23/hour=10"
    directory.mkdir(parents=True)
    objects = [json.dumps(dict(zip(NAMES, record(failures=n), strict=True))) for n in range(4)]
    (directory / "s-1-1.jsonl").write_text(f"{objects[0]}\n{objects[1]}\n")
    (directory / f".s-{2**22 + 1}-2.jsonl").write_text(f"{objects[2]}\n{objects[3][:-5]}")
    log = DeliveryLog(tmp_path, "s", flush_secs=0.01)
    log.start()
    wait_for(lambda: log.files_compacted == 2, what="recovery and compaction")
    stop(log)
    assert [row["failures"] for row in rows(tmp_path)] == [0, 1, 2]
    assert spool_files(tmp_path) == []


def test_compaction_is_idempotent_when_interrupted_before_deleting_its_inputs(tmp_path):
    hour = int(BEFORE_HOUR // 3600)
    first = write_closed(tmp_path, "s", [record(failures=1)], hour)
    second = write_closed(tmp_path, "s", [record(failures=2)], hour)
    kept = {path: path.read_bytes() for path in (first, second)}
    done = compact(tmp_path, "s")
    assert (done.inputs, done.records, len(done.written)) == (2, 2, 1)
    parquet = done.written[0]
    assert parquet.parent == tmp_path / "deliveries/date=2026-11-23/hour=10"
    again = compact(tmp_path, "s")
    assert (again.inputs, again.written) == (0, [])

    # The crash: the Parquet file was renamed into place, one input was not
    # deleted yet, and a temporary file of another attempt was left.
    first.write_bytes(kept[first])
    (parquet.parent / f".s-{'0' * 16}.parquet.tmp").write_bytes(b"half")
    redone = compact(tmp_path, "s")
    assert (redone.inputs, redone.written) == (1, [])
    assert not first.exists()
    assert [path.name for path in parquet.parent.iterdir()] == [parquet.name]
    assert [row["failures"] for row in rows(tmp_path)] == [1, 2]


def test_compaction_leaves_out_a_damaged_line(tmp_path):
    hour = int(BEFORE_HOUR // 3600)
    path = write_closed(tmp_path, "s", [record(failures=1), record(failures=2)], hour)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"v": 1, "kind"\n' + lines[1] + b'{"v": 1, "ki')
    done = compact(tmp_path)
    assert (done.records, done.skipped_lines) == (2, 1)


def test_a_damaged_line_beside_control_characters_loses_only_itself(tmp_path):
    hour = int(BEFORE_HOUR // 3600)
    texts = ["plain", "line\nbreak", "ctl\x01x", "C:\\new", "tab\there"]
    path = write_closed(tmp_path, "s", [record(error=text) for text in texts], hour)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]) + b"garbage\n" + b"".join(lines[2:]))
    done = compact(tmp_path)
    assert (done.records, done.skipped_lines) == (len(texts), 1)
    assert [row["error"] for row in rows(tmp_path)] == texts


def test_retention_deletes_old_date_partitions(tmp_path):
    now = BEFORE_HOUR  # 2026-11-23
    for area in ("spool", "deliveries"):
        for date in ("2026-10-23", "2026-10-24", "2026-11-23"):
            (tmp_path / area / f"date={date}" / "hour=00").mkdir(parents=True)
    assert prune(tmp_path, 0, now) == []
    deleted = prune(tmp_path, 30, now)
    assert sorted(str(path.relative_to(tmp_path)) for path in deleted) == [
        "deliveries/date=2026-10-23",
        "spool/date=2026-10-23",
    ]
    for area in ("spool", "deliveries"):
        assert sorted(path.name for path in (tmp_path / area).iterdir()) == [
            "date=2026-10-24",
            "date=2026-11-23",
        ]

    # The writer applies it too.
    log = DeliveryLog(tmp_path, "s", flush_secs=0.01, retention_days=1)
    log.start()
    wait_for(lambda: not (tmp_path / "deliveries/date=2026-10-24").exists(), what="retention")
    stop(log)


# -- a failing disk -------------------------------------------------------------


class FullDisk:
    """os.write that fails with ENOSPC after writing part of the data, while
    `full`; the loop must not notice."""

    def __init__(self) -> None:
        self.full = False
        self.failures = 0

    def __call__(self, fd: int, data: bytes) -> int:
        if self.full:
            os.write(fd, data[: len(data) // 2])
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/var/log/eventq/x")
        return os.write(fd, data)


def test_a_full_disk_drops_with_a_counter_and_a_warning_then_recovers(tmp_path, caplog):
    disk = FullDisk()
    log = DeliveryLog(tmp_path, "s", flush_secs=0.01, write=disk)
    log.start()
    client = make_client()
    log.queue_ended(client, "deleted", 1.0, time.time())
    wait_for(lambda: log.written == 1, what="the first write")
    disk.full = True
    with caplog.at_level(logging.WARNING, logger="eventq.deliverylog"):
        # Three records in one call (two deliveries and their poll), so that
        # the writer takes them in one batch: three calls could straddle one
        # of its cycles (10 ms apart) and be warned of apart.
        items = push(client, payload("message"), payload("message"))
        log.responded(client, items, 10, "events", 0.0, time.time())  # returns at once
        wait_for(lambda: log.dropped == 3, what="the drop")
        disk.full = False
        log.queue_ended(client, "overflow", 1.0, time.time())
        wait_for(lambda: log.written == 2, what="writing again")
    stop(log)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # rate-limited
    assert "ENOSPC" in warnings[0]
    assert "/var/log/eventq/x" in warnings[0]
    assert "3 records dropped" in warnings[0]
    assert "free space" in warnings[0]
    # The torn batch was cut off: the file holds whole lines only.
    assert [row["reason"] for row in rows(tmp_path)] == ["deleted", "overflow"]


def test_a_log_dir_that_is_a_file_drops_and_stops_cleanly(tmp_path, caplog):
    not_a_dir = tmp_path / "logs"
    not_a_dir.write_text("oops")
    log = DeliveryLog(not_a_dir, "s", flush_secs=0.01)
    with caplog.at_level(logging.WARNING, logger="eventq.deliverylog"):
        log.start()
        log.notice_dead_lettered("n", 4, "boom", time.time(), 5)
        wait_for(lambda: log.dropped == 1, what="the drop")
        stop(log)
    assert log.written == 0
    assert any(str(not_a_dir) in r.getMessage() for r in caplog.records)


# -- configuration ----------------------------------------------------------------


def test_settings_read_the_delivery_log_variables():
    defaults = Settings.from_env({})
    assert defaults.log_dir is None
    assert defaults.shard_name == "default"
    assert (defaults.log_flush_secs, defaults.log_roll_secs) == (1.0, 3600.0)
    assert (defaults.log_retention_days, defaults.log_max_pending) == (30, 500_000)
    settings = Settings.from_env(
        {
            "EVENTQ_LOG_DIR": "/srv/logs",
            "EVENTQ_SHARD": "eu-2_b",
            "EVENTQ_LOG_FLUSH_SECS": "0.5",
            "EVENTQ_LOG_ROLL_SECS": "60",
            "EVENTQ_LOG_RETENTION_DAYS": "0",
            "EVENTQ_LOG_MAX_PENDING": "1000",
        }
    )
    assert settings.log_dir == Path("/srv/logs")
    assert settings.shard_name == "eu-2_b"
    assert (settings.log_flush_secs, settings.log_roll_secs) == (0.5, 60.0)
    assert (settings.log_retention_days, settings.log_max_pending) == (0, 1000)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EVENTQ_SHARD": "a/b"}, "EVENTQ_SHARD must be letters, digits"),
        ({"EVENTQ_SHARD": "é"}, "EVENTQ_SHARD must be letters, digits"),
        ({"EVENTQ_LOG_FLUSH_SECS": "0"}, "EVENTQ_LOG_FLUSH_SECS must be a finite number"),
        ({"EVENTQ_LOG_ROLL_SECS": "soon"}, "EVENTQ_LOG_ROLL_SECS must be a number"),
        ({"EVENTQ_LOG_RETENTION_DAYS": "-1"}, "EVENTQ_LOG_RETENTION_DAYS must be >= 0"),
        ({"EVENTQ_LOG_MAX_PENDING": "0"}, "EVENTQ_LOG_MAX_PENDING must be >= 1"),
    ],
)
def test_bad_delivery_log_settings_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


# -- a real server ------------------------------------------------------------------


def test_a_servers_log_holds_what_its_clients_got(start_server, api, tmp_path):
    logs = tmp_path / "logs"
    server = start_server(
        EVENTQ_LOG_DIR=str(logs), EVENTQ_SHARD="eu1", EVENTQ_LOG_FLUSH_SECS="0.05"
    )
    alice, bob = api(on=server), api(on=server)
    started = time.time()
    first = alice.register()["queue_id"]
    second = bob.register(event_types=["dl_test"])["queue_id"]
    for n in range(3):
        server.notify({"type": "dl_test", "n": n}, [alice.user.user_id])
    server.notify({"type": "dl_test", "n": 3}, [alice.user.user_id, bob.user.user_id])
    assert [e["n"] for e in alice.events(first, -1)] == [0, 1, 2, 3]
    assert [e["n"] for e in bob.events(second, -1)] == [3]
    error(alice.get_events(queue_id="no-such-queue", last_event_id=-1))
    ok(bob.request("DELETE", "events", queue_id=second))
    assert server.stop() == 0
    stopped = time.time()

    assert spool_files(logs) == []
    table = ds.dataset(logs / "deliveries", format="parquet", partitioning="hive").to_table()
    got = [
        row for row in table.to_pylist() if row["user_id"] in (alice.user.user_id, bob.user.user_id)
    ]
    assert {row["shard"] for row in got} == {"eu1"}
    assert all(started <= row["time"] <= stopped for row in got)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for row in got:
        by_kind.setdefault(row["kind"], []).append(row)

    deliveries = by_kind.pop("delivery")
    assert sorted(
        (row["user_id"], row["queue_id"], row["event_id"], row["event_type"]) for row in deliveries
    ) == sorted(
        [(alice.user.user_id, first, n, "dl_test") for n in range(4)]
        + [(bob.user.user_id, second, 0, "dl_test")]
    )
    for row in deliveries:
        assert row["realm_id"] in (alice.user.realm_id, bob.user.realm_id)
        assert started <= row["enqueued_at"] <= row["time"]
        assert row["published_at"] is None  # the internal endpoint stamps nothing
        assert row["client"] == "python-requests"
        assert row["batch_events"] == (4 if row["queue_id"] == first else 1)
        assert row["response_bytes"] > 0

    polls = sorted(by_kind.pop("poll"), key=lambda row: row["time"])
    assert [(row["queue_id"], row["outcome"], row["code"]) for row in polls] == [
        (first, "events", None),
        (second, "events", None),
        ("no-such-queue", "error", "BAD_EVENT_QUEUE_ID"),
    ]
    registers = by_kind.pop("register")
    assert sorted(row["queue_id"] for row in registers) == sorted([first, second])
    assert all(row["latency_secs"] > 0 for row in registers)
    bobs = next(row for row in registers if row["queue_id"] == second)
    assert json.loads(bobs["options"])["event_types"] == ["dl_test"]
    ends = by_kind.pop("end")
    assert [(row["queue_id"], row["reason"]) for row in ends] == [(second, "deleted")]
    assert by_kind == {}
    assert {row["date"] for row in got} == {time.strftime("%Y-%m-%d", time.gmtime(started))}


def test_a_killed_server_loses_at_most_one_flush_interval(start_server, api, tmp_path):
    logs = tmp_path / "logs"
    env = {"EVENTQ_LOG_DIR": str(logs), "EVENTQ_LOG_FLUSH_SECS": "0.05"}
    server = start_server(tmp_path / "state", **env)
    client = api(on=server)
    queue_id = client.register()["queue_id"]
    for n in range(5):
        server.notify({"type": "dl_crash", "n": n}, [client.user.user_id])
    assert len(client.events(queue_id, -1)) == 5

    def flushed() -> bool:
        lines = b"".join(path.read_bytes() for path in spool_files(logs, hidden=True))
        kinds = [logfiles.decode_line(line)[1] for line in lines.splitlines()]
        return kinds.count("delivery") == 5

    wait_for(flushed, what="the deliveries flushed to the open file")
    server.kill()
    restarted = start_server(tmp_path / "state", **env)
    assert restarted.stop() == 0
    delivered = [row for row in rows(logs) if row["kind"] == "delivery"]
    assert sorted(row["event_id"] for row in delivered) == [0, 1, 2, 3, 4]
    assert spool_files(logs) == []


# -- the command line ------------------------------------------------------------------


def eventq_logs(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_eventq("logs", *args, **env)


def test_logs_compact_compacts_every_shards_closed_files(tmp_path):
    hour = int(BEFORE_HOUR // 3600)
    write_closed(tmp_path, "a", [record(shard="a"), record(shard="a")], hour)
    write_closed(tmp_path, "b", [record(shard="b", when=AFTER_HOUR)], hour + 1)
    open_file = Spool(tmp_path, "c")
    open_file.append(hour, encode_record(record(shard="c")))  # still being written

    result = eventq_logs("compact", "--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["files_compacted"], report["records"]) == (2, 3)
    assert sorted(Path(path).parent.name for path in report["written"]) == ["hour=10", "hour=11"]
    assert sorted(row["shard"] for row in rows(tmp_path)) == ["a", "a", "b"]
    assert spool_files(tmp_path) == [open_file.open_path]

    # EVENTQ_LOG_DIR is the default; nothing left to do.
    again = eventq_logs("compact", EVENTQ_LOG_DIR=str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files_compacted"] == 0


def test_logs_prune_keeps_the_retention(tmp_path):
    old, recent = time.gmtime(time.time() - 40 * 86400), time.gmtime(time.time() - 86400)
    for when in (old, recent):
        (tmp_path / "deliveries" / time.strftime("date=%Y-%m-%d", when)).mkdir(parents=True)
    kept = eventq_logs("prune", "--log-dir", str(tmp_path), "--keep-days", "0")
    assert json.loads(kept.stdout)["deleted"] == []
    pruned = eventq_logs("prune", EVENTQ_LOG_DIR=str(tmp_path), EVENTQ_LOG_RETENTION_DAYS="30")
    assert pruned.returncode == 0, pruned.stderr
    assert json.loads(pruned.stdout) == {
        "log_dir": str(tmp_path),
        "keep_days": 30,
        "deleted": [time.strftime("deliveries/date=%Y-%m-%d", old)],
    }
    assert [path.name for path in (tmp_path / "deliveries").iterdir()] == [
        time.strftime("date=%Y-%m-%d", recent)
    ]


def test_logs_commands_say_when_there_is_no_log_dir(tmp_path):
    for command in ("compact", "prune"):
        missing = eventq_logs(command)
        assert missing.returncode == 2
        assert "EVENTQ_LOG_DIR" in missing.stderr
        absent = eventq_logs(command, "--log-dir", str(tmp_path / "nowhere"))
        assert absent.returncode == 1
        assert "nowhere" in absent.stderr
    bad = eventq_logs("prune", "--log-dir", str(tmp_path), "--keep-days", "-3")
    assert bad.returncode == 2
