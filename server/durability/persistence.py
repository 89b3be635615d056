"""Saving queues across restarts: atomically written, versioned snapshot files.

File names are those of Zulip's Tornado: `event_queues.json` and, after it was
read, `event_queues.json.last`; with a shard name S, `event_queues.S.json` and
`event_queues.S.last.json`. Called off the IO loop (an executor thread).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import time
from pathlib import Path
from typing import Any

import orjson

FORMAT = "eventq-queues"


class CorruptSnapshot(ValueError):
    """Raised by `load` for a file that exists but is not a readable snapshot."""


def queue_file(state_dir: Path, shard: str = "") -> Path:
    return state_dir / (f"event_queues.{shard}.json" if shard else "event_queues.json")


def last_file(state_dir: Path, shard: str = "") -> Path:
    return state_dir / (f"event_queues.{shard}.last.json" if shard else "event_queues.json.last")


def checkpoint_file(state_dir: Path, shard: str = "") -> Path:
    """Where the periodic checkpoint goes (read only after an unclean stop)."""
    return state_dir / (
        f"event_queues.{shard}.checkpoint.json" if shard else "event_queues.checkpoint.json"
    )


def save(path: Path, snapshot: dict[str, Any], server_generation: int) -> int:
    """Write the snapshot: temp file, fsync, rename, fsync of the directory, so
    that a crash leaves either the old file or the complete new one. Returns
    the number of bytes written."""
    body = orjson.dumps(
        {"format": FORMAT, "saved_at": time.time(), "server_generation": server_generation}
        | snapshot
    )
    return _write(path, body)


def save_encoded(
    path: Path, snapshot: dict[str, Any], queues: list[bytes], server_generation: int
) -> int:
    """`save` of a snapshot whose queues are already encoded, one JSON object
    each (a checkpoint encodes them a slice at a time on the loop: bytes
    give the garbage collector nothing to walk, where dicts held across
    slices made it run full collections inside them)."""
    head = orjson.dumps(
        {"format": FORMAT, "saved_at": time.time(), "server_generation": server_generation}
        | snapshot
    )
    return _write(path, b"".join([head[:-1], b',"queues":[', b",".join(queues), b"]}"]))


def release_freed_memory() -> None:
    """Give the system back the memory a loaded snapshot was read into.

    Python frees the file's decoded form once its queues are restored, but
    glibc's allocator keeps most of it (it returns only what lies at the top
    of its heap): after a file of 200 queues holding 20 events of 16 KB each
    of their own (61 MB), the process was 124 MB larger, twice what its
    queues hold. `malloc_trim` hands the free pages back (62 MB of them
    there). Nothing where the C library has no such function (glibc has)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def _write(path: Path, body: bytes) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return len(body)


def remove_stale_temporaries(paths: list[Path]) -> list[Path]:
    """Remove the temporary files that a writer of these snapshots left when
    it was killed mid-write (SIGKILL, power loss: `_write` names them after
    its pid); a live process's are kept. Returns what was removed."""
    removed = []
    for path in paths:
        for tmp in path.parent.glob(f".{path.name}.*.tmp"):
            pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
            if pid.isdigit() and not _alive(int(pid)):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def load(path: Path) -> dict[str, Any] | None:
    """The snapshot in `path`, None if there is no file, or `CorruptSnapshot`."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CorruptSnapshot(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CorruptSnapshot(f"{path} is not an eventq queue snapshot")
    return data


def keep_copy(path: Path) -> Path:
    """Copy a snapshot that was only partly readable, for inspection."""
    target = path.with_name(f"{path.name}.partial-{time.strftime('%Y%m%dT%H%M%S')}")
    shutil.copy2(path, target)
    return target


def quarantine(path: Path) -> Path:
    """Move an unreadable snapshot aside, kept for inspection, so that the next
    start does not read it again. Returns where it went."""
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    os.replace(path, target)
    return target
