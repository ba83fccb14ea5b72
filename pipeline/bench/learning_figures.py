"""The learning benchmark's figures: per run, over seeds (mean and spread), two variants compared.

A run (one training seed) is summed up by :data:`FIGURES`: at 0.5M, 1M and 2M frames the
protocol's mean and median x_pos and flag rate and the greedy episode's x_pos; frames to
the first flag (the first mark with a flag rate above 0) and to x_pos 1,800; the area
under the mean x_pos curve; the steadiness figures at the same marks (the probe's agreement,
churn, |Q_eval - Q_train| and action gap from metrics.csv, the mark's Q over the returns
that followed, and the median swing of the mean x_pos between consecutive marks from 1M
on: :mod:`~pipeline.bench.learning_steadiness`); and, beside them, the machine's wall
time, frames/s and the replay ratio held.

Over seeds each figure is its mean and its spread (min..max): DQN runs that differ only
in their seed end up far apart, so a figure without its spread says little.

Two variants are compared on the training seeds they share, evaluated by the same
protocol. For each figure the difference of the two means is set beside the spread
between seeds, the larger of the two variants' min..max ranges: a difference smaller
than that is what changing the seed alone does, and the comparison says so, "within the
spread between seeds (noise)". With one seed each there is no spread to judge by, and
the comparison says that instead. The area under the curve is compared over the frames
both variants' runs cover (up to the shortest run's last mark): a run to 2M frames has
marks a run to 1M never had.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.bench.learning_curves import X_POS_GOAL, MarkResult, area_under_curve, figure_at, first_frames
from pipeline.bench.learning_steadiness import STEADINESS_FIELDS, TRAINING_X_POS, median_swing
from pipeline.common.gauges import STEADINESS_LABELS

REPORT_FRAMES = (500_000, 1_000_000, 2_000_000)  # the marks every figure of a mark is read at
NOISE = "within the spread between seeds (noise)"
BEYOND = "beyond the spread between seeds"
NO_SPREAD = "one seed each: no spread between seeds to judge it by"
SAME = "no difference"
AUC = "auc_mean_x_pos"


@dataclass(frozen=True)
class Figure:
    """One figure of a run: its key in the JSON, its label, its unit, and whether two
    variants are compared on it (the machine's figures are not a variant's)."""

    key: str
    label: str
    unit: str  # x_pos, rate, frames, minutes, per_s, ratio, fine (three decimals)
    compare: bool = True

    def format(self, value: float | None, *, signed: bool = False) -> str:
        if value is None:
            return "-"
        sign = "+" if signed else ""
        if self.unit == "frames":
            return f"{value / 1e6:{sign}.2f}M"
        if self.unit == "minutes":
            return f"{value / 60:{sign}.0f} min"
        if self.unit in ("rate", "ratio"):
            return f"{value:{sign}.2f}"
        if self.unit == "fine":
            return f"{value:{sign}.3f}"
        return f"{value:{sign},.0f}"


# (MarkResult field, label, unit) of the figures read at the report marks.
MARK_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("mean_x_pos", "x_pos mean", "x_pos"),
    ("median_x_pos", "x_pos median", "x_pos"),
    ("flag_rate", "flag rate", "rate"),
    ("greedy_x_pos", "greedy x_pos", "x_pos"),
)
FIGURES: tuple[Figure, ...] = (
    *(
        Figure(f"{field}@{frames}", f"{label} @{frames / 1e6:g}M", unit)
        for frames in REPORT_FRAMES
        for field, label, unit in MARK_FIELDS
    ),
    # The collectors' own episodes just before the mark, beside what the mark plays.
    *(
        Figure(f"{TRAINING_X_POS}@{frames}", f"training episodes' x_pos @{frames / 1e6:g}M", "x_pos")
        for frames in REPORT_FRAMES
    ),
    # Steadiness (learning_steadiness): the probe's figures, the values, the swing.
    *(
        Figure(f"{name}@{frames}", f"{label} @{frames / 1e6:g}M", "fine")
        for frames in REPORT_FRAMES
        for name, label in (*STEADINESS_LABELS.items(), ("q_over_return", "Q / return"))
    ),
    Figure("median_swing", "median swing between marks from 1M", "x_pos"),
    Figure("frames_to_flag", "frames to the first flag", "frames"),
    Figure("frames_to_x_pos_goal", f"frames to x_pos {X_POS_GOAL:,}", "frames"),
    Figure(AUC, "area under x_pos (mean)", "x_pos"),
    Figure("wall_s", "wall time", "minutes", compare=False),
    Figure("frames_per_s", "frames/s", "per_s", compare=False),
    Figure("replay_ratio_held", "replay ratio held", "ratio", compare=False),
    Figure("replayed_frames", "frames replayed to frontier starts", "frames", compare=False),
)


def run_figures(
    curve: Sequence[MarkResult],
    machine: Mapping[str, float],
    steadiness: Mapping[int, Mapping[str, float | None]] | None = None,
) -> dict[str, float | None]:
    """Every figure of one run (None where the run has no such mark, or never got there);
    ``steadiness`` is the probe's figures per mark (``steadiness_at_marks``)."""
    figures: dict[str, float | None] = {
        f"{field}@{frames}": figure_at(curve, frames, field) for frames in REPORT_FRAMES for field, _, _ in MARK_FIELDS
    }
    for frames in REPORT_FRAMES:
        at_mark = (steadiness or {}).get(frames, {})
        figures.update(
            {f"{name}@{frames}": at_mark.get(name) for name in (*STEADINESS_FIELDS.values(), TRAINING_X_POS)}
        )
        mark = next((r for r in curve if r.frames == frames), None)
        figures[f"q_over_return@{frames}"] = mark.q_over_return if mark is not None else None
    figures["median_swing"] = median_swing(curve)
    figures["frames_to_flag"] = first_frames(curve, flag=True)
    figures["frames_to_x_pos_goal"] = first_frames(curve, x_pos=X_POS_GOAL)
    figures[AUC] = area_under_curve(curve)
    figures.update(
        {key: machine.get(key) for key in ("wall_s", "frames_per_s", "replay_ratio_held", "replayed_frames")}
    )
    return figures


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """Mean, min and max of the values present, and how many there were (None if none)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"mean": statistics.fmean(present), "min": min(present), "max": max(present), "seeds": len(present)}


def over_seeds(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float] | None]:
    """Every figure over the runs (one per seed): mean and spread."""
    return {f.key: spread([run["figures"].get(f.key) for run in runs]) for f in FIGURES}


def judge(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """The difference of the means of ``a`` and ``b`` (a figure over seeds of two variants)
    against the spread between seeds: the larger of their min..max ranges."""
    difference = statistics.fmean(a) - statistics.fmean(b)
    ranges = [max(values) - min(values) for values in (a, b) if len(values) >= 2]
    if not ranges:
        return {"difference": difference, "spread": None, "verdict": NO_SPREAD}
    widest = max(ranges)
    if abs(difference) < widest:
        verdict = NOISE
    elif difference == 0:
        verdict = SAME
    else:
        verdict = BEYOND
    return {"difference": difference, "spread": widest, "verdict": verdict}


def common_window(runs: Sequence[Mapping[str, Any]]) -> int | None:
    """The last mark every run has reached (None when a run carries no curve)."""
    ends = [max((mark["frames"] for mark in run["curve"]), default=0) for run in runs if "curve" in run]
    return min(ends) if ends and len(ends) == len(runs) else None


def windowed_auc(run: Mapping[str, Any], until: int) -> float | None:
    """A run's area under the mean x_pos curve up to ``until`` frames."""
    return area_under_curve([MarkResult.from_dict(mark) for mark in run["curve"]], until)


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Variant ``a`` against ``b`` (two results of the bench) on the training seeds they share."""
    runs_a = {run["seed"]: run for run in a["seeds"]}
    runs_b = {run["seed"]: run for run in b["seeds"]}
    common = sorted(set(runs_a) & set(runs_b))
    comparison: dict[str, Any] = {"variant": a["name"], "against": b["name"], "seeds": common, "figures": []}
    if not common:
        comparison["note"] = f"no training seed in common ({sorted(runs_a)} and {sorted(runs_b)}): not compared"
        return comparison
    window = common_window([runs[seed] for runs in (runs_a, runs_b) for seed in common])
    for figure in FIGURES:
        if not figure.compare:
            continue
        values_a = [runs_a[seed]["figures"].get(figure.key) for seed in common]
        values_b = [runs_b[seed]["figures"].get(figure.key) for seed in common]
        row: dict[str, Any] = {"figure": figure.key, "label": figure.label}
        if figure.key == AUC and window is not None:
            values_a, values_b = ([windowed_auc(runs[seed], window) for seed in common] for runs in (runs_a, runs_b))
            row["label"] = f"{figure.label} to {window / 1e6:g}M"
        have_a, have_b = (sum(v is not None for v in values) for values in (values_a, values_b))
        if have_a == have_b == len(common):
            row |= {"a": statistics.fmean(values_a), "b": statistics.fmean(values_b), **judge(values_a, values_b)}
        elif have_a or have_b:
            row["verdict"] = (
                f"not on every seed ({a['name']} {have_a} of {len(common)}, {b['name']} {have_b}): not compared"
            )
        else:
            continue  # neither variant got there (or has the mark): nothing to say
        comparison["figures"].append(row)
    return comparison


def comparison_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The printed form of :func:`compare`'s result."""
    seeds = ",".join(str(s) for s in comparison["seeds"])
    head = f"{comparison['variant']} vs {comparison['against']}"
    if "note" in comparison:
        return [f"{head}: {comparison['note']}"]
    lines = [f"{head} on seeds {seeds} (means over seeds):"]
    units = {f.key: f for f in FIGURES}
    for row in comparison["figures"]:
        figure = units[row["figure"]]
        if "a" not in row:
            lines.append(f"  {row['label']}: {row['verdict']}")
            continue
        between = f", spread between seeds {figure.format(row['spread'])}" if row["spread"] is not None else ""
        lines.append(
            f"  {row['label']}: {figure.format(row['a'])} vs {figure.format(row['b'])} "
            f"(difference {figure.format(row['difference'], signed=True)}{between}): {row['verdict']}"
        )
    return lines


def table_lines(result: Mapping[str, Any]) -> list[str]:
    """A figure per row: its value on each seed, then its mean (min..max) over seeds.

    Figures at a mark no run has reached are left out; a frame count no run reached
    (the first flag, say) stays, as ``-``.
    """
    runs = result["seeds"]
    total = len(runs)
    header = ["figure", *(f"seed {run['seed']}" for run in runs), "over seeds: mean (min..max)"]
    rows = [header]
    for figure in FIGURES:
        values = [run["figures"].get(figure.key) for run in runs]
        if "@" in figure.key and all(value is None for value in values):
            continue
        cells = [figure.format(value) for value in values]
        summary = result["over_seeds"].get(figure.key)
        if summary is None:
            over = "-"
        elif total == 1:
            over = figure.format(summary["mean"])
        else:
            low, high = figure.format(summary["min"]), figure.format(summary["max"])
            over = f"{figure.format(summary['mean'])} ({low}..{high})"
            if summary["seeds"] < total:
                over += f", {summary['seeds']} of {total} seeds"
        rows.append([figure.label, *cells, over])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return [
        ("  " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))).rstrip() for row in rows
    ]
