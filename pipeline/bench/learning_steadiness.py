"""The learning benchmark's steadiness figures of a run, at its marks.

x_pos swings between neighbouring marks by more than most changes to the learner move it,
so the benchmark sets beside it figures that move far less (one seed can screen an idea):

- from the run's ``metrics.csv``, the steadiness probe's last figures at or before each
  mark (:mod:`pipeline.learning.steadiness`): train/eval greedy agreement (against one
  batching and against the mean of several), churn per publish, ``|Q_eval - Q_train|``,
  the median action gap and train mode's agreement with itself;
- from the mark's evaluation, the values against the returns that followed them
  (:class:`~pipeline.bench.learning_curves.MarkResult`'s ``q_over_return``);
- from the curve, the median swing of the mean x_pos between consecutive marks from 1M
  frames on: how much the evaluated policy moves once it should have settled;
- from ``metrics.csv`` again, the mean x_pos of the training episodes just before each
  mark (the collectors' last 100, at the same epsilon late in a run): a mark far below
  them is not the network the collectors played (marks saved with statistics older than
  their weights were; docs/learning-history.md).

Runs made before the probe existed have no such columns: their figures are None.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from pipeline.bench.learning_curves import MarkResult
from pipeline.common.gauges import STEADINESS_FIGURES, steadiness_gauge

__all__ = ["STEADINESS_FIELDS", "SWING_FROM_FRAMES", "TRAINING_X_POS", "median_swing", "steadiness_at_marks"]

# metrics.csv column -> the figure's name in the benchmark.
STEADINESS_FIELDS: Mapping[str, str] = {steadiness_gauge(name): name for name in STEADINESS_FIGURES}
SWING_FROM_FRAMES = 1_000_000
# The figure of the training episodes' mean x_pos (metrics.csv ``episode_x_pos``).
TRAINING_X_POS = "training_x_pos"


def _number(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else math.nan
    except ValueError:
        return None
    return None if math.isnan(value) else value


def steadiness_at_marks(run: Path, curve: Sequence[MarkResult]) -> dict[int, dict[str, float | None]]:
    """For each mark (by its nominal frames) the probe's last figures measured at or before
    the frames the run had when the mark was kept, and the training episodes' mean x_pos
    (:data:`TRAINING_X_POS`) of the last row before it; None where there were none."""
    measured: list[tuple[float, dict[str, float | None]]] = []  # (frames, figures), in file order
    trained: list[tuple[float, float]] = []  # (frames, training episodes' mean x_pos)
    path = run / "metrics.csv"
    if path.exists():
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                figures = {name: _number(row.get(column)) for column, name in STEADINESS_FIELDS.items()}
                frames = _number(row.get("frames"))
                x_pos = _number(row.get("episode_x_pos"))
                if frames is not None and figures["agreement"] is not None:
                    measured.append((frames, figures))
                if frames is not None and x_pos is not None:
                    trained.append((frames, x_pos))
    empty: dict[str, float | None] = dict.fromkeys(STEADINESS_FIELDS.values())
    result = {}
    for mark in curve:
        before = [figures for frames, figures in measured if frames <= mark.run_frames]
        x_before = [x_pos for frames, x_pos in trained if frames <= mark.run_frames]
        result[mark.frames] = {**(before[-1] if before else empty), TRAINING_X_POS: x_before[-1] if x_before else None}
    return result


def median_swing(curve: Sequence[MarkResult], from_frames: int = SWING_FROM_FRAMES) -> float | None:
    """The median |change| of the mean x_pos between consecutive marks at or past
    ``from_frames`` (None with fewer than two such marks)."""
    values = [mark.mean_x_pos for mark in curve if mark.frames >= from_frames]
    swings = [abs(b - a) for a, b in zip(values, values[1:])]
    return statistics.median(swings) if swings else None
