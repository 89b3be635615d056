"""The delivery log on disk: its format, and the files of every shard.

Format version 1. Its columns, in order, with their Parquet types and the
kinds of record that fill them, are `COLUMNS` below: the one statement of the
format on the server's side (the analytics jobs hold their own copy; a
contract test checks that both agree). Every record has every column, null
where its kind does not fill it. Files, all partitioned by the UTC date and
hour of the records' `time`:

    <log_dir>/spool/date=YYYY-MM-DD/hour=HH/.<shard>-<pid>-<seq>.rows   being appended
    <log_dir>/spool/date=YYYY-MM-DD/hour=HH/<shard>-<pid>-<seq>.rows    closed, to compact
    <log_dir>/deliveries/date=YYYY-MM-DD/hour=HH/<shard>-<digest>.parquet  what the jobs read

A spool file holds one record per line: its values in column order, each as
JSON, separated by commas (a JSON array without its brackets). Written by one
orjson call per batch, read by Arrow's CSV reader (backslash escapes, `null`
unquoted) off the GIL: a JSON object per record cost nine times as much to
write, holding the GIL the IO loop needs. Files of the earlier format (a JSON
object per line, `.jsonl`) left by an earlier version are still recovered and
compacted.

Guarantees:
- A file is visible (its name does not start with "." and Spark reads it)
  only when complete: a spool file once closed (`Spool.roll`), a
  Parquet file once written and fsynced (`compact`); a date partition is
  hidden before it is deleted (`prune`).
- Appends are fsynced; a torn last line (a crash, a full disk) is dropped
  when the file is recovered or compacted.
- Compaction is idempotent: interrupted anywhere and run again, it leaves no
  duplicate row.

Everything here does blocking IO: call it off the IO loop (the delivery
log's writer thread, the command line).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import io
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from queues.client import QueueOptions

log = logging.getLogger("eventq.deliverylog")

FORMAT_VERSION = 1

# The format: (column, Parquet type). The comment says which kinds fill it.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("v", "int32"),  # all: the format version, FORMAT_VERSION
    ("kind", "string"),  # all: delivery poll register end dead_letter notification
    ("time", "float64"),  # all: wall seconds (UTC epoch) when it happened
    ("shard", "string"),  # all: EVENTQ_SHARD
    ("realm_id", "int64"),  # delivery poll register end notification dead_letter
    ("user_id", "int64"),  # delivery poll register end notification (who is notified)
    ("queue_id", "string"),  # delivery poll register end (poll: null if the GET named none)
    ("client", "string"),  # delivery poll register end: the queue's client name
    ("event_id", "int64"),  # delivery: the event's id in its queue; notification: message id
    ("event_type", "string"),  # delivery (heartbeats are poll outcomes, not deliveries)
    ("enqueued_at", "float64"),  # delivery: wall s the server took the notice; null if unknown
    ("published_at", "float64"),  # delivery: the producer's stamp; null if it gave none
    ("response_bytes", "int64"),  # delivery poll: body size of the response
    ("batch_events", "int32"),  # delivery poll: events in that response (heartbeat: 0)
    ("queue_depth", "int32"),  # delivery poll end: events held in the queue then
    ("outcome", "string"),  # poll: events heartbeat displaced empty deleted error;
    # notification: its kinds, "email", "push" or "email,push"
    ("code", "string"),  # poll (outcome "error"): the Zulip error code
    ("waited_secs", "float64"),  # poll: how long the GET was parked
    ("reason", "string"),  # end: expired deleted overflow evicted deactivated role_changed;
    # notification: the path that found the user away, "delivery" or "gc"
    ("lifetime_secs", "float64"),  # end: the queue's age
    ("latency_secs", "float64"),  # register: time to build the response
    ("options", "string"),  # register: the queue options as compact JSON
    ("notice_id", "string"),  # dead_letter: x-eventq-notice-id, may be null
    ("failures", "int32"),  # dead_letter: tries made
    ("error", "string"),  # dead_letter: why it failed
)
NAMES: tuple[str, ...] = tuple(name for name, _ in COLUMNS)

# A record: one value per column of COLUMNS, in that order. A register
# record holds the QueueOptions object itself; the writer encodes it.
Record = tuple[Any, ...]

# A file is closed (and becomes compactable) at the hour boundary, every
# `roll_secs` and at MAX_FILE_BYTES. By default only at the hour or the size:
# the jobs see an hour once it is over, and an hour is one Parquet file per
# shard up to 300,000-400,000 records (64 MiB of spool). Spark pays a fixed
# cost per file it opens (a Hadoop configuration copied for each): a day of
# 1 million records as 288 files of 10 minutes took its five plain queries
# 1.4 s warm, as 48 hourly files 0.78-0.83 s (DuckDB 0.29 s and 0.12-0.13 s),
# and the operator's run over 10 million 36.6 s instead of 34.1 s
# (docs/delivery-log.md). A shorter roll gives fresher data in more files.
ROLL_SECS = 3600.0
# So that a compaction reads files of a bounded size (of the spool's lines:
# 170-210 bytes a record, 300,000-400,000 records).
MAX_FILE_BYTES = 64 * 1024 * 1024
# Parquet key-value metadata naming the spool files a Parquet file was
# built from: a compaction interrupted after the rename finds them there.
INPUTS_KEY = b"eventq.inputs"


def schema() -> pa.Schema:
    """The Arrow schema of COLUMNS."""
    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in COLUMNS])


def _hour_dir(root: Path, hour: int) -> Path:
    """`root/date=YYYY-MM-DD/hour=HH` for an hour counted from the epoch."""
    stamp = time.gmtime(hour * 3600)
    return root / time.strftime("date=%Y-%m-%d", stamp) / f"hour={stamp.tm_hour:02d}"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _encode_default(value: object) -> str:
    """orjson's fallback: a register record's options become a JSON string."""
    if isinstance(value, QueueOptions):
        return orjson.dumps(value.to_dict()).decode()
    raise TypeError(f"cannot encode {type(value).__name__} in a delivery-log record")


# Where one record ends and the next begins in orjson's array of records:
# `],[` before the format version and the opening quote of the kind. Inside a
# JSON string a quote is always escaped, and after a string's closing quote
# comes a comma or a bracket, never a letter: only a record starts there.
_NEXT_RECORD = re.compile(rb'\],\[(?=%d,"[a-z])' % FORMAT_VERSION)
# A spool file of the earlier format: a JSON object per line.
OBJECTS_SUFFIX = ".jsonl"
SPOOL_SUFFIX = ".rows"
_SUFFIXES = (SPOOL_SUFFIX, OBJECTS_SUFFIX)


def encode_records(records: Sequence[Record]) -> bytes:
    """The spool lines (each ending with a newline) of `records`. Raises
    TypeError (orjson.JSONEncodeError) for a value no column can hold.

    One orjson call for all (a call costs several microseconds, ten times
    what a record costs inside a list), then the array cut into lines."""
    if not records:
        return b""
    body = orjson.dumps(
        records if isinstance(records, list | tuple) else list(records),
        default=_encode_default,
        option=orjson.OPT_PASSTHROUGH_DATACLASS,
    )
    return _NEXT_RECORD.sub(b"\n", body[2:-2]) + b"\n"


def encode_record(record: Record) -> bytes:
    """One spool line (newline included) for a record."""
    return encode_records((record,))


def decode_line(line: bytes) -> Any:
    """The values of one spool line (raises orjson.JSONDecodeError)."""
    return orjson.loads(b"[" + line + b"]")


def _complete_lines(data: bytes) -> bytes:
    """`data` up to its last newline: a torn last line (crash, full disk) is dropped."""
    return data[: data.rfind(b"\n") + 1]


def _split_name(name: str) -> tuple[str, int] | None:
    """(shard, pid) of a spool file name `[.]<shard>-<pid>-<seq>.rows` (or of
    the earlier format's `.jsonl`), or None."""
    suffix = next((each for each in _SUFFIXES if name.endswith(each)), None)
    if suffix is None:
        return None
    parts = name.removeprefix(".").removesuffix(suffix).rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class _OpenFile:
    """The spool file being appended (dot name) and how far it is good."""

    __slots__ = ("fd", "hour", "opened_at", "path", "size")

    def __init__(self, path: Path, fd: int, hour: int, opened_at: float):
        self.path = path
        self.fd = fd
        self.hour = hour
        self.opened_at = opened_at
        # Bytes known written and fsynced: everything up to here is whole
        # lines, and a failed append is cut back to it.
        self.size = 0


class Spool:
    """The spool files of one shard in `<log_dir>/spool`. Used by one
    thread at a time (the writer thread, or the command line)."""

    def __init__(
        self,
        log_dir: Path,
        shard: str,
        *,
        write: Callable[[int, bytes], int] = os.write,
        roll_secs: float = ROLL_SECS,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.root = log_dir / "spool"
        self.shard = shard
        self._write = write
        self.roll_secs = roll_secs
        self.max_file_bytes = max_file_bytes
        self._file: _OpenFile | None = None
        # Files closed (renamed visible) so far.
        self.closed_files = 0
        # File sequence: milliseconds at start, then one more per file, so a
        # process that gets a previous run's pid (pid 1 in a container)
        # never reuses a name.
        self._seq = int(time.time() * 1000)

    @property
    def open_path(self) -> Path | None:
        return None if self._file is None else self._file.path

    def append(self, hour: int, data: bytes) -> None:
        """Append whole lines to the file of `hour` and fsync. Raises OSError;
        the file then holds only the lines of earlier appends."""
        if self._file is not None and (
            self._file.hour != hour or self._file.size + len(data) > self.max_file_bytes
        ):
            self.roll()
        if self._file is None:
            self._file = self._open(hour)
        current = self._file
        try:
            rest = data
            while rest:  # a short write (a signal, a nearly full disk) copies the rest
                rest = rest[self._write(current.fd, rest) :]
            os.fsync(current.fd)
        except OSError:
            try:
                os.ftruncate(current.fd, current.size)
            except OSError:
                # Cannot cut the torn batch off: close the file as it is
                # (compaction drops a torn last line) and start a new one.
                self.roll()
            raise
        current.size += len(data)

    def _open(self, hour: int) -> _OpenFile:
        directory = _hour_dir(self.root, hour)
        directory.mkdir(parents=True, exist_ok=True)
        while True:
            name = f"{self.shard}-{os.getpid()}-{self._seq}{SPOOL_SUFFIX}"
            self._seq += 1
            path = directory / f".{name}"
            if not path.exists() and not (directory / name).exists():
                break
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            _fsync_dir(directory)  # the file must survive a crash, not only its data
        except OSError:
            os.close(fd)
            raise
        return _OpenFile(path, fd, hour, time.monotonic())

    def due(self, now_wall: float) -> bool:
        """Whether the open file should be closed now: its hour is over, or it
        has been open `roll_secs`."""
        current = self._file
        return current is not None and (
            current.hour != int(now_wall // 3600)
            or time.monotonic() - current.opened_at >= self.roll_secs
        )

    def roll(self) -> Path | None:
        """Close the open file and rename it to its visible name; returns that
        name (None if no file was open). Raises OSError: the file then stays
        hidden, and the next start recovers it."""
        current, self._file = self._file, None
        if current is None:
            return None
        os.close(current.fd)
        if current.size == 0:
            current.path.unlink()
            return None
        closed = current.path.with_name(current.path.name[1:])
        os.replace(current.path, closed)
        self.closed_files += 1
        _fsync_dir(closed.parent)
        return closed

    def recover(self) -> list[Path]:
        """Close this shard's files left open by a process that died: drop a
        torn last line, rename. Files of a live process are left alone."""
        recovered = []
        for path in sorted(self.root.glob(f"date=*/hour=*/.{self.shard}-*")):
            parsed = _split_name(path.name)
            if parsed is None or parsed[0] != self.shard:
                continue
            if parsed[1] != os.getpid() and _alive(parsed[1]):
                continue
            with path.open("r+b") as handle:
                data = handle.read()
                good = len(_complete_lines(data))
                if good != len(data):
                    handle.truncate(good)
                handle.flush()
                os.fsync(handle.fileno())
            closed = path.with_name(path.name[1:])
            os.replace(path, closed)
            _fsync_dir(path.parent)
            recovered.append(closed)
        return recovered


@contextlib.contextmanager
def _compaction_lock(log_dir: Path, wait: bool) -> Iterator[bool]:
    """One compaction at a time per log directory (several shards, or the
    command line beside a server). Yields whether the lock was taken."""
    spool = log_dir / "spool"
    spool.mkdir(parents=True, exist_ok=True)
    fd = os.open(spool / ".compact.lock", os.O_RDWR | os.O_CREAT, 0o640)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _read_spool_file(path: Path) -> tuple[pa.Table, int]:
    """The records of a closed spool file as a table, and how many lines
    were unreadable (skipped). A torn last line is dropped silently."""
    data = _complete_lines(path.read_bytes())
    if not data:
        return schema().empty_table(), 0
    if path.name.endswith(OBJECTS_SUFFIX):
        return _read_objects(data)
    return _read_rows(data)


# Arrow's CSV reader takes a spool line's JSON values, strings quoted with
# `\"` and `\\` escaped, `null` unquoted; `_JSON_ESCAPE` finds the other
# escapes of JSON (control characters), which it does not know.
_JSON_ESCAPE = re.compile(rb'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_OTHER_ESCAPE = re.compile(rb'\\[^"\\]')
_UNESCAPED = {b'"': b'\\"', b"\\": b"\\\\", b"/": b"/", b"b": b"\b", b"f": b"\f"}
_UNESCAPED |= {b"n": b"\n", b"r": b"\r", b"t": b"\t"}


def _unescape(match: re.Match[bytes]) -> bytes:
    escape = match[1]
    if len(escape) == 1:
        return _UNESCAPED[escape]
    char = chr(int(escape[1:], 16)).encode("utf-8", "surrogatepass")
    return b"\\" + char if char in (b'"', b"\\") else char


def _read_rows(data: bytes) -> tuple[pa.Table, int]:
    """Arrow's CSV reader takes what it is given: a line damaged on disk can
    come out as other values rather than refused (the JSON reader of the
    earlier format refused more). Lines are only ever torn at the end, which
    is cut off before this."""
    arrow_schema = schema()
    readable = data
    newlines_in_values = False
    if _OTHER_ESCAPE.search(data):
        # A string holds a control character (rare): written raw inside its
        # quotes, where the reader takes it as it is.
        readable = _JSON_ESCAPE.sub(_unescape, data)
        newlines_in_values = True
    try:
        table = pa_csv.read_csv(
            io.BytesIO(readable),
            read_options=pa_csv.ReadOptions(column_names=list(NAMES)),
            parse_options=pa_csv.ParseOptions(
                escape_char="\\", double_quote=False, newlines_in_values=newlines_in_values
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types=arrow_schema,
                null_values=["null"],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        return table.cast(arrow_schema), 0
    except pa.ArrowInvalid:
        pass
    return _line_by_line(data, _row_of_values)


def _row_of_values(line: bytes) -> dict[str, Any] | None:
    values = decode_line(line)
    return dict(zip(NAMES, values, strict=True)) if len(values) == len(NAMES) else None


def _row_of_object(line: bytes) -> dict[str, Any] | None:
    row = orjson.loads(line)
    return row if isinstance(row, dict) and set(row) == set(NAMES) else None


def _line_by_line(
    data: bytes, row_of: Callable[[bytes], dict[str, Any] | None]
) -> tuple[pa.Table, int]:
    """The slow path, only for a file with a damaged line: each line read on
    its own (`row_of`: its row, or None), the unreadable ones counted."""
    rows: list[dict[str, Any]] = []
    bad = 0
    for line in data.splitlines():
        try:
            row = row_of(line)
        except orjson.JSONDecodeError:
            row = None
        if row is None:
            bad += 1
        else:
            rows.append(row)
    return _table_of(rows, bad)


def _read_objects(data: bytes) -> tuple[pa.Table, int]:
    """A file of the earlier format: a JSON object per line."""
    arrow_schema = schema()
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            parse_options=pa_json.ParseOptions(
                explicit_schema=arrow_schema, unexpected_field_behavior="error"
            ),
        )
        return table.select(list(NAMES)), 0
    except pa.ArrowInvalid:
        pass
    return _line_by_line(data, _row_of_object)


def _table_of(rows: list[dict[str, Any]], bad: int) -> tuple[pa.Table, int]:
    try:
        return pa.Table.from_pylist(rows, schema=schema()), bad
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return schema().empty_table(), len(rows) + bad


def _compacted_inputs(directory: Path, shard: str) -> dict[str, Path]:
    """Input file name -> the Parquet file of `shard` in `directory` built from it."""
    found: dict[str, Path] = {}
    for parquet in directory.glob(f"{shard}-*.parquet"):
        try:
            metadata = pq.read_schema(parquet).metadata or {}
        except (OSError, pa.ArrowInvalid):
            continue
        for name in orjson.loads(metadata.get(INPUTS_KEY, b"[]")):
            found[name] = parquet
    return found


class Compaction:
    """What one `compact` call did."""

    def __init__(self) -> None:
        self.written: list[Path] = []  # Parquet files written
        self.inputs = 0  # spool files compacted and deleted
        self.records = 0  # records written to Parquet
        self.skipped_lines = 0  # unreadable lines left out


def compact(log_dir: Path, shard: str | None = None) -> Compaction:
    """Turn the closed spool files of `shard` (of every shard if None)
    into Parquet, one file per shard and hour, then delete them; waits for a
    compaction in progress (another shard, the command line). Idempotent: a
    run interrupted anywhere leaves no duplicate and no half-visible file.
    Raises OSError; whatever is not compacted yet stays for the next run."""
    result = try_compact(log_dir, shard, wait=True)
    assert result is not None  # it waited for the lock
    return result


def try_compact(log_dir: Path, shard: str | None, *, wait: bool) -> Compaction | None:
    """`compact`, or None at once if another compaction holds the lock and
    `wait` is False."""
    result = Compaction()
    spool = log_dir / "spool"
    with _compaction_lock(log_dir, wait) as locked:
        if not locked:
            return None
        groups: dict[tuple[Path, str], list[Path]] = {}
        for path in sorted(spool.glob("date=*/hour=*/*")):
            parsed = _split_name(path.name)
            if path.name.startswith(".") or parsed is None:
                continue
            if shard is None or parsed[0] == shard:
                groups.setdefault((path.parent, parsed[0]), []).append(path)
        for (directory, owner), inputs in groups.items():
            target = log_dir / "deliveries" / directory.relative_to(spool)
            _compact_group(target, owner, inputs, result)
    return result


def _compact_group(target: Path, shard: str, inputs: list[Path], result: Compaction) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob(f".{shard}-*.parquet.tmp"):  # a compaction that died
        stale.unlink(missing_ok=True)
    done = _compacted_inputs(target, shard)
    pending = []
    for path in inputs:
        if path.name in done:
            path.unlink(missing_ok=True)  # compacted; the run died before deleting it
            result.inputs += 1
        else:
            pending.append(path)
    if not pending:
        return
    names = sorted(path.name for path in pending)
    tables = []
    for path in pending:
        table, bad = _read_spool_file(path)
        tables.append(table)
        result.skipped_lines += bad
        if bad:
            log.warning("%s: %d unreadable lines left out of the compaction", path, bad)
    table = pa.concat_tables(tables)
    if table.num_rows:
        digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
        final = target / f"{shard}-{digest}.parquet"
        tmp = target / f".{final.name}.tmp"
        table = table.replace_schema_metadata({INPUTS_KEY: orjson.dumps(names)})
        try:
            pq.write_table(table, tmp, compression="zstd")
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(target)
        result.written.append(final)
        result.records += table.num_rows
    for path in pending:
        path.unlink(missing_ok=True)
        result.inputs += 1


def prune(log_dir: Path, keep_days: int, now: float | None = None) -> list[Path]:
    """Delete the date partitions of spool/ and deliveries/ older than
    `keep_days` days (UTC; 0 keeps everything); returns what was deleted.
    A partition is renamed to a hidden name first, so readers never see a
    partly deleted day."""
    if keep_days <= 0:
        return []
    today = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC)
    cutoff = f"date={(today.date() - datetime.timedelta(days=keep_days)).isoformat()}"
    deleted = []
    for area in (log_dir / "spool", log_dir / "deliveries"):
        if not area.is_dir():
            continue
        for stale in area.glob(".date=*.deleting"):  # a prune that died
            shutil.rmtree(stale, ignore_errors=True)
        for partition in sorted(area.glob("date=*")):
            if partition.name >= cutoff:  # ISO dates sort as strings
                continue
            hidden = partition.with_name(f".{partition.name}.deleting")
            try:
                os.replace(partition, hidden)
            except FileNotFoundError:
                continue  # another shard pruned it
            shutil.rmtree(hidden, ignore_errors=True)
            deleted.append(partition)
    return deleted
