"""The Trainer's startup before its event loop and its shutdown after it.

:class:`TrainerLifecycle` is the half of :class:`~pipeline.run.trainer.Trainer` that
creates and releases things; the other half (the event loop's tasks) uses them:

- :meth:`~TrainerLifecycle.setup`: the resume checkpoint, the run directory and its
  lock, the learner (compiled and warmed up), the replay memory, then the shared memory
  (rings and weights block) and the collectors' supervisor, in that order, so that a
  failure leaves nothing behind and compilation does not compete with collectors.
- :meth:`~TrainerLifecycle.shutdown`: collectors stopped, the rings drained, the final
  checkpoint, replay and ``summary.json`` written, the monitor closed, and every
  shared-memory segment unlinked whatever failed before.

:class:`StartupInterrupts` keeps a Ctrl-C (or SIGTERM) of the startup from being lost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

import envs
from config import Config
from pipeline.common.files import atomic_write
from pipeline.learning.checkpoint import CheckpointError
from pipeline.learning.flat_state import state_numel
from pipeline.run.collection import CollectionBackend
from pipeline.run.collector import CollectorArgs
from pipeline.run.consolidator import Consolidator
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.keys import COUNTER_KEYS, CounterKey, LearnerPhase
from pipeline.run.monitor.monitor import Monitor
from pipeline.run.pacing import RateLimiter, next_mark
from pipeline.run.preflight import RunLock
from pipeline.run.run_checkpoints import RunCheckpoints, checkpoint_payload, resume_from, rolling_return
from pipeline.run.snapshots import run_summary
from pipeline.run.startup import (
    RunPaths,
    TrainingError,
    build_learner,
    build_replay,
    changed_on_resume,
    check_machine_and_lock,
    load_resume_checkpoint,
    new_run_root,
    resolve_device,
    restore_replay,
    save_replay,
    saved_replay_problem,
    seed_and_threads,
    warm_up_learner,
)
from pipeline.run.steadiness_watch import SteadinessWatch, attach_steadiness
from pipeline.run.supervisor import Supervisor
from pipeline.run.write_failures import WriteFailures, free_space, short_reason
from pipeline.transport import ring as R
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock, block_bytes

logger = logging.getLogger("mario.trainer")
SLACK_BATCHES = 4  # how far (in batches of samples) the learner may fall behind the replay ratio


class StartupInterrupts:
    """Ctrl-C and SIGTERM while a run starts: remembered, and raised as KeyboardInterrupt.

    Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread happens
    to be. During the learner's compile that is deep inside torch, where it can be lost:
    raised inside a finalizer it is printed and dropped, and a compile that fails because
    the same Ctrl-C killed the C++ compiler looks like a broken compiler (the learner falls
    back to eager and carries on). The flag set here survives all of that: the Trainer
    checks it once the warm-up returns and again when its event loop takes the signals
    over, so a Ctrl-C at any moment of the startup stops the run.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received = ""  # the signal's name, once one came
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StartupInterrupts:
        if threading.current_thread() is threading.main_thread():  # handlers live in the main thread only
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if a signal came, even one whose interrupt was swallowed."""
        if self.received:
            raise KeyboardInterrupt


class WaitInterrupts(StartupInterrupts):
    """Ctrl-C and SIGTERM while the shutdown waits for something optional (the final
    evaluation): remembered, never raised, so the wait ends and the shutdown goes on to
    the final checkpoint instead of being torn out of it by a KeyboardInterrupt."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name


class TrainerLifecycle:
    """Setup and shutdown of a :class:`~pipeline.run.trainer.Trainer` (its attributes are set
    there; its counters, ``total`` and ``snapshot`` are used here)."""

    cfg: Config
    counters: dict[CounterKey, int]
    base: dict[CounterKey, int]
    learner_ns: dict[LearnerPhase, int]
    collection: CollectionBackend | None
    sources: dict[str, str]
    train_enabled: bool
    stop_reason: str
    startup: dict[str, float]
    ring: R.TransitionRing | None
    weights: WeightsBlock | None
    supervisor: Supervisor | None
    monitor: Monitor | None
    consolidator: Consolidator | None
    evaluations: Evaluations
    steadiness: SteadinessWatch | None
    lock: RunLock | None
    interrupts: StartupInterrupts
    write_failures: WriteFailures
    hooks: contextlib.ExitStack
    final_checkpoint: Path | None
    final_error: str
    final_evaluation: bool
    _last_checkpoint_t: float
    _next_mark: int
    _t0: float

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        if cfg.resume:
            # Read and checked before anything is created: a bad file must leave nothing behind.
            self.resume_path, root, self._resume_state = load_resume_checkpoint(cfg)
        else:
            self.resume_path = None
            root = new_run_root(cfg)
        self.num_actions = envs.num_actions(cfg.env_id, cfg.action_set)
        self.lock = check_machine_and_lock(cfg, root, self.num_actions)  # before anything is created
        self.paths = RunPaths(root)
        self.paths.make()
        if not cfg.resume:
            # A fresh run in a reused directory must not start from an earlier run's frontier.
            shutil.rmtree(self.paths.frontier, ignore_errors=True)
        self.hooks.enter_context(self.write_failures.writer_threads(self.paths.root))
        self.checkpoints = RunCheckpoints(self.paths.checkpoints, cfg.keep_checkpoints)
        self.checkpoints.last_good = self.resume_path
        (self.paths.root / "config.json").write_text(
            json.dumps({"config": cfg.to_dict(), "sources": self.sources}, indent=2)
        )
        self.tag = segments.run_tag(self.paths.root)
        removed = segments.remove_stale_segments()
        if removed:
            logger.warning(
                "removed %d shared-memory segment(s) left by a dead run: %s", len(removed), ", ".join(removed)
            )

        self.device = resolve_device(cfg.device)
        replay_device = self.device if cfg.replay_device == "auto" else resolve_device(cfg.replay_device)
        seed_and_threads(cfg)
        self.learner = build_learner(cfg, self.num_actions, self.device)
        self.num_collectors = cfg.num_processes if self.collection is None else self.collection.prepare(cfg)
        self.num_streams = self.num_collectors * cfg.envs_per_collector  # one ring slot per environment
        restore = self.resume_path is not None and cfg.save_replay
        if restore and (problem := saved_replay_problem(cfg, self.num_streams, self.paths.checkpoints)):
            # Said from the header, before the memory is allocated and the learner compiled.
            logger.warning("could not restore the replay (%s): resuming with an empty replay memory", problem)
            restore = False
        self.replay = build_replay(cfg, self.num_streams, replay_device)
        restored = self.replay.inserted if restore and restore_replay(self.replay, self.paths.checkpoints) else 0
        self.steadiness = attach_steadiness(self.learner, self.replay, cfg)
        # The consolidator's budget paces inserts smoothly, so a few batches of slack are
        # enough; the old 2,048 samples showed as a ratio of 3.06 of 4 in a 20 s window.
        slack = SLACK_BATCHES * cfg.batch_size
        # The ratio counts from what this process inserts: a restored replay is warm-up
        # already done, not a debt of updates to pay at once on old data.
        self.limiter = RateLimiter(cfg.replay_ratio, max(cfg.learning_starts, restored), slack)
        if self.resume_path is not None:
            self.base, self.checkpoints.best_return = resume_from(self._resume_state, self.resume_path, self.learner)
            changes = changed_on_resume(cfg, dict(self._resume_state["config"]))
            if changes:
                logger.warning("resuming with settings that differ from the checkpoint's: %s", "; ".join(changes))
            logger.info(
                "resumed from %s at %d frames, %d updates", self.resume_path, self.base["frames"], self.base["updates"]
            )

        # The monitor comes up first, so the user sees startup progress from the first second.
        self.monitor = Monitor(
            self.paths.root, mode=cfg.monitor, interval_s=cfg.monitor_interval_s, resume=self.resume_path is not None
        )
        self.monitor.start_display()
        self.monitor.announce(f"run directory {self.paths.root}")
        if cfg.mark_interval_frames:
            self._next_mark = next_mark(self.base["frames"], cfg.mark_interval_frames)
        if self.train_enabled:
            self.startup["compile+warm-up"] = warm_up_learner(self.learner, cfg, self.device, self.monitor)
        self.interrupts.check()  # a Ctrl-C during the warm-up that torch swallowed
        self._create_shared_memory()

    def _create_shared_memory(self) -> None:
        cfg = self.cfg
        layout = R.RingLayout(self.num_streams, cfg.ring_capacity)
        num_floats = state_numel(self.learner.online.state_dict())
        if self.collection is not None:  # the rings live on the collectors' nodes
            self._open_collection(num_floats)
            return
        try:  # the pages are reserved now: a /dev/shm filled since the preflight fails here
            self.ring_segment = segments.create_segment(segments.segment_name(self.tag, "ring"), layout.total_bytes)
            self.weights_segment = segments.create_segment(
                segments.segment_name(self.tag, "weights"), block_bytes(num_floats)
            )
        except segments.SegmentSpaceError as exc:
            raise TrainingError(str(exc)) from None
        self.ring = R.TransitionRing.initialise(self.ring_segment.buf, layout)
        self.weights = WeightsBlock.initialise(self.weights_segment.buf, num_floats)
        self.consolidator = Consolidator(self.ring, self._insert)
        # The supervisor watches each collector's home slot (its first).
        home_slots = [self.ring.slots[self._slots_of(i)[0]] for i in range(cfg.num_processes)]
        self.supervisor = Supervisor(home_slots, self._collector_args, heartbeat_timeout_s=cfg.heartbeat_timeout_s)

    def _open_collection(self, num_floats: int) -> None:
        """The learner's own weights block (the evaluator reads it) and the backend's stand-ins."""
        assert self.collection is not None
        try:
            self.weights_segment = segments.create_segment(
                segments.segment_name(self.tag, "weights"), block_bytes(num_floats)
            )
        except segments.SegmentSpaceError as exc:
            raise TrainingError(str(exc)) from None
        self.weights = WeightsBlock.initialise(self.weights_segment.buf, num_floats)
        self.ring, self.supervisor, self.consolidator = self.collection.open(
            run_tag=self.tag, num_floats=num_floats, log_dir=self.paths.logs, weights=self.weights, insert=self._insert
        )

    def _slots_of(self, collector: int) -> tuple[int, ...]:
        k = self.cfg.envs_per_collector
        return tuple(range(collector * k, (collector + 1) * k))

    def _collector_args(self, slot: int) -> CollectorArgs:
        assert self.ring_segment is not None and self.weights_segment is not None
        return CollectorArgs(
            slot=slot,
            config=self.cfg,
            ring_name=self.ring_segment.name,
            weights_name=self.weights_segment.name,
            parent_pid=os.getpid(),
            log_path=str(self.paths.logs / f"collector-{slot}.log"),
            slots=self._slots_of(slot),
            frontier_path=str(self.paths.frontier / f"collector-{slot}.npz"),
        )

    def _insert(self, stream: int, records: np.ndarray) -> None:
        self.replay.add(stream, records)
        self.counters["records"] += len(records)

    # -- checkpoints ----------------------------------------------------------------------
    def calibrate_statistics(self) -> bool:
        """Precise BN: re-estimate the BatchNorm statistics for the weights as they are now.

        Every copy of the weights that is played gets them: a publish, a frame mark and
        every checkpoint (``eval`` and ``play`` load those). Between publishes the weights
        move on while the statistics stay those of the last calibration, and a copy saved
        with them does not play what the collectors play: a 1-1 mark saved between two
        publishes played a mean x_pos of 769, the same weights with their statistics
        re-estimated 1,769-1,874 (docs/learning.md). A new run's first publish, or a
        resumed run's whose replay was not restored, has no states to re-estimate from and
        keeps what it has.
        Returns whether it re-estimated (at most once per update count).
        """
        return self.replay.can_sample(self.cfg.batch_size) and self.learner.calibrate()

    def _checkpoint_args(self) -> tuple[dict, int, float | None]:
        self._collector_totals()
        self.calibrate_statistics()
        totals = {k: self.total(k) for k in COUNTER_KEYS}
        payload = checkpoint_payload(self.learner, totals, self.cfg, self.num_actions)
        score = rolling_return(self.consolidator.episodes if self.consolidator is not None else ())
        return payload, totals["frames"], score

    def save_final(self) -> Path | None:
        """The final checkpoint (and best.pt when due). A failure is kept in ``final_error``
        (one line, raised by ``run`` once everything is released), not raised here: the
        replay, summary and shared memory are still to be dealt with."""
        payload, frames, score = self._checkpoint_args()
        path = self.checkpoints.path_for(frames)
        try:
            self.checkpoints.save(payload, frames, score)
        except (CheckpointError, OSError) as exc:
            failure = self.checkpoints.write_failure("the final checkpoint", exc, payload)
            if self.checkpoints.last_good != path:
                self.final_error = f"{failure}; resume from it with --resume {self.paths.root} once there is space"
                return None
            logger.warning(failure)  # only best.pt failed: the final checkpoint itself is on disk
        self._last_checkpoint_t = time.monotonic()
        self.final_checkpoint = path
        logger.info("final checkpoint: %s (%s)", path, self.stop_reason or "stopped")
        return path

    # -- shutdown -------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self.weights is not None:
            self.weights.request_stop()
        if self.supervisor is not None:
            self.supervisor.stop()
        self._finish_evaluations()
        try:
            if self.ring is not None and getattr(self, "learner", None) is not None:
                if self.consolidator is not None:
                    # Collectors are stopped: drain everything they committed (a pass takes
                    # at most max_records_per_slot per slot, so loop until a pass is empty).
                    while self.consolidator.poll():
                        pass
                self.save_final()
                if self.cfg.save_replay and self.train_enabled:
                    save_replay(self.replay, self.paths.checkpoints)
                self._write_summary()
        finally:
            try:
                self._close_monitor()
            finally:  # segments and the lock go whatever failed before
                self._release_shared_memory()
                if self.lock is not None:
                    self.lock.release()
                self.hooks.close()

    def _finish_evaluations(self) -> None:
        """Wait for the final evaluation when one was asked for (the collectors are stopped,
        so it has the CPU), stop the evaluator, and report what it sent meanwhile."""
        if self.evaluations.evaluator is None:
            return
        if self.final_evaluation:
            timeout_s = self.cfg.eval_final_timeout_s
            logger.info("final evaluation of the last weights (waiting up to %g s; Ctrl-C skips it)", timeout_s)
            with WaitInterrupts() as interrupts:
                outcome = self.evaluations.finish(timeout_s, give_up=lambda: bool(interrupts.received))
            logger.info("final evaluation: %s", outcome)
        self.evaluations.stop(timeout_s=10)
        self.evaluations.poll(
            self.monitor,
            stopping=True,
            log_path=self.paths.logs / "evaluator.log",
            frames=float(self.total("frames")),
        )

    def _close_monitor(self) -> None:
        if self.monitor is None:
            return
        try:
            if self.ring is not None:
                self.monitor.update(self.snapshot(), status="stopped")
        except OSError as exc:  # metrics.csv or TensorBoard on a full disk: said once for the whole run
            self.write_failures.metrics_failed(self.paths.root, exc)
        finally:
            try:
                self.monitor.close()
            except OSError as exc:
                self.write_failures.metrics_failed(self.paths.root, exc)

    def _write_summary(self) -> None:
        """summary.json: what this process did, for benchmarks and scripts."""
        assert self.supervisor is not None
        summary = run_summary(
            elapsed_s=time.monotonic() - self._t0,
            stop_reason=self.stop_reason,
            startup=self.startup,
            totals={k: self.total(k) for k in COUNTER_KEYS},
            this_process=self.counters,
            supervisor=self.supervisor,
            ring=self.ring,
            consolidator=self.consolidator,
            replay_inserted=self.replay.inserted,
            learner=self.learner,
            learner_ns=self.learner_ns,
            final_checkpoint=self.final_checkpoint,
            evaluations=self.evaluations,
        )
        if self.collection is not None:
            summary["cluster"] = self.collection.summary()
        path = self.paths.root / "summary.json"
        try:
            with atomic_write(path, "w") as handle:  # never a truncated summary on a full disk
                handle.write(json.dumps(summary, indent=2))
        except OSError as exc:
            logger.warning("could not write %s (%s; %s)", path, short_reason(exc), free_space(path.parent))

    def _release_shared_memory(self) -> None:
        if self.ring is not None:
            self.ring.close()
        if self.weights is not None:
            self.weights.close()
        if self.supervisor is not None:
            self.supervisor.slots = []
        self.consolidator = None
        if self.collection is not None:
            self.collection.close()
        segments.release(self.ring_segment, unlink=True)
        segments.release(self.weights_segment, unlink=True)
        self.ring_segment = self.weights_segment = None
        self.ring = None
