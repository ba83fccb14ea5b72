"""``python main.py plot RUN_DIR [--out DIR]``: PNG figures from a run's ``metrics.csv``.

Figures (written to ``--out``, default ``RUN_DIR/plots``):

* ``returns.png``     episode return and x position (means of the last 100 episodes)
  against frames; the evaluator's figures (``eval_return`` / ``eval_x_pos``, the mean
  of its episodes, and ``eval_greedy_x_pos``, its greedy episode) are drawn too when the
  CSV has them, one marker per evaluation, at the frames of the weights it evaluated
  (``eval_frames``; CSVs without it put the marker at the row where the result arrived);
* ``flag_rate.png``   share of episodes that reached the flag, against frames;
* ``throughput.png``  frames/s and updates/s against wall time (``time_s``);
* ``learning.png``    loss and mean Q against frames.

Any column may be missing or partly empty (the monitor writes NaN or "" before the
first episode or update): missing points are skipped, and a panel without data says
so instead of failing. If ``frames`` is missing the x axis falls back to ``time_s``,
then to the row number. Uses matplotlib's Agg canvas directly (no display needed, no
global pyplot state).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.common.errors import OneLineParser, UserError
from pipeline.common.files import atomic_write
from pipeline.common.gauges import EVAL_FLAG_RATE, EVAL_FRAMES, EVAL_GREEDY_X_POS, EVAL_RETURN, EVAL_X_POS, EVALUATIONS

__all__ = ["FIGURES", "build_parser", "plot_command", "plot_run", "read_metrics", "series"]


@dataclass(frozen=True)
class Panel:
    title: str
    columns: tuple[tuple[str, str], ...]  # (column, legend label)
    ylabel: str
    x: str = "frames"  # or "time_s"


TRAINING = "training (mean of last 100 episodes)"
EVALUATION = "evaluation (mean of its episodes)"
GREEDY = "evaluation's greedy episode"
FIGURES: dict[str, tuple[Panel, ...]] = {
    "returns.png": (
        Panel("episode return", (("episode_return", TRAINING), (EVAL_RETURN, EVALUATION)), "return"),
        Panel(
            "x position at the episode's end",
            (("episode_x_pos", TRAINING), (EVAL_X_POS, EVALUATION), (EVAL_GREEDY_X_POS, GREEDY)),
            "x_pos",
        ),
    ),
    "flag_rate.png": (
        Panel("flag rate", (("flag_rate", TRAINING), (EVAL_FLAG_RATE, EVALUATION)), "share of episodes"),
    ),
    "throughput.png": (
        Panel("emulator frames per second", (("frames_per_s", "frames/s"),), "frames/s", x="time_s"),
        Panel("learner updates per second", (("updates_per_s", "updates/s"),), "updates/s", x="time_s"),
    ),
    "learning.png": (
        Panel("loss", (("loss", "loss"),), "loss"),
        Panel("mean Q", (("mean_q", "mean Q"),), "Q"),
    ),
}
# Columns that only some runs have; their absence is not worth a warning.
OPTIONAL = frozenset({EVAL_RETURN, EVAL_X_POS, EVAL_GREEDY_X_POS, EVAL_FLAG_RATE})
# The monitor repeats the latest evaluation on every row; ``evaluations`` counts them,
# so a row where it grew is the row where a new evaluation arrived.
# EVAL_FRAMES, the frames of the weights each evaluation played, is its x on a frames axis.
EVAL_COLUMNS = OPTIONAL


def _number(text: str | None) -> float:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def read_metrics(path: Path) -> dict[str, list[float]]:
    """Columns of a metrics CSV as float lists (blank or non-numeric cells become NaN)."""
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            names = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise UserError(
            f"no metrics file {str(path)!r}; pass a run directory (runs/<run>) of a run that has "
            "been monitoring (the monitor writes metrics.csv every few seconds)"
        ) from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"cannot read metrics file {str(path)!r}: {exc}; check the file") from None
    if not names or not rows:
        raise UserError(f"metrics file {str(path)!r} has no rows yet; plot again after the first monitor tick")
    return {name: [_number(row.get(name)) for row in rows] for name in names if name}


def _x_axis(metrics: dict[str, list[float]], wanted: str) -> tuple[list[float], str]:
    for name, label in ((wanted, wanted), ("frames", "frames"), ("time_s", "time (s)")):
        values = metrics.get(name)
        if values is not None and any(not math.isnan(v) for v in values):
            return values, {"frames": "emulator frames", "time_s": "time (s)"}.get(name, label)
    count = len(next(iter(metrics.values())))
    return [float(i) for i in range(count)], "row"


def _new_evaluation_rows(metrics: dict[str, list[float]]) -> list[bool] | None:
    """Per row: did a new evaluation arrive at it? None when the CSV does not say."""
    counts = metrics.get(EVALUATIONS)
    if counts is None:
        return None
    # Compared with the row before, not with the maximum: a resumed run counts from 0 again.
    keep, previous = [], 0.0
    for count in counts:
        keep.append(not math.isnan(count) and count > 0 and count != previous)
        if not math.isnan(count):
            previous = count
    return keep


def series(metrics: dict[str, list[float]], column: str, xs: list[float]) -> list[tuple[float, float]]:
    """The (x, y) points of ``column`` to draw: rows where both are numbers, and for the
    evaluator's columns only the rows where a new evaluation arrived.

    On a frames axis an evaluation is drawn at the frames of the weights it played
    (``eval_frames``), not at the row where its result arrived: the evaluator is niced
    and plays many episodes, so on a busy machine that row can be 100k frames later."""
    ys = metrics.get(column, [])
    keep = _new_evaluation_rows(metrics) if column in EVAL_COLUMNS else None
    eval_frames = metrics.get(EVAL_FRAMES)
    if keep is not None and eval_frames is not None and xs is metrics.get("frames"):
        xs = [e if not math.isnan(e) else x for x, e in zip(xs, eval_frames)]
    return [
        (x, y)
        for i, (x, y) in enumerate(zip(xs, ys))
        if not (math.isnan(x) or math.isnan(y)) and (keep is None or keep[i])
    ]


def plot_run(run_dir: Path, out_dir: Path) -> tuple[list[Path], list[str]]:
    """Write every figure of :data:`FIGURES`; return (files written, notes on missing data)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics = read_metrics(run_dir / "metrics.csv")
    written: list[Path] = []
    notes: list[str] = []
    for name, panels in FIGURES.items():
        fig = Figure(figsize=(8, 3.2 * len(panels)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
        for ax, panel in zip(axes, panels):
            xs, xlabel = _x_axis(metrics, panel.x)
            drawn = False
            for column, label in panel.columns:
                ys = metrics.get(column)
                if ys is None:
                    if column not in OPTIONAL:
                        notes.append(f"{name}: metrics.csv has no {column} column")
                    continue
                points = series(metrics, column, xs)
                if not points:
                    if column not in OPTIONAL:
                        notes.append(f"{name}: {column} has no values yet")
                    continue
                px, py = zip(*points)
                per_evaluation = column in EVAL_COLUMNS and EVALUATIONS in metrics
                marker = "o" if per_evaluation else ("." if len(points) < 3 else None)
                ax.plot(px, py, label=label, marker=marker, markersize=4)
                drawn = True
            if not drawn:
                ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes, color="gray")
            elif len(ax.get_lines()) > 1:
                ax.legend(loc="best")
            ax.set_title(panel.title)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(panel.ylabel)
            ax.grid(True, alpha=0.3)
        fig.suptitle(run_dir.name)
        path = out_dir / name
        try:
            with atomic_write(path) as handle:
                fig.savefig(handle, format="png", dpi=100)
        except OSError as exc:
            raise UserError(f"cannot write {str(path)!r}: {exc.strerror or exc}; choose a writable --out") from None
        written.append(path)
    return written, notes


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="main.py plot", description="PNG figures from a run's metrics.csv.")
    parser.add_argument("run_dir", metavar="RUN_DIR", help="run directory (runs/<run>), holding metrics.csv")
    parser.add_argument("--out", help="directory for the PNG files (default: RUN_DIR/plots)")
    return parser


def plot_command(argv: list[str]) -> int:
    """``python main.py plot RUN_DIR [--out DIR]``."""
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UserError(
            f"run directory {args.run_dir!r} does not exist; pass runs/<run> (a directory with metrics.csv)"
        )
    read_metrics(run_dir / "metrics.csv")  # a missing/empty CSV fails before anything is created
    out_dir = Path(args.out) if args.out else run_dir / "plots"
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {str(out_dir)!r} is a file, not a directory; choose a directory for the PNG files")
    from pipeline.common.files import check_output_path

    check_output_path(out_dir / next(iter(FIGURES)), (".png",), "figure")  # creates out_dir, probes it
    written, notes = plot_run(run_dir, out_dir)
    for note in notes:
        print(f"note: {note}")
    for path in written:
        print(f"wrote {path}")
    sys.stdout.flush()
    return 0
