"""The keys of the run's figures: every name a :class:`~pipeline.run.monitor.monitor.Snapshot`
carries that more than one module names, defined once.

The counters (:data:`COUNTER_KEYS`), the phases' keys (:func:`collector_phase_key`,
:func:`learner_phase_key`) and the collector nodes' gauges (:func:`node_gauge_key`); the
gauges that other layers name too (the steadiness probe's, the evaluator's) are in
:mod:`pipeline.common.gauges`. The trainer builds snapshots with them
(:mod:`pipeline.run.trainer.snapshots`); the monitor (:mod:`pipeline.run.monitor.monitor`) and its views
(:mod:`pipeline.run.monitor.view`) read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

from pipeline.transport.ring import CollectorPhase

# -- snapshot keys ---------------------------------------------------------------------------
# Plain strings typed as Literal (not Enums): they are CSV columns, TensorBoard tags,
# summary.json and checkpoint keys, and must stay plain str there.

# The run's cumulative counters (snapshot counters, checkpoints' "counters", summary.json).
CounterKey = Literal["frames", "steps", "records", "updates", "samples", "episodes", "epochs", "replayed_frames"]
COUNTER_KEYS: Final[tuple[CounterKey, ...]] = get_args(CounterKey)

# Where the learner process's time goes (its event loop's tasks).
LearnerPhase = Literal["wait", "sample", "update", "publish", "probe", "consolidate"]
LEARNER_PHASES: Final[tuple[LearnerPhase, ...]] = get_args(LearnerPhase)


def phase_ns_key(phase: CollectorPhase | LearnerPhase) -> str:
    """Nanoseconds spent in ``phase``: the key in a per-collector row (its home slot's)."""
    return f"{phase}_ns"


def collector_phase_key(phase: CollectorPhase) -> str:
    """Snapshot counter: nanoseconds in ``phase`` summed over every collector slot."""
    return f"collector_{phase_ns_key(phase)}"


def learner_phase_key(phase: LearnerPhase) -> str:
    """Snapshot counter: the learner process's nanoseconds in ``phase``."""
    return f"learner_{phase_ns_key(phase)}"


def share_key(phase_key: str) -> str:
    """The derived row's percent-of-wall-time column of a phase counter (``*_ns`` -> ``*_pct``)."""
    return phase_key.removesuffix("_ns") + "_pct"


# Per collector node with the Ray backend (pipeline.cluster): one gauge of each kind per
# node place, keyed by :func:`node_gauge_key`.
NodeGauge = Literal["frames_per_s", "pull_ms", "inflight_mb", "restarts", "lost", "live", "cpu_pct"]
NODE_GAUGES: Final[tuple[NodeGauge, ...]] = get_args(NodeGauge)


def node_gauge_key(position: int, gauge: NodeGauge) -> str:
    """The snapshot gauge of one collector node (``node0_frames_per_s``...)."""
    return f"node{position}_{gauge}"


def node_positions(row: Mapping[str, float]) -> list[int]:
    """The node places a row has gauges for (none with the local backend)."""
    found = []
    while node_gauge_key(len(found), "frames_per_s") in row:
        found.append(len(found))
    return found


# Counters (cumulative) whose rates the monitor reports, and their display names.
RATE_COUNTERS: dict[CounterKey, str] = {
    "frames": "env frames/s",
    "steps": "agent steps/s",
    "records": "consolidated records/s",
    "updates": "updates/s",
    "samples": "samples/s",
    "episodes": "episodes/s",
}
