"""The names of the gauges that several layers name: the steadiness probe's and the evaluator's.

A gauge is one instantaneous figure of the monitor's snapshots
(:mod:`pipeline.run.monitor`): a column of ``metrics.csv`` and a TensorBoard tag under
the same name, and what the benchmark and ``plot`` read back from a run. The gauges here
are produced in one layer and read in others, so each name is written once, here, in
the bottom layer that all of them import:

- the steadiness probe's (measured by :mod:`pipeline.learning.steadiness`, shown by the
  monitor, read back by the learning benchmark): ``steady_<figure>`` for each of
  :data:`STEADINESS_FIGURES`, with the label both show it under;
- the evaluator's (:mod:`pipeline.run.evaluator`): the figures of its newest evaluation
  and its totals (:data:`EVAL_GAUGES`, in the order they are reported), and its
  process's CPU, memory and progress (:data:`EVALUATOR_PROGRESS_GAUGES`).

Plain strings, not an Enum: they are CSV columns and JSON keys, and must stay plain
``str`` there.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

# -- the steadiness probe --------------------------------------------------------------------

# Each figure and its label, in the order the monitor's table and the learning
# benchmark show them (docs/learning-history.md says what each measures).
STEADINESS_LABELS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "agreement": "train/eval agreement",
        "expected_agreement": "agreement, batchings' mean",
        "train_agreement": "train/train agreement",
        "churn": "churn per publish",
        "q_offset": "|Q_eval - Q_train|",
        "action_gap": "median action gap",
    }
)
STEADINESS_FIGURES: Final[tuple[str, ...]] = tuple(STEADINESS_LABELS)
STEADINESS_PREFIX: Final = "steady_"


def steadiness_gauge(figure: str) -> str:
    """The gauge of a steadiness figure (``agreement`` -> ``steady_agreement``).

    Raises ``ValueError`` for a name that is not a figure, so a misspelt one fails
    where it is written instead of showing an empty column."""
    if figure not in STEADINESS_LABELS:
        raise ValueError(f"{figure!r} is not a steadiness figure (one of {', '.join(STEADINESS_FIGURES)})")
    return STEADINESS_PREFIX + figure


STEADINESS_GAUGES: Final[tuple[str, ...]] = tuple(map(steadiness_gauge, STEADINESS_FIGURES))

# -- the evaluator: its newest evaluation and its totals ------------------------------------

EVALUATIONS: Final = "evaluations"  # evaluations finished (by this process of the run)
EVAL_RETURN: Final = "eval_return"  # the newest evaluation's mean return
EVAL_X_POS: Final = "eval_x_pos"  # ... its mean x_pos
EVAL_MEDIAN_X_POS: Final = "eval_median_x_pos"
EVAL_MAX_X_POS: Final = "eval_max_x_pos"
EVAL_FLAG_RATE: Final = "eval_flag_rate"
EVAL_GREEDY_X_POS: Final = "eval_greedy_x_pos"  # the greedy episode beside the protocol's
EVAL_FIRST_FLAG_FRAMES: Final = "eval_first_flag_frames"  # training frames at the first flag
EVAL_LENGTH: Final = "eval_length"
EVAL_BEST_RETURN: Final = "eval_best_return"  # the best episode's, whose video is kept
EVAL_WEIGHTS_VERSION: Final = "eval_weights_version"
EVAL_FRAMES: Final = "eval_frames"  # the frames of the evaluated weights (its result comes later)
EVAL_S: Final = "eval_s"  # wall seconds of the newest evaluation
EVAL_CPU_S: Final = "eval_cpu_s"  # ... and its CPU seconds
EVAL_WALL_S_TOTAL: Final = "eval_wall_s_total"  # summed over the evaluations
EVAL_CPU_S_TOTAL: Final = "eval_cpu_s_total"

# In the order they are reported (and so the CSV's column order).
EVAL_GAUGES: Final[tuple[str, ...]] = (
    EVALUATIONS,
    EVAL_RETURN,
    EVAL_X_POS,
    EVAL_MEDIAN_X_POS,
    EVAL_MAX_X_POS,
    EVAL_FLAG_RATE,
    EVAL_GREEDY_X_POS,
    EVAL_FIRST_FLAG_FRAMES,
    EVAL_LENGTH,
    EVAL_BEST_RETURN,
    EVAL_WEIGHTS_VERSION,
    EVAL_FRAMES,
    EVAL_S,
    EVAL_CPU_S,
    EVAL_WALL_S_TOTAL,
    EVAL_CPU_S_TOTAL,
)
# The gauges that show one field of the newest evaluation result (NaN before the first);
# the fields are those the evaluator process puts in its results.
EVAL_RESULT_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        EVAL_RETURN: "mean_return",
        EVAL_X_POS: "mean_x_pos",
        EVAL_MEDIAN_X_POS: "median_x_pos",
        EVAL_MAX_X_POS: "max_x_pos",
        EVAL_FLAG_RATE: "flag_rate",
        EVAL_GREEDY_X_POS: "greedy_x_pos",
        EVAL_LENGTH: "mean_length",
        EVAL_BEST_RETURN: "best_return",
        EVAL_WEIGHTS_VERSION: "weights_version",
        EVAL_FRAMES: "frames",
        EVAL_S: "eval_s",
        EVAL_CPU_S: "cpu_s",
    }
)

# -- the evaluator's process -----------------------------------------------------------------

EVALUATOR_CPU_PCT: Final = "evaluator_cpu_pct"  # of one core, since the previous tick
EVALUATOR_RSS_MB: Final = "evaluator_rss_mb"
# Its steps and CPU and wall seconds of evaluating so far, updated at every step
# (pipeline.run.evaluator.progress).
EVALUATOR_STEPS: Final = "evaluator_steps"
EVALUATOR_EVAL_CPU_S: Final = "evaluator_eval_cpu_s"
EVALUATOR_EVAL_WALL_S: Final = "evaluator_eval_wall_s"
EVALUATOR_PROGRESS_GAUGES: Final[tuple[str, ...]] = (EVALUATOR_STEPS, EVALUATOR_EVAL_CPU_S, EVALUATOR_EVAL_WALL_S)
