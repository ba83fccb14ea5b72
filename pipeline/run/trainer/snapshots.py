"""What a training run reports about itself, read from the pipeline's live objects.

Every monitor tick (:func:`show_snapshots`, the learner's monitor task) the trainer asks
:func:`take_snapshot` for the :class:`~pipeline.run.monitor.monitor.Snapshot`: each slot's
counters copied once (:func:`copy_slot_counters`), then built from the copies with the
functions here: the cumulative counters, one row per collector process, and the gauges
of learning and of the processes. The key names come from :mod:`pipeline.run.monitor.keys`.
At the end of the run, :func:`run_summary` is what goes into ``summary.json``.

Key order matters: the monitor's CSV takes its columns from the first row, in order, so
each function adds its keys in a fixed order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.run.collector.supervisor import Supervisor
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.keys import (
    CounterKey,
    LearnerPhase,
    collector_phase_key,
    learner_phase_key,
    phase_ns_key,
)
from pipeline.run.monitor.monitor import Monitor, Snapshot
from pipeline.run.monitor.procstats import process_stats
from pipeline.run.trainer.resources import RunResources
from pipeline.run.trainer.thread_handover import HandoverWatch
from pipeline.run.trainer.write_failures import WriteFailures
from pipeline.transport.episodes import EpisodeSummary
from pipeline.transport.ring import COLLECTOR_PHASES, SlotCounters, TransitionRing

NAN = float("nan")
RECENT_EPISODES = 100  # the episodes the learning gauges average over


async def show_snapshots(
    stop: asyncio.Event,
    interval_s: float,
    take: Callable[[], Snapshot],
    monitor: Monitor,
    *,
    handover: HandoverWatch | None,
    on_snapshot: Callable[[Snapshot], None] | None,
    write_failures: WriteFailures,
    run_root: Path,
) -> None:
    """The monitor task: every ``interval_s`` (and once at the stop) a snapshot from
    ``take``, shown by the monitor, read by the learner's thread handover and by ``on_snapshot``
    while the run is going. A row the disk refuses (metrics.csv, TensorBoard) is reported
    once and shown anyway."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        snapshot = take()
        if handover is not None:
            handover.observe(snapshot.time, snapshot.counters)
        running = not stop.is_set()
        if running and on_snapshot is not None:
            on_snapshot(snapshot)
        try:
            monitor.update(snapshot, status="running" if running else "stopping")
        except OSError as exc:
            write_failures.metrics_failed(run_root, exc)
        else:
            write_failures.succeeded("metrics", str(monitor.csv_path))


def take_snapshot(
    res: RunResources,
    *,
    time_s: float,
    totals: Mapping[CounterKey, int],
    learner_ns: Mapping[LearnerPhase, int],
    epsilon: float,
    ring_capacity: int,
    evaluations: Evaluations,
    startup: Mapping[str, float],
) -> Snapshot:
    """One monitor snapshot of the run (``totals`` with a resumed run's counts): the
    learner's metrics since the last one are popped, the evaluator's results read as
    they stand."""
    slots = copy_slot_counters(res.ring)
    slots_of = [res.slots_of(i) for i in range(res.num_collectors)]
    collectors = collector_rows(slots, slots_of, res.supervisor, res.weights.version)
    episodes = list(res.consolidator.episodes)[-RECENT_EPISODES:]
    gauges = {
        "replay_size": float(len(res.replay)),
        "epsilon": epsilon,
        "weights_version": float(res.weights.version),
        "ring_fill_pct": ring_fill_pct(slots, ring_capacity),
        "restarts": float(res.supervisor.restarts),
        "env_errors": float(sum(c.env_errors for c in slots)),
        "collectors_alive": float(res.supervisor.alive()),
        "bad_episode_records": float(res.consolidator.bad_episode_records),
        "poll_gap_ms": 1000.0 * res.consolidator.reset_gap(),
        **learning_gauges(res.learner.pop_metrics(), episodes),
        **evaluations.gauges(),
        **res.steadiness.gauges(),
        **process_gauges(collectors, res.device),
    }
    if res.collection is not None:
        gauges.update(res.collection.gauges())
    return Snapshot(
        time=time_s,
        counters=snapshot_counters(totals, slots, learner_ns),
        gauges=gauges,
        collectors=collectors,
        startup=dict(startup),
    )


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
    res: RunResources,
    *,
    elapsed_s: float,
    stop_reason: str,
    startup: Mapping[str, float],
    totals: Mapping[CounterKey, int],
    this_process: Mapping[CounterKey, int],
    learner_ns: Mapping[LearnerPhase, int],
    final_checkpoint: Path | None,
    evaluations: Evaluations,
) -> dict[str, Any]:
    """summary.json: what the learner process did (``totals`` include a resumed run's,
    ``this_process`` does not), for benchmarks and scripts."""
    ring, consolidator, learner = res.ring, res.consolidator, res.learner
    summary = {
        "elapsed_s": elapsed_s,
        "stop_reason": stop_reason,
        "startup_s": startup,
        "counters": dict(totals),
        "this_process": dict(this_process),
        "restarts": res.supervisor.restarts,
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
        "replay_inserted": res.replay.inserted,
        "bad_episode_records": consolidator.bad_episode_records if consolidator else 0,
        "learner_phase_s": {k: v / 1e9 for k, v in learner_ns.items()},
        "compiled": bool(getattr(learner, "compiled", False)),
        "amp_dtype": str(getattr(learner, "amp_dtype", None)),
        "final_checkpoint": str(final_checkpoint) if final_checkpoint else "",
        "evaluations": evaluations.count,
        "last_evaluation": evaluations.last,
    }
    if res.collection is not None:
        summary["cluster"] = res.collection.summary()
    return summary
