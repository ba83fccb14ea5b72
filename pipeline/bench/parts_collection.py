"""The suite's collection parts: raw, collector, pipeline and consolidator.

What collecting costs, each figure a ratio of two things measured side by side: the
wrapped env against the bare emulator (``raw``); one real collector (``collector``) and
all of them (``pipeline``) against as many bare wrapped-env processes stepping just
before and just after; and what the consolidator drains (``consolidator``). The
collector and pipeline parts are one measurement with different settings:
:meth:`CollectionParts._collection` runs it and :func:`collection_figures` turns it
into the figures both report.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pipeline.bench.figures import PHASE_MEANING
from pipeline.bench.suite_base import PartResult, SuiteBase
from pipeline.bench.trainer_run import TRAINER_START_ALLOWANCE_S, run_trainer, window_figures

if TYPE_CHECKING:
    from config import Config

# Collection only needs a replay to drain into; its size does not change the cost.
COLLECT_REPLAY_CAPACITY = 16_384


def fixed_epsilon(epsilon: float) -> dict[str, float | int]:
    """Config changes that make the collectors act at ``epsilon`` throughout: the schedule
    decays over a single frame, so it is at its floor from the first frame on, long
    before a part's window opens."""
    return {"epsilon_end": epsilon, "epsilon_decay_frames": 1}


def collection_figures(part: str, window: dict[str, float], before: float, after: float) -> dict[str, float]:
    """The figures the collector and pipeline parts both report, keyed as ``part`` names them.

    ``window``: :func:`~pipeline.bench.trainer_run.window_figures` of the collection run;
    ``before``, ``after``: frames/s of the wrapped-env processes just before and after it.
    """
    figures = {
        f"{part}_frames_per_s": window["frames_per_s"],
        f"{part}_steps_per_s": window["steps_per_s"],
        "wrapped_before_frames_per_s": before,
        "wrapped_after_frames_per_s": after,
        # Against the mean of both sides, so load drifting during the run cancels out.
        f"{part}_efficiency": window["frames_per_s"] / ((before + after) / 2),
        "env_share": window["env_share"],
    }
    figures.update({f"{name}_pct": window[f"{name}_pct"] for name in PHASE_MEANING})
    return figures


class CollectionParts(SuiteBase):
    """The ``raw``, ``collector``, ``pipeline`` and ``consolidator`` parts."""

    def part_raw(self, result: PartResult) -> None:
        pool, s = self.workers(), self.seconds
        figures = result.figures
        wrapped_index = 1
        if self.is_mario():
            figures["raw_frames_per_s"], _ = pool.frames_per_s([0], s)
        else:
            result.details["note"] = "Catch-v0 has no emulator: only the wrapped env is measured"
        figures["wrapped_frames_per_s"], figures["wrapped_steps_per_s"] = pool.frames_per_s([wrapped_index], s)
        if "raw_frames_per_s" in figures:
            figures["wrapper_efficiency"] = figures["wrapped_frames_per_s"] / figures["raw_frames_per_s"]

    def part_collector(self, result: PartResult) -> None:
        # Epsilon 0: the Q-network runs on every step, the collector's worst case.
        window, figures = self._collection("collector", collectors=1, epsilon=0.0)
        result.figures.update(figures)
        result.figures["infer_ms_per_step"] = window["infer_ms_per_step"]
        result.figures["collector_cpu_pct"] = window["collectors_cpu_pct"]
        result.figures["learner_cpu_pct"] = window["learner_cpu_pct"]
        result.details["epsilon"] = 0.0
        result.details["window_s"] = window["window_s"]

    def part_pipeline(self, result: PartResult) -> None:
        # The final epsilon of the schedule: the rate of the whole run after the decay.
        n, epsilon = self.cfg.num_processes, self.cfg.epsilon_end
        window, figures = self._collection("pipeline", collectors=n, epsilon=epsilon)
        result.figures["collectors"] = float(n)
        result.figures["epsilon"] = epsilon
        result.figures.update(figures)
        result.figures["collectors_cpu_pct"] = window["collectors_cpu_pct"]
        result.figures["learner_cpu_pct"] = window["learner_cpu_pct"]
        result.details["window_s"] = window["window_s"]

    def _collection(self, part: str, *, collectors: int, epsilon: float) -> tuple[dict[str, float], dict[str, float]]:
        """``collectors`` real collectors at a fixed ``epsilon``, the learner draining but not
        training, between two runs of as many wrapped-env processes at once (workers
        1..``collectors`` of the pool); the run's window figures and
        :func:`collection_figures`."""
        pool, s = self.workers(), self.seconds
        indices = list(range(1, collectors + 1))
        before, _ = pool.frames_per_s(indices, s)
        cfg = self.part_config(
            part,
            num_processes=collectors,
            **fixed_epsilon(epsilon),
            **self._collect_only_sizes(collectors),
        )
        window = self._collect(cfg, part)
        after, _ = pool.frames_per_s(indices, s)
        return window, collection_figures(part, window, before, after)

    def _collect_only_sizes(self, collectors: int) -> dict[str, int]:
        capacity = max(64 * collectors, min(self.cfg.replay_capacity, COLLECT_REPLAY_CAPACITY))
        return {
            "replay_capacity": capacity,
            "learning_starts": min(self.cfg.learning_starts, capacity),
            "batch_size": min(self.cfg.batch_size, capacity),
        }

    def _collect(self, cfg: Config, what: str) -> dict[str, float]:
        """A collection-only Trainer run (``train=False``, ``throttle=False``: the consolidator
        drains as fast as the ring fills), measured for ``--seconds`` from 1 s after every
        collector has written frames."""
        run = run_trainer(
            dataclasses.replace(cfg, monitor_interval_s=1.0),
            what,
            sources=self.resolved.sources,
            train=False,
            throttle=False,
            window_s=self.seconds,
            warmup_s=1.0,
            ready="collecting",
            time_limit_s=TRAINER_START_ALLOWANCE_S + self.seconds + 30,
        )
        return window_figures(run.snaps, run.window[0], run.window[-1])

    def part_consolidator(self, result: PartResult) -> None:
        from pipeline.bench.parts_consolidator import bench_consolidator

        seconds = max(2.0, self.seconds / 2) if self.options.quick else self.seconds
        out = bench_consolidator(seconds, producers=max(1, self.cfg.num_processes), capacity=self.cfg.ring_capacity)
        result.figures.update({k: float(out[k]) for k in ("records_per_s", "mb_per_s", "producers", "stall_pct")})
        result.details.update({k: v for k, v in out.items() if k not in result.figures})
