"""What `--incremental` has already processed: `<out>/state.json`.

For each hour partition of the log processed into the hourly tables, the
names and sizes of its Parquet files at that time. An hour is processed
again when its file set differs (a shard's file arrived late, compaction
rewrote it), and is then replaced as a whole. Hours that have disappeared
from the log (retention) keep their results.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from analytics.errors import BadState
from analytics.extract import FileSizes

STATE_FILE = "state.json"
STATE_FORMAT = 1


def load_state(out: Path) -> dict[str, FileSizes]:
    """Partition key (`date=.../hour=HH`) -> {file name: size}; empty when no state yet."""
    path = out / STATE_FILE
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text())
        if document["format"] != STATE_FORMAT:
            raise ValueError(f"format {document['format']!r}, expected {STATE_FORMAT}")
        partitions: dict[str, FileSizes] = {
            str(key): {str(name): int(size) for name, size in files.items()}
            for key, files in document["partitions"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadState(f"{path}: unreadable state ({exc}); run without --incremental") from exc
    return partitions


def save_state(out: Path, partitions: dict[str, FileSizes]) -> None:
    """Write the state atomically (temporary file, fsync, rename)."""
    out.mkdir(parents=True, exist_ok=True)
    document = {"format": STATE_FORMAT, "partitions": dict(sorted(partitions.items()))}
    temporary = out / f".{STATE_FILE}.tmp"
    with temporary.open("w") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(out / STATE_FILE)
