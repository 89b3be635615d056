"""Saved-queue file names and atomic writes (reference 4, scenario 10)."""

from __future__ import annotations

import os

import pytest

from server import persistence


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
