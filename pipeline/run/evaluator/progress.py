"""How far the evaluator has got, step by step: agent steps, CPU and wall seconds of evaluating.

An evaluation reports its figures only when it ends, and a niced evaluator sharing a
busy machine can take many minutes for one (10 episodes of up to 2,000 steps at a few
percent of a core). What it costs is known much sooner: :class:`EvalProgress` is a
shared array of three doubles that the evaluator process updates on every agent step
(:class:`CountingEnv` wraps its env) and the learner reads without locking (each is one
aligned 8-byte store; a reader may see one step's figures beside the previous step's,
which no rate over seconds notices). Only evaluating counts: start-up and the sleeps
between evaluations are outside.

The learner turns them into the ``evaluator_steps``, ``evaluator_eval_cpu_s`` and
``evaluator_eval_wall_s`` gauges (:data:`~pipeline.common.gauges.EVALUATOR_PROGRESS_GAUGES`,
by :mod:`~pipeline.run.evaluator.evaluations`); the benchmark's
evaluator part divides them over its window (:mod:`~pipeline.bench.parts_training`).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium

from pipeline.common.gauges import EVALUATOR_EVAL_CPU_S, EVALUATOR_EVAL_WALL_S, EVALUATOR_STEPS

STEPS, CPU_S, WALL_S = range(3)  # places in the shared array
GAUGES = {EVALUATOR_STEPS: STEPS, EVALUATOR_EVAL_CPU_S: CPU_S, EVALUATOR_EVAL_WALL_S: WALL_S}


def new_progress(ctx: Any) -> Any:
    """The shared array (zeros) from a multiprocessing context, to pass to the process."""
    return ctx.Array("d", len(GAUGES), lock=False)


def read_progress(progress: Any | None) -> dict[str, float]:
    """The gauges of ``progress`` (zeros before the first step; NaN without an array)."""
    if progress is None:
        return {name: float("nan") for name in GAUGES}
    return {name: float(progress[index]) for name, index in GAUGES.items()}


class CountingEnv(gymnasium.Wrapper):
    """The evaluator's env, counting each step into ``progress`` while an evaluation runs.

    :meth:`begin` and :meth:`end` bracket one evaluation: its CPU and wall seconds so far
    are stored at every step, on top of what earlier evaluations added.
    """

    def __init__(self, env: gymnasium.Env, progress: Any) -> None:
        super().__init__(env)
        self.progress = progress
        self._since: tuple[float, float] | None = None  # (process_time, monotonic) at begin
        self._base = (0.0, 0.0)

    def begin(self) -> None:
        self._since = (time.process_time(), time.monotonic())
        self._base = (self.progress[CPU_S], self.progress[WALL_S])

    def end(self) -> None:
        self._store()
        self._since = None

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        if self._since is not None:
            self.progress[STEPS] += 1
            self._store()
        return out

    def _store(self) -> None:
        if self._since is not None:
            self.progress[CPU_S] = self._base[0] + time.process_time() - self._since[0]
            self.progress[WALL_S] = self._base[1] + time.monotonic() - self._since[1]
