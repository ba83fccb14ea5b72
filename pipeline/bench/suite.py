"""The benchmark suite: ``python main.py bench``.

Every headline figure is a *ratio* of two things measured side by side in the same
run, because absolute frames/s on a shared machine move with whatever else runs on it.
The parts (``--only NAME`` runs one; a comma-separated list runs several):

``raw``
    One spawned process steps the bare emulator (:class:`envs.mario.MarioEnv`, one NES
    frame per step, random actions of the configured action set), then another steps
    the wrapped env (:func:`envs.make_env` with the config's frame skip, grayscale,
    resize, reward scale and limits) likewise. Frames and agent steps are counted
    separately: one agent step is ``frame_skip`` emulator frames.
``collector``
    ONE real collector (the real :class:`~pipeline.run.trainer.trainer.Trainer`, ``train=False``,
    ``throttle=False``, so the consolidator drains the ring as fast as it fills) with
    epsilon 0 (a schedule at its floor after one frame): the Q-network runs on *every* step, the worst
    case for the collector. It is measured between two runs of the wrapped-env process
    (before and after); ``collector_efficiency = collector / mean(before, after)``.
    Its time split (emulate, preprocess, infer, write, stall, other) comes from the
    phase counters in its ring slot header.
``pipeline``
    ``NUM_PROCESSES`` collectors (at least 2 unless ``--num-processes`` says otherwise)
    with the learner draining but not training, at the *final* exploration epsilon of
    the schedule (``epsilon_end``, 0.05 by default: the network runs on 95% of steps, as
    for the whole run after the decay), against ``NUM_PROCESSES`` independent wrapped-env
    processes running at the same time, before and after.
``consolidator``
    :func:`pipeline.bench.parts_consolidator.bench_consolidator`: flooding producers, the real
    consolidator and replay memory; records/s and MB/s the learner side absorbs.
``learner``
    In a spawned process with the training thread count: updates/s of ``Learner.update``
    alone (batches pre-sampled from a replay memory of synthetic episodes) for eager,
    eager+AMP, compiled and compiled+AMP learners after warm-up, interleaved in rounds so
    drifting machine load hits every variant alike.
``training``
    The whole system training (``Trainer(train=True)``) with a small ``learning_starts``;
    measured for ``--seconds`` after the first update: frames/s, updates/s, replay ratio
    and how the machine's CPU is split between collectors and learner.
``startup``
    From the same training run (``summary.json`` ``startup_s``): compile + warm-up time,
    seconds to the first transition and to the first update.
``evaluator``
    What the in-training evaluator costs collection: the training run without an
    evaluator, then with the evaluator evaluating back to back (the worst case: the
    configured ``eval_interval_frames`` is minutes of training), then without it again, each measured
    for ``max(--seconds, 45)`` seconds (evaluations must finish inside the window); the
    middle run's window opens after the evaluator's first evaluation, so its one-off
    start-up is not counted; ``frames_ratio = with / mean(before, after)``, likewise
    updates/s. At the configured interval the evaluator is busy for one evaluation's
    wall time per interval, so ``frames_ratio_at_interval = 1 - (1 - frames_ratio) x
    wall_s_per_evaluation / eval_interval_s``, where ``eval_interval_s`` is the configured
    ``eval_interval_frames`` at the frames/s measured without the evaluator.
    The evaluator's CPU seconds per evaluation, measured in the middle run, give its
    share of the machine at the configured interval.
``soak``
    Only when asked (``--soak MINUTES`` or ``--only soak``; default 10 minutes): full
    training with a replay memory small enough to fill in the first minute or so, and
    no evaluator (its cost is the evaluator part's); per-minute frames/s and updates/s,
    last minute / first minute after the replay is full, and the learner's RSS growth
    after the replay is full.
``ray``
    Only when asked (``--only ray``; it needs the ``[ray]`` extra): the same collectors
    local, through a node agent on a one-node Ray, local again (``ray_efficiency``), then
    the records/s one agent's pull path carries from flooding producers into a replay
    (:mod:`~pipeline.bench.parts_cluster`).

Every part is bracketed by a :class:`~pipeline.run.machine.load.LoadMeter`, as ``tune``
is: the CPU that other processes used of the cores meanwhile (from /proc/stat) is
printed with the part, and a part that ran beside a quarter of the cores' worth or more
is flagged BUSY (its figures are likely low). A part that finds no steady window says so
in its row; on a busy machine that is the load's doing and not a failure, on a quiet one
it is. The other parts' figures are printed and written to the JSON either way.

``--quick`` shortens every part (and measures fewer learner variants) so the default
suite finishes in about two minutes on a 2-core machine: a smoke run for CI, not a
measurement to quote.

:class:`Suite` runs the parts in order; each part is a ``part_<name>`` method of
:class:`~pipeline.bench.parts_collection.CollectionParts`,
:class:`~pipeline.bench.parts_cluster.ClusterParts` or
:class:`~pipeline.bench.parts_training.TrainingParts`.
"""

from __future__ import annotations

import shutil
import time
import traceback

from pipeline.bench.parts_cluster import ClusterParts
from pipeline.bench.parts_training import TrainingParts
from pipeline.bench.suite_base import PartResult, log
from pipeline.bench.trainer_run import NoSteadyWindow
from pipeline.common.errors import UserError
from pipeline.run.machine.load import LoadMeter


class Suite(ClusterParts, TrainingParts):
    """The whole suite: the parts of ``options.parts``, in order, each into a :class:`PartResult`."""

    def run(self) -> dict[str, PartResult]:
        """Run every chosen part; a part that fails records its error and the rest still run.

        A user error or Ctrl-C ends the suite (the results so far stay in ``self.results``).
        Either way the env pool is closed and the run directories removed (unless
        ``--keep-runs``).
        """
        try:
            for name in self.options.parts:
                log(f"{name} ...")
                started = time.monotonic()
                result = PartResult()
                meter = LoadMeter()
                failure: Exception | None = None
                try:
                    getattr(self, f"part_{name}")(result)
                except (UserError, KeyboardInterrupt):
                    raise
                except Exception as exc:  # noqa: BLE001 - one broken part should not hide the rest
                    failure = exc
                    result.details["traceback"] = traceback.format_exc()
                load = meter.stop()
                if load is not None:
                    result.other_cores, result.busy = round(load.other_cores, 2), load.busy
                if failure is not None:
                    message = f"{type(failure).__name__}: {failure}".splitlines()[0]
                    if isinstance(failure, NoSteadyWindow) and result.busy:
                        result.unmeasured = f"{failure}".splitlines()[0]  # the load's doing, not a failure
                        log(f"{name}: not measured on a busy machine: {result.unmeasured}")
                    else:
                        result.error = message
                        log(f"{name} failed: {result.error}")
                if result.busy:
                    log(f"{name}: other processes used {load.other_cores:.1f} of {load.cores} core(s) meanwhile")
                result.seconds = time.monotonic() - started
                self.results[name] = result
                log(f"{name} done in {result.seconds:.0f} s")
        finally:
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            self._training = None
            if self.options.keep_runs is None:
                shutil.rmtree(self.run_root, ignore_errors=True)
        return self.results
