"""The learning benchmark: curve arithmetic, and a real (tiny) run trained, continued
and evaluated through ``python main.py bench --only learning``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.bench.command import _without_only_learning
from pipeline.bench.learning import parse, wall_and_ratio
from pipeline.bench.learning_curves import EVAL_CACHE, MarkResult, area_under_curve, first_frames, x_pos_at
from pipeline.common.errors import UserError

ROOT = Path(__file__).resolve().parents[3]


def mark(frames: int, x: float, flag: float = 0.0) -> MarkResult:
    return MarkResult(
        frames=frames, run_frames=frames + 7, mean_x_pos=x, max_x_pos=int(x), flag_rate=flag, mean_return=0
    )


def test_frames_to_goals_and_area() -> None:
    curve = [mark(100, 400), mark(200, 1900), mark(300, 1500), mark(400, 3161, flag=1.0)]
    assert first_frames(curve, x_pos=1800) == 200  # the first time, not the last
    assert first_frames(curve, flag=True) == 400
    assert first_frames(curve[:3], flag=True) is None
    # Trapezoids: (1150 + 1700 + 2330.5) * 100 / 300.
    assert area_under_curve(curve) == pytest.approx((1150 + 1700 + 2330.5) / 3)
    assert area_under_curve(curve[:1]) is None
    assert x_pos_at(curve, 300) == 1500 and x_pos_at(curve, 350) is None


def test_only_learning_is_routed_and_training_flags_pass_through() -> None:
    assert _without_only_learning(["--only", "learning", "--frames", "9"]) == ["--frames", "9"]
    assert _without_only_learning(["--only=learning"]) == []
    assert _without_only_learning(["--only", "training"]) is None
    assert _without_only_learning(["--only", "raw", "--", "--only", "learning"]) is None
    args, train_args = parse(["--seeds", "3,4", "--", "--preset", "tiny", "--set", "gamma=0.9"])
    assert args.seed_list == [3, 4] and train_args == ["--preset", "tiny", "--set", "gamma=0.9"]
    with pytest.raises(UserError, match="--seed after --"):
        parse(["--", "--seed", "1"])
    with pytest.raises(UserError, match="comma-separated integers"):
        parse(["--seeds", "a,b"])
    with pytest.raises(UserError, match="--epsilon 2.0: must be in"):
        parse(["--epsilon", "2"])


def test_wall_time_adds_up_across_resumed_processes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"config": {"learning_starts": 100, "replay_ratio": 2.0}}))
    rows = ["time_s,frames,samples,records", "5,10,0,10", "60,500,600,400", "4,520,640,420", "30,900,1600,900"]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    figures = wall_and_ratio(tmp_path)
    assert figures["wall_s"] == 90  # 60 s, then a resumed process's 30 s
    assert figures["frames_per_s"] == pytest.approx(10)
    assert figures["replay_ratio"] == pytest.approx(2.0) and figures["replay_ratio_held"] == pytest.approx(1.0)


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
