"""Tests for pipeline.bench.learning_runs: what a training run's metrics.csv says of it, and
a real (tiny) run trained, evaluated and continued through the bench as a user runs it
(stopping one is test_learning_stop.py's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.bench.learning_curves import EVAL_CACHE
from pipeline.bench.learning_runs import run_frames, wall_and_ratio
from tests.pipeline.bench.test_learning import ROOT


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


def bench(out: Path, frames: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "main.py", "bench", "--only", "learning", "--name", "tiny", "--out", str(out)]
    command += ["--frames", str(frames), "--mark-frames", "500", "--", "--preset", "tiny"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)


@pytest.mark.slow
def test_trains_evaluates_marks_and_continues_a_shorter_run(tmp_path: Path) -> None:
    first = bench(tmp_path, 1000)
    assert first.returncode == 0, first.stderr[-3000:]
    result = json.loads((tmp_path / "tiny.json").read_text())
    (seed,) = result["seeds"]
    assert [r["frames"] for r in seed["curve"]] == [500, 1000]
    assert all(r["frames"] <= r["run_frames"] < r["frames"] + 500 for r in seed["curve"])
    assert seed["wall_s"] > 0 and 0.5 < seed["replay_ratio_held"] <= 1.5
    assert (tmp_path / "learning.png").stat().st_size > 10_000
    cache = json.loads((tmp_path / "tiny-s0" / EVAL_CACHE).read_text())
    (evaluated,) = cache.values()
    assert sorted(evaluated) == ["frames-000000500.pt", "frames-000001000.pt"]

    # The same command with more frames resumes the run; the old marks are not evaluated again.
    evaluated["frames-000000500.pt"]["mean_return"] = 123.0  # a cached value survives if unread
    (tmp_path / "tiny-s0" / EVAL_CACHE).write_text(json.dumps(cache))
    second = bench(tmp_path, 2000)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "--resume" in second.stderr
    (seed,) = json.loads((tmp_path / "tiny.json").read_text())["seeds"]
    assert [r["frames"] for r in seed["curve"]] == [500, 1000, 1500, 2000]
    assert seed["curve"][0]["mean_return"] == 123.0
