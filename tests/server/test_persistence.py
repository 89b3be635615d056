"""Saved-queue file names (Zulip's, one process or several) and atomic writes."""

from __future__ import annotations

import os
import subprocess

import pytest

from server.durability import persistence


def test_file_names_follow_zulips_with_and_without_a_shard(tmp_path):
    assert persistence.queue_file(tmp_path) == tmp_path / "event_queues.json"
    assert persistence.last_file(tmp_path) == tmp_path / "event_queues.json.last"
    assert persistence.queue_file(tmp_path, "9800") == tmp_path / "event_queues.9800.json"
    assert persistence.last_file(tmp_path, "9800") == tmp_path / "event_queues.9800.last.json"


def test_save_then_load_round_trips_and_leaves_no_temp_file(tmp_path):
    path = persistence.queue_file(tmp_path)
    persistence.save(path, {"version": 1, "queues": []}, server_generation=7)
    loaded = persistence.load(path)
    assert loaded is not None
    assert loaded["format"] == persistence.FORMAT
    assert loaded["server_generation"] == 7
    assert loaded["queues"] == []
    assert os.listdir(tmp_path) == ["event_queues.json"]
    assert (path.stat().st_mode & 0o777) == 0o600


def test_load_tells_missing_from_corrupt(tmp_path):
    path = persistence.queue_file(tmp_path)
    assert persistence.load(path) is None
    path.write_text('{"format": "something-else"}')
    with pytest.raises(persistence.CorruptSnapshot, match="not an eventq queue snapshot"):
        persistence.load(path)
    kept = persistence.quarantine(path)
    assert not path.exists()
    assert kept.name.startswith("event_queues.json.corrupt-")


def test_a_temporary_file_left_by_a_killed_writer_is_removed_a_live_ones_kept(tmp_path):
    queues = persistence.queue_file(tmp_path, "a")
    checkpoint = persistence.checkpoint_file(tmp_path, "a")
    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f".{checkpoint.name}.{dead.pid}.tmp"  # killed mid-write
    live = tmp_path / f".{queues.name}.{os.getppid()}.tmp"  # being written
    other_shard = tmp_path / f".{persistence.checkpoint_file(tmp_path, 'b').name}.{dead.pid}.tmp"
    for path in (left, live, other_shard):
        path.write_bytes(b'{"format": "eventq-qu')
    assert persistence.remove_stale_temporaries([queues, checkpoint]) == [left]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other_shard.name])
