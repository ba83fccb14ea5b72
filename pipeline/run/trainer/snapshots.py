"""What a training run reports about itself, read from the pipeline's live objects.

Every monitor tick the trainer copies each slot's counters once (:func:`copy_slot_counters`)
and builds the :class:`~pipeline.run.monitor.monitor.Snapshot` from the copies with the functions
here: the cumulative counters, one row per collector process, and the gauges of
learning and of the processes. The key names come from :mod:`pipeline.run.monitor.keys`.
At the end of the run, :func:`run_summary` is what goes into ``summary.json``.

Key order matters: the monitor's CSV takes its columns from the first row, in order, so
each function adds its keys in a fixed order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.learning.learner import Learner
from pipeline.run.collector.supervisor import Supervisor
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.keys import (
    CounterKey,
    LearnerPhase,
    collector_phase_key,
    learner_phase_key,
    phase_ns_key,
)
from pipeline.run.monitor.procstats import process_stats
from pipeline.run.trainer.consolidator import Consolidator
from pipeline.transport.episodes import EpisodeSummary
from pipeline.transport.ring import COLLECTOR_PHASES, SlotCounters, TransitionRing

NAN = float("nan")


def copy_slot_counters(ring: TransitionRing) -> list[SlotCounters]:
    """Every slot's counters as of now (one read of each word), for one snapshot."""
    return [slot.counters.snapshot() for slot in ring.slots]


def snapshot_counters(
    totals: Mapping[CounterKey, int], slots: Sequence[SlotCounters], learner_ns: Mapping[LearnerPhase, int]
) -> dict[str, float]:
    """The run's totals, then each collector phase summed over every slot, then the learner's phases."""
    counters = {key: float(value) for key, value in totals.items()}
    for phase in COLLECTOR_PHASES:
        counters[collector_phase_key(phase)] = float(sum(slot.phase_ns(phase) for slot in slots))
    for phase, ns in learner_ns.items():
        counters[learner_phase_key(phase)] = float(ns)
    return counters


def collector_rows(
    slots: Sequence[SlotCounters],
    slots_of: Sequence[Sequence[int]],
    supervisor: Supervisor,
    weights_version: int,
) -> list[dict[str, float]]:
    """One row per collector process: its envs' totals, its home slot's weights version and
    phase times, its restarts and its CPU and memory. ``slots_of[i]`` lists collector i's
    slots, its home slot first."""
    rows = []
    for i, indices in enumerate(slots_of):
        mine = [slots[j] for j in indices]
        home = mine[0]
        state = supervisor.states[i]
        process = state.process
        stats = process_stats(process.pid if process is not None and process.is_alive() else None)
        rows.append(
            {
                "frames": sum(c.frames for c in mine),
                "steps": sum(c.steps for c in mine),
                "weights_version": home.weights_version,
                "weights_lag": weights_version - home.weights_version,
                "restarts": state.restarts,
                "env_errors": sum(c.env_errors for c in mine),
                **stats,
                **{phase_ns_key(phase): ns for phase, ns in home.phases_ns().items()},
            }
        )
    return rows


def ring_fill_pct(slots: Sequence[SlotCounters], capacity: int) -> float:
    """Committed and not yet consumed records, in percent of every slot's capacity."""
    return 100.0 * sum(slot.pending for slot in slots) / (capacity * len(slots))


def learning_gauges(metrics: Mapping[str, float], episodes: Sequence[EpisodeSummary]) -> dict[str, float]:
    """The learner's metrics since the last tick and the recent training episodes (NaN when
    there were none). Return, x_pos, flag rate and length are of the episodes that started at
    the level's start, comparable with evaluation; ``frontier_start_share`` is the share of
    the others (restarts near the frontier)."""

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else NAN

    frontier_starts = mean([e.replayed_steps > 0 for e in episodes])
    episodes = [e for e in episodes if e.replayed_steps == 0]
    return {
        "loss": metrics.get("loss", NAN),
        "td_error": metrics.get("td_abs", NAN),
        "mean_q": metrics.get("q_mean", NAN),
        "grad_norm": metrics.get("grad_norm", NAN),
        "episode_return": mean([e.ret for e in episodes]),
        "episode_x_pos": mean([e.x_pos for e in episodes]),
        "flag_rate": mean([e.flag_get for e in episodes]),
        "episode_length": mean([e.length for e in episodes]),
        "frontier_start_share": frontier_starts,
    }


def process_gauges(collectors: Sequence[Mapping[str, float]], device: torch.device) -> dict[str, float]:
    """CPU and memory of the collectors (summed over their rows) and of this learner
    process (and its intra-op threads), and the GPU's when the learner runs on one."""
    learner = process_stats(os.getpid())
    gauges = {
        "collectors_rss_mb": float(sum(c["rss_mb"] for c in collectors)),
        "collectors_cpu_pct": float(sum(c["cpu_pct"] for c in collectors)),
        "learner_cpu_pct": learner["cpu_pct"],
        "learner_rss_mb": learner["rss_mb"],
        # What the thread hand-over (pipeline.run.trainer.thread_handover) gives the learner now.
        "learner_threads": float(torch.get_num_threads()),
    }
    if device.type == "cuda":
        gauges["gpu_mem_mb"] = torch.cuda.memory_allocated(device) / 2**20
        try:
            gauges["gpu_util_pct"] = float(torch.cuda.utilization(device))
        except Exception:  # noqa: BLE001 - needs pynvml; memory is still shown
            pass
    return gauges


def run_summary(
    *,
    elapsed_s: float,
    stop_reason: str,
    startup: Mapping[str, float],
    totals: Mapping[CounterKey, int],
    this_process: Mapping[CounterKey, int],
    supervisor: Supervisor,
    ring: TransitionRing | None,
    consolidator: Consolidator | None,
    replay_inserted: int,
    learner: Learner,
    learner_ns: Mapping[LearnerPhase, int],
    final_checkpoint: Path | None,
    evaluations: Evaluations,
) -> dict[str, Any]:
    """summary.json: what the learner process did (``totals`` include a resumed run's,
    ``this_process`` does not), for benchmarks and scripts."""
    return {
        "elapsed_s": elapsed_s,
        "stop_reason": stop_reason,
        "startup_s": startup,
        "counters": dict(totals),
        "this_process": dict(this_process),
        "restarts": supervisor.restarts,
        # Exactly-once accounting: after the final drain, every committed record of every
        # slot was consumed once and inserted into replay once.
        "slots": [
            {
                "write_seq": slot.counters.write_seq,
                "read_seq": slot.counters.read_seq,
                "consumed": int(consolidator.records[i]) if consolidator else 0,
                "starts": slot.counters.starts,
                "env_errors": slot.counters.env_errors,
            }
            for i, slot in enumerate(ring.slots)
        ]
        if ring is not None
        else [],
        "replay_inserted": replay_inserted,
        "bad_episode_records": consolidator.bad_episode_records if consolidator else 0,
        "learner_phase_s": {k: v / 1e9 for k, v in learner_ns.items()},
        "compiled": bool(getattr(learner, "compiled", False)),
        "amp_dtype": str(getattr(learner, "amp_dtype", None)),
        "final_checkpoint": str(final_checkpoint) if final_checkpoint else "",
        "evaluations": evaluations.count,
        "last_evaluation": evaluations.last,
    }
