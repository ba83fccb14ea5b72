"""The trainer's side of the evaluator process: start it, take its results, report them.

The evaluator (:mod:`pipeline.run.evaluator`) plays ``eval_episodes`` episodes at
``eval_epsilon`` (the protocol of :mod:`~pipeline.run.evaluator.protocol`) with the published
weights in a process of its own. Here, in the learner, its results are taken without
ever blocking the event loop (once per monitor tick), announced, summed, and turned into
the ``eval_*`` gauges of the monitor snapshot (:data:`~pipeline.common.gauges.EVAL_GAUGES`).
An evaluator that dies is reported once; training goes on without it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from config import Config
from pipeline.common.gauges import (
    EVAL_CPU_S_TOTAL,
    EVAL_FIRST_FLAG_FRAMES,
    EVAL_GAUGES,
    EVAL_RESULT_FIELDS,
    EVAL_WALL_S_TOTAL,
    EVALUATIONS,
    EVALUATOR_CPU_PCT,
    EVALUATOR_RSS_MB,
)
from pipeline.run.evaluator.evaluator import Evaluator
from pipeline.run.monitor.monitor import Monitor
from pipeline.run.monitor.procstats import process_stats

logger = logging.getLogger("mario.trainer")


def announcement(result: dict[str, Any]) -> str:
    """The monitor's line for one evaluation: mean and median x_pos, flag rate, return."""
    episodes = int(result.get("episodes", 1))
    epsilon = float(result.get("epsilon", 0.0))
    how = f"{episodes} episode(s) " + ("greedy" if epsilon == 0 else f"at epsilon {epsilon:g}")
    greedy = f", greedy {result['greedy_x_pos']}" if "greedy_x_pos" in result and epsilon > 0 else ""
    final = "final " if result.get("final") else ""
    return (
        f"{final}evaluation of weights v{result['weights_version']} (frames {result['frames']:,}, "
        f"update {result['learner_step']}, {how}): "
        f"x_pos mean {result['mean_x_pos']:.0f} median {result['median_x_pos']:.0f}{greedy}, "
        f"flag rate {result['flag_rate']:.2f}, return {result['mean_return']:.1f}"
    )


class Evaluations:
    """The evaluator process of a run (if any) and what its evaluations reported so far."""

    def __init__(self) -> None:
        self.evaluator: Evaluator | None = None
        self.last: dict[str, Any] | None = None  # the newest evaluation result
        self.count = 0
        self.seconds = {"wall": 0.0, "cpu": 0.0}  # summed over this process's evaluations
        # Training frames when the first evaluation with a flag was taken (this process's
        # evaluations: a resumed run counts from its resume).
        self.first_flag_frames: float = float("nan")
        self._exit_reported = False

    def start(self, cfg: Config, run_root: Path, weights_name: str, monitor: Monitor, frames: int) -> None:
        """Start the evaluator of a run that has trained ``frames`` frames so far."""
        self.evaluator = Evaluator(
            cfg,
            run_root,
            weights_name,
            interval_frames=cfg.eval_interval_frames,
            episodes=cfg.eval_episodes,
            max_steps=cfg.eval_max_steps,
            epsilon=cfg.eval_epsilon,
            start_frames=frames,
            max_lag_frames=cfg.eval_max_lag_frames,
        )
        self.evaluator.start()
        how = "greedy" if cfg.eval_epsilon == 0 else f"at epsilon {cfg.eval_epsilon:g}"
        monitor.announce(
            f"evaluator: {cfg.eval_episodes} episode(s) {how} every {cfg.eval_interval_frames:,} frames, "
            f"best video in {run_root / 'videos'}"
        )

    def poll(self, monitor: Monitor | None, *, stopping: bool, log_path: Path, frames: float = float("nan")) -> None:
        """Take finished evaluations (never blocks); report a dead evaluator once.

        ``frames`` is the run's frame count now: the first evaluation with a flag is dated by
        it (to within one monitor tick). While the run is ``stopping`` the evaluator exits on
        purpose, so that is not reported.
        """
        if self.evaluator is None:
            return
        for result in self.evaluator.poll():
            self.count += 1
            self.last = result
            self.seconds["wall"] += float(result.get("eval_s", 0.0))
            self.seconds["cpu"] += float(result.get("cpu_s", 0.0))
            if result.get("flag_rate", 0.0) > 0 and math.isnan(self.first_flag_frames):
                self.first_flag_frames = float(frames)
            if monitor is not None:
                best = f"; new best -> {result['video']}" if result.get("video") else ""
                monitor.announce(announcement(result) + best)
        code = self.evaluator.exitcode
        if code is not None and not self._exit_reported and not stopping:
            self._exit_reported = True
            message = f"evaluator exited with code {code}; training goes on without it (see {log_path})"
            if monitor is not None and monitor.mode != "off":
                monitor.announce(message)  # a log line, or a line under the live table
            else:
                logger.error(message)

    def gauges(self) -> dict[str, float]:
        """The ``eval_*`` gauges (NaN before the first evaluation), then the evaluator
        process's CPU and memory and its progress (:mod:`~pipeline.run.evaluator.progress`)
        when there is one."""
        last = self.last or {}
        nan = float("nan")
        values = {gauge: float(last.get(field, nan)) for gauge, field in EVAL_RESULT_FIELDS.items()}
        values[EVALUATIONS] = float(self.count)
        values[EVAL_FIRST_FLAG_FRAMES] = self.first_flag_frames
        values[EVAL_WALL_S_TOTAL] = self.seconds["wall"]
        values[EVAL_CPU_S_TOTAL] = self.seconds["cpu"]
        gauges = {gauge: values[gauge] for gauge in EVAL_GAUGES}
        if self.evaluator is not None:
            stats = process_stats(self.evaluator.pid if self.evaluator.alive else None)
            gauges[EVALUATOR_CPU_PCT] = stats["cpu_pct"]
            gauges[EVALUATOR_RSS_MB] = stats["rss_mb"]
            # Its steps and seconds of evaluating as they go, not only when an evaluation
            # ends: the benchmark's evaluator part measures its cost from them.
            gauges.update(self.evaluator.progress())
        return gauges

    def request_final(self) -> bool:
        """Ask the evaluator (if any) for a final evaluation of the last published weights;
        before the weights block's stop flag is set. Returns whether one was asked for."""
        if self.evaluator is None or not self.evaluator.alive:
            return False
        self.evaluator.request_final()
        return True

    def finish(self, timeout_s: float, give_up: Callable[[], bool]) -> str:
        """Wait for the final evaluation (see :meth:`request_final`); what became of it."""
        if self.evaluator is None:
            return "no evaluator"
        if self.evaluator.finish(timeout_s, give_up):
            return "done"
        return "skipped (Ctrl-C)" if give_up() else f"not finished within {timeout_s:g} s"

    def stop(self, timeout_s: float = 10) -> None:
        if self.evaluator is not None:
            # Without a final evaluation it also saw the stop flag: an evaluation in flight
            # is abandoned, not waited for.
            self.evaluator.stop(timeout_s=timeout_s)
