"""A background evaluator for training runs: the latest weights, played by the evaluation protocol.

One long-lived child process (started once, never one per evaluation) reads the
weights the learner publishes to the shared-memory weights block, exactly as a
collector does (:class:`pipeline.transport.weights.WeightsBlock` + :class:`StateLoader`), and every
``interval_frames`` emulator frames of training plays ``episodes`` episodes at ``epsilon``
(``eval_episodes`` and ``eval_epsilon``, by default 10 at 0.05; at most ``max_steps`` agent
steps each) with them, and beside them, when epsilon is above 0, the greedy episode
(``greedy_x_pos``: what ``python main.py play`` shows). Its clock is the frame count the
weights block carries with each publish: an evaluation starts with the first weights
published at or past the next multiple of ``interval_frames``, so evaluations land at the
same frames on a fast machine and a slow one, and a resumed run keeps the cadence. When an
evaluation takes longer than the interval, the next one starts at once with the newest
weights (the multiples it missed are skipped, never queued). Weights that were already
evaluated are not evaluated again. Results (mean and median x_pos, flag rate, return,
...) go back through a ``multiprocessing`` queue, which the learner drains with
:meth:`Evaluator.poll` without ever blocking; this channel is off the hot path (one
small dict per evaluation).

The episodes follow :mod:`~pipeline.run.evaluator.protocol`: episode ``i`` of every
evaluation uses the seed ``config.seed + EVAL_SEED_OFFSET + i`` for its reset and its
random actions, so successive weights versions are compared on the same starts and the
same weights give the same figures. Returns are in game units (rewards unscaled), like
``episode_return`` in ``metrics.csv``.

The best episode so far (highest return) is kept as ``<run>/videos/best.mp4`` (a GIF
without imageio-ffmpeg), with ``best.json`` describing it. To keep memory flat, an
episode's frames are not stored while it plays: only its actions are, and when it is a
new best it is replayed from its seed and actions (the env is deterministic given both,
random actions included) while being encoded, so video encoding happens only when a new
best appears. On a resumed run ``best.json`` is read back, so a worse episode never
replaces the video.

The process is polite: ``os.nice(10)``, one torch thread, one encoder thread, and it
ignores SIGINT (the learner decides when it stops). It exits when :meth:`Evaluator.stop`
asks, when the weights block's stop flag is set, or when its parent dies. It logs to
``<run>/logs/evaluator.log``.

With ``max_lag_frames`` > 0 (``eval_max_lag_frames``) training waits for the evaluator
once an evaluation it has not started is that many frames overdue, so that it evaluates
at every multiple of the interval however slow the machine (:mod:`~pipeline.run.evaluator.hold`).

A run that reaches its frame budget ends with a final evaluation: the learner publishes
its last weights, calls :meth:`Evaluator.request_final` before it sets the stop flag (so
the evaluator does not take that flag as its own), stops the collectors, and waits with
:meth:`Evaluator.finish`. The evaluator finishes the evaluation in flight, evaluates the
last weights if it has not yet, and exits. Without it, a niced evaluator on a busy
machine could still be on its first evaluation when a short run ends, and the run would
report none; with it, every finished run's last word is its final policy's figures.

Usage in the learner::

    evaluator = Evaluator(cfg, run_path, weights_segment.name, interval_frames=250_000, episodes=20, epsilon=0.05)
    evaluator.start()
    ...
    for result in evaluator.poll():   # every monitor tick; never blocks
        ...
    evaluator.request_final()         # a run that reached its frames: evaluate the last weights
    evaluator.finish(timeout_s=600)   # ... and wait for it, with the collectors stopped
    evaluator.stop()                  # before unlinking the weights segment
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from config import Config
from pipeline.common.child import process_context
from pipeline.run.evaluator.evaluator_main import EvaluatorArgs, evaluator_main
from pipeline.run.evaluator.hold import TrainingHold, hold_frames
from pipeline.run.evaluator.progress import new_progress, read_progress


class Evaluator:
    """Owns the evaluator process; lives in the learner.

    Args:
        config: the run's :class:`config.Config`.
        run_path: the run directory (videos go to ``<run>/videos``, the log to ``<run>/logs``).
        weights_name: name of the weights block's shared-memory segment.
        interval_frames: emulator frames of training between two evaluations: one starts
            with the first weights published at or past each multiple of it (1 = back to
            back, whenever there are weights it has not evaluated).
        start_frames: the run's frames when the evaluator starts (a resumed run's): the
            first evaluation is due at the first multiple of the interval past them.
        episodes: episodes per evaluation (each from a seed of its own).
        max_steps: agent steps after which an evaluation episode is cut.
        epsilon: probability of a random action at each step (0 = greedy).
        max_lag_frames: > 0: training waits once an evaluation not started yet is this
            many frames overdue (0: it never waits; a slow evaluator skips multiples).
    """

    def __init__(
        self,
        config: Config,
        run_path: Path,
        weights_name: str,
        *,
        interval_frames: int,
        episodes: int = 1,
        max_steps: int = 2000,
        epsilon: float = 0.0,
        start_frames: int = 0,
        max_lag_frames: int = 0,
    ) -> None:
        if interval_frames < 1:
            raise ValueError(f"interval_frames must be >= 1, got {interval_frames!r}")
        if episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {episodes!r}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.config = config
        self.run_path = Path(run_path)
        self.weights_name = weights_name
        self.interval_frames = int(interval_frames)
        self.start_frames = int(start_frames)
        self.episodes = int(episodes)
        self.max_steps = int(max_steps)
        self.epsilon = float(epsilon)
        self.max_lag_frames = max(0, int(max_lag_frames))
        self.process: mp.process.BaseProcess | None = None
        self._hold: Any = None  # the weights block (attached here) while training waits for this evaluator
        self._progress: Any = None  # steps and seconds of evaluating, updated by the process every step
        self._queue: Any = None
        self._stop: Any = None
        self._final: Any = None
        self._pending: list[dict] = []

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the evaluator process (once)."""
        if self.process is not None:
            raise RuntimeError("the evaluator was already started; create a new Evaluator to restart it")
        ctx = process_context()
        self._queue = ctx.Queue()
        self._stop = ctx.Event()
        self._final = ctx.Event()
        self._progress = new_progress(ctx)
        args = EvaluatorArgs(
            config=self.config,
            run_path=str(self.run_path),
            weights_name=self.weights_name,
            parent_pid=os.getpid(),
            interval_frames=self.interval_frames,
            start_frames=self.start_frames,
            episodes=self.episodes,
            max_steps=self.max_steps,
            epsilon=self.epsilon,
            max_lag_frames=self.max_lag_frames,
        )
        if self.max_lag_frames:
            # The first evaluation is due at the first multiple past start_frames: training
            # waits there for the process's start-up too, which sets the same hold itself.
            self._hold = TrainingHold(self.weights_name)
            self._hold.set(hold_frames(self.start_frames, self.interval_frames, self.max_lag_frames))
        self.process = ctx.Process(
            target=evaluator_main,
            args=(args, self._queue, self._stop, self._final, self._progress),
            name="evaluator",
            daemon=True,
        )
        self.process.start()

    def poll(self) -> list[dict]:
        """Evaluations finished since the last call (oldest first); never blocks.

        Each is a dict with ``weights_version``, ``learner_step``, ``frames`` (the run's
        frames when those weights were published), ``mean_return``,
        ``mean_x_pos``, ``median_x_pos``, ``max_x_pos``, ``flag_rate``, ``mean_length``,
        ``episodes``, ``greedy_x_pos``, ``greedy_flag`` and ``greedy_return`` (the greedy episode), ``epsilon``,
        ``best_return``, ``new_best`` (bool), ``video`` (path of the best video when this
        evaluation produced it, else None), ``eval_s`` (wall
        seconds), ``cpu_s`` (CPU seconds of this process; a new best's encoding runs in an
        ffmpeg child, not counted) and ``time`` (Unix time).
        """
        self._drain()
        if self._hold is not None and self.process is not None and self.process.exitcode is not None:
            self._release_hold()  # it died: training must not wait for it any longer
        results, self._pending = self._pending, []
        return results

    def _release_hold(self) -> None:
        if self._hold is not None:
            self._hold.close()
            self._hold = None

    def _drain(self) -> None:
        """Move what the queue holds into the results kept for :meth:`poll` (never blocks)."""
        while self._queue is not None:
            try:
                self._pending.append(self._queue.get_nowait())
            except queue.Empty:
                return
            except (EOFError, OSError, ValueError):  # queue closed or the child died mid-write
                return

    def request_final(self) -> None:
        """Ask for a final evaluation of the last weights published, after which the
        process exits. Call it before the weights block's stop flag is set: from then on
        the evaluator ignores that flag (it stops the collectors, not the final evaluation)."""
        if self._final is not None:
            self._final.set()

    def finish(self, timeout_s: float, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Wait up to ``timeout_s`` for the final evaluation (see :meth:`request_final`) and
        the process's exit, keeping its results for :meth:`poll`; ``give_up`` (a Ctrl-C)
        ends the wait early. Returns whether the process finished by itself; call
        :meth:`stop` after it either way."""
        process = self.process
        if process is None or self._final is None or not self._final.is_set():
            return False
        self._wait_for_exit(process, timeout_s, give_up)
        self._drain()  # what it wrote just before it exited
        return not process.is_alive()

    def _wait_for_exit(
        self, process: mp.process.BaseProcess, timeout_s: float, give_up: Callable[[], bool] = lambda: False
    ) -> None:
        """Join the process for up to ``timeout_s`` (or until ``give_up()``), draining the
        queue meanwhile so that a result in the pipe never keeps the child from exiting."""
        deadline = time.monotonic() + timeout_s
        while process.is_alive() and time.monotonic() < deadline and not give_up():
            self._drain()
            process.join(0.1)

    def stop(self, timeout_s: float = 10) -> None:
        """Ask the process to finish, wait up to ``timeout_s``, then terminate/kill it.

        Results that arrive meanwhile are kept for the next :meth:`poll`. Safe to call
        more than once, and before :meth:`start`.
        """
        process = self.process
        if process is None or self._stop is None or self._queue is None:
            return  # never started, or already stopped
        self._stop.set()
        self._wait_for_exit(process, timeout_s)
        if process.is_alive():
            process.terminate()
            process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join(2.0)
        self._release_hold()
        self._drain()
        self._queue.close()
        self._queue.join_thread()
        self._queue = None

    def progress(self) -> dict[str, float]:
        """Agent steps, CPU and wall seconds of evaluating so far, as they go
        (:mod:`~pipeline.run.evaluator.progress`; NaN before :meth:`start`)."""
        return read_progress(self._progress)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return None if self.process is None else self.process.exitcode
