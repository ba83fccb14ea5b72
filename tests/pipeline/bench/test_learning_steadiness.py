"""Tests for pipeline.bench.learning_steadiness: the probe's figures at each mark from
metrics.csv, the swing between marks, and both in a run's figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.bench.learning_curves import MarkResult
from pipeline.bench.learning_figures import run_figures
from pipeline.bench.learning_steadiness import TRAINING_X_POS, median_swing, steadiness_at_marks


def mark(frames: int, run_frames: int, mean_x_pos: float, q_over_return: float | None = None) -> MarkResult:
    return MarkResult(
        frames=frames,
        run_frames=run_frames,
        mean_x_pos=mean_x_pos,
        max_x_pos=0,
        flag_rate=0.0,
        mean_return=0.0,
        q_over_return=q_over_return,
    )


def write_metrics(run: Path, rows: list[tuple[int, str, str]]) -> None:
    """(frames, agreement, churn) rows; the other figures follow from them."""
    run.mkdir(parents=True)
    columns = "steady_agreement,steady_churn,steady_q_offset,steady_action_gap"
    lines = [f"time_s,frames,{columns},steady_expected_agreement,steady_train_agreement"]
    lines += [f"{i},{frames},{agree},{churn},0.5,0.25,0.97,0.93" for i, (frames, agree, churn) in enumerate(rows)]
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def test_each_mark_gets_the_last_figures_measured_before_it(tmp_path: Path) -> None:
    run = tmp_path / "r"
    write_metrics(run, [(100, "nan", "nan"), (400_000, "0.9", "nan"), (700_000, "0.96", "0.3"), (1_200_000, "0.7", "")])
    curve = [mark(500_000, 500_010, 0), mark(1_000_000, 1_000_020, 0), mark(100_000, 100_005, 0)]
    found = steadiness_at_marks(run, curve)
    no_training = {TRAINING_X_POS: None}  # these rows have no episode_x_pos column
    fixed = {"q_offset": 0.5, "action_gap": 0.25, "expected_agreement": 0.97, "train_agreement": 0.93}
    assert found[500_000] == {"agreement": 0.9, "churn": None, **fixed, **no_training}
    assert found[1_000_000] == {"agreement": 0.96, "churn": 0.3, **fixed, **no_training}
    assert found[100_000] == dict.fromkeys(("agreement", "churn", *fixed, TRAINING_X_POS))


def test_each_mark_gets_the_training_episodes_x_pos_of_the_last_row_before_it(tmp_path: Path) -> None:
    """Every row with a training x_pos counts, probe or not, and only rows at or before the
    frames the run had when the mark was kept."""
    run = tmp_path / "r"
    run.mkdir()
    rows = ["time_s,frames,episode_x_pos,steady_agreement", "1,90000,nan,", "2,480000,700.5,0.9", "3,499000,812,"]
    rows += ["4,500020,9999,", "5,990000,1458.2,"]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    curve = [mark(100_000, 100_003, 0), mark(500_000, 500_010, 0), mark(1_000_000, 1_000_020, 0)]
    found = steadiness_at_marks(run, curve)
    assert [found[m.frames][TRAINING_X_POS] for m in curve] == [None, 812.0, 1458.2]
    assert found[1_000_000]["agreement"] == 0.9  # the probe's last row, not the training one's
    assert found[1_000_000]["train_agreement"] is None  # a run from before that figure
    figures = run_figures(curve, {}, found)
    assert figures[f"{TRAINING_X_POS}@500000"] == 812.0 and figures[f"{TRAINING_X_POS}@2000000"] is None


def test_a_run_without_the_probe_has_no_figures(tmp_path: Path) -> None:
    run = tmp_path / "old"
    run.mkdir()
    (run / "metrics.csv").write_text("time_s,frames\n1,500000\n")
    assert steadiness_at_marks(run, [mark(500_000, 500_000, 0)])[500_000]["agreement"] is None


def test_the_median_swing_counts_consecutive_marks_from_1m_on() -> None:
    xs = {800_000: 100.0, 900_000: 2000.0, 1_000_000: 1000.0, 1_100_000: 1300.0, 1_200_000: 700.0, 1_300_000: 800.0}
    curve = [mark(f, f, x) for f, x in xs.items()]
    assert median_swing(curve) == 300.0  # swings 300, 600, 100
    assert median_swing(curve[:3]) is None


def test_run_figures_carry_the_steadiness_at_the_report_marks() -> None:
    curve = [mark(500_000, 500_000, 10, 1.5), mark(1_000_000, 1_000_000, 30, 2.0), mark(1_100_000, 1_100_000, 50)]
    steadiness = {1_000_000: {"agreement": 0.97, "churn": 0.2, "q_offset": 0.1, "action_gap": 0.3}}
    figures = run_figures(curve, {}, steadiness)
    assert figures["agreement@1000000"] == 0.97 and figures["churn@1000000"] == 0.2
    assert figures["q_over_return@500000"] == 1.5 and figures["q_over_return@1000000"] == 2.0
    assert figures["agreement@500000"] is None and figures["q_over_return@2000000"] is None
    assert figures["median_swing"] == pytest.approx(20.0)
