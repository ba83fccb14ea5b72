"""``main.py plot``: PNG figures from a metrics.csv made here, with gaps, NaNs and
missing columns; a missing or empty CSV is one clear error."""

from __future__ import annotations

import csv
import math

import pytest

from pipeline.commands.plots import FIGURES, plot_command, read_metrics, series
from pipeline.common.errors import UserError

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLUMNS = [
    "time_s",
    "frames",
    "frames_per_s",
    "updates_per_s",
    "episode_return",
    "episode_x_pos",
    "flag_rate",
    "loss",
    "mean_q",
    "epsilon",
]


def write_csv(path, columns, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def rows(count):
    out = []
    for i in range(count):
        started = i >= 3  # no episodes / updates yet in the first rows: NaN and blanks
        out.append(
            [
                5.0 * i,
                4000 * i,
                800 + i,
                20 + i if started else "nan",
                10.0 * i if started else "nan",
                40 + 5 * i if started else "",
                0.1 if started else "",
                1.0 / (i + 1) if started else "nan",
                0.5 * i if started else "",
                1.0 - 0.01 * i,
            ]
        )
    return out


def test_plot_writes_every_figure(tmp_path, capsys):
    run = tmp_path / "runs" / "r1"
    write_csv(run / "metrics.csv", COLUMNS, rows(12))
    assert plot_command([str(run)]) == 0
    for name in FIGURES:
        path = run / "plots" / name
        assert path.read_bytes()[:8] == PNG_SIGNATURE and path.stat().st_size > 5000, name
    out = capsys.readouterr().out
    assert out.count("wrote ") == len(FIGURES) and "note:" not in out
    assert not [p for p in (run / "plots").iterdir() if p.name.startswith(".")]


def test_missing_columns_and_all_nan_columns_still_plot(tmp_path, capsys):
    run = tmp_path / "r2"
    write_csv(run / "metrics.csv", ["time_s", "episode_return", "loss"], [[1.0, "nan", ""], [2.0, "nan", "inf"]])
    out_dir = tmp_path / "figs"
    assert plot_command([str(run), "--out", str(out_dir)]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(FIGURES)
    out = capsys.readouterr().out
    assert "metrics.csv has no flag_rate column" in out and "episode_return has no values yet" in out


def test_evaluations_are_drawn_once_each_also_after_a_resume(tmp_path, capsys):
    # The monitor repeats the newest evaluation on every row; a resumed run counts from 0.
    evaluations = [0, 0, 1, 1, 1, 2, 2, 0, 0, 1, 1]
    returns = ["nan", "nan", 10, 10, 10, 30, 30, "nan", "nan", 50, 50]
    table = [
        [float(i), 1000 * i, 500, 20, 5.0, 40, 0.0, 0.1, 0.2, 0.5, n, r]
        for i, (n, r) in enumerate(zip(evaluations, returns))
    ]
    run = tmp_path / "r3"
    write_csv(run / "metrics.csv", COLUMNS + ["evaluations", "eval_return"], table)
    metrics = read_metrics(run / "metrics.csv")
    assert series(metrics, "eval_return", metrics["frames"]) == [(2000.0, 10.0), (5000.0, 30.0), (9000.0, 50.0)]
    assert len(series(metrics, "episode_return", metrics["frames"])) == len(table)  # training: every row
    assert plot_command([str(run)]) == 0
    assert "note:" not in capsys.readouterr().out


def test_an_evaluation_is_drawn_at_the_frames_of_the_weights_it_played(tmp_path):
    # A niced evaluator's result reaches the CSV rows after the weights it played were
    # published: the marker belongs at eval_frames, not at the row's frames.
    evaluations = [0, 0, 1, 1, 2, 2]
    eval_frames = ["nan", "nan", 1500, 1500, 3800, 3800]
    returns = ["nan", "nan", 10, 10, 30, 30]
    table = [
        [float(i), 1000 * i, 500, 20, 5.0, 40, 0.0, 0.1, 0.2, 0.5, n, f, r]
        for i, (n, f, r) in enumerate(zip(evaluations, eval_frames, returns))
    ]
    run = tmp_path / "late"
    write_csv(run / "metrics.csv", COLUMNS + ["evaluations", "eval_frames", "eval_return"], table)
    metrics = read_metrics(run / "metrics.csv")
    assert series(metrics, "eval_return", metrics["frames"]) == [(1500.0, 10.0), (3800.0, 30.0)]
    # Training columns and other axes keep the row's own x.
    assert series(metrics, "episode_return", metrics["frames"])[2] == (2000.0, 5.0)
    assert series(metrics, "eval_return", metrics["time_s"]) == [(2.0, 10.0), (4.0, 30.0)]
    assert plot_command([str(run)]) == 0


def test_read_metrics_turns_blanks_and_garbage_into_nan(tmp_path):
    path = tmp_path / "metrics.csv"
    write_csv(path, ["a", "b"], [["1", ""], ["x", "2.5"]])
    data = read_metrics(path)
    assert data["a"][0] == 1.0 and math.isnan(data["a"][1]) and math.isnan(data["b"][0]) and data["b"][1] == 2.5


def test_missing_csv_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="no metrics file") as info:
        plot_command([str(tmp_path)])
    assert "\n" not in str(info.value)
    assert not (tmp_path / "plots").exists()


def test_empty_csv_and_missing_run_dir_are_clear_errors(tmp_path):
    (tmp_path / "metrics.csv").write_text("time_s,frames\n")
    with pytest.raises(UserError, match="no rows yet"):
        plot_command([str(tmp_path)])
    with pytest.raises(UserError, match="does not exist"):
        plot_command([str(tmp_path / "nope")])


def test_unwritable_out_dir_is_a_clear_error(tmp_path):
    write_csv(tmp_path / "metrics.csv", COLUMNS, rows(4))
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file, not a directory"):
        plot_command([str(tmp_path), "--out", str(tmp_path / "file" / "plots")])
    with pytest.raises(UserError, match="is a file, not a directory"):
        plot_command([str(tmp_path), "--out", str(tmp_path / "file")])
    with pytest.raises(UserError, match="cannot create directory '/proc/plots'"):
        plot_command([str(tmp_path), "--out", "/proc/plots"])
