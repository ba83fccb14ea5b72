"""Tests for pipeline.bench.learning_runs: what a training run's metrics.csv says of it
(the whole run's tests, training, resuming and stopping, are test_learning.py's and
test_learning_stop.py's: they drive the bench as a user does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.bench.learning_runs import run_frames, wall_and_ratio


def test_wall_time_adds_up_across_resumed_processes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"config": {"learning_starts": 100, "replay_ratio": 2.0}}))
    rows = ["time_s,frames,samples,records", "5,10,0,10", "60,500,600,400", "4,520,640,420", "30,900,1600,900"]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    figures = wall_and_ratio(tmp_path)
    assert figures["wall_s"] == 90  # 60 s, then a resumed process's 30 s
    assert figures["frames_per_s"] == pytest.approx(10)
    assert figures["replay_ratio"] == pytest.approx(2.0) and figures["replay_ratio_held"] == pytest.approx(1.0)
    assert figures["replayed_frames"] == 0.0  # metrics from before frontier starts have no such column
    rows = [rows[0] + ",replayed_frames", "5,10,0,10,0", "60,500,600,400,1200"]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    assert wall_and_ratio(tmp_path)["replayed_frames"] == 1200.0


def test_run_frames_are_the_newest_checkpoints(tmp_path: Path) -> None:
    assert run_frames(tmp_path) == 0  # no checkpoint yet: the bench starts the run
    (tmp_path / "checkpoints").mkdir()
    for frames in (2_000, 150_000, 40_000):
        (tmp_path / "checkpoints" / f"ckpt-{frames}.pt").write_bytes(b"")
    assert run_frames(tmp_path) == 150_000
