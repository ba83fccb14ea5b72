"""The learner process: one asyncio event loop running the whole training system.

Tasks on the loop (uvloop when installed):

- consolidator: drains the collectors' ring slots into the replay memory;
- train loop: samples batches and runs learner updates under the replay-ratio limiter,
  publishing weights and epsilon every epoch (``updates_per_epoch`` updates);
- monitor: every few seconds, reads every counter and shows/logs/writes them;
- supervisor: restarts collectors that die or hang; periodic checkpoints.

Beside the collectors, an evaluator process (:mod:`pipeline.run.evaluator`, when
``eval_interval_frames > 0``) plays the evaluation protocol with the published weights every
``eval_interval_frames`` emulator frames; the monitor tick collects its results without blocking and shows
them as the ``eval_*`` gauges (table, CSV, TensorBoard).

The startup (:func:`~pipeline.run.trainer.startup.open_run`) compiles and warms up the
network before the collectors start; a Ctrl-C or SIGTERM at any moment of it stops the
run (:class:`~pipeline.run.trainer.interrupts.StartupInterrupts`).

Shutdown (total frames reached, Ctrl-C, SIGTERM): collectors are asked to stop through
the weights block, a final checkpoint, the replay and ``summary.json`` are written
(:mod:`~pipeline.run.trainer.shutdown`), and the run's release stack releases what the startup
created: every shared-memory segment is unlinked whatever failed. A second Ctrl-C exits
at once (segments are still unlinked first).

A failed periodic write (a checkpoint, a frame mark, a metrics row: a full disk) is
reported once and the run goes on with its last good checkpoint: supervision and the
stop conditions never depend on a write (:mod:`~pipeline.run.trainer.write_failures`). A task
that fails for any other reason stops the run with one clear error, never silently.

The modules beside it, by role: the package docstring (:mod:`pipeline.run.trainer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from config import Config
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.keys import COUNTER_KEYS, LEARNER_PHASES, CounterKey, LearnerPhase
from pipeline.run.monitor.monitor import Snapshot
from pipeline.run.pacing import epsilon_at
from pipeline.run.trainer import snapshots
from pipeline.run.trainer.collection import CollectionBackend
from pipeline.run.trainer.interrupts import StartupInterrupts
from pipeline.run.trainer.pieces import TrainingError, run_event_loop, save_replay
from pipeline.run.trainer.publishing import publish_weights
from pipeline.run.trainer.resources import RunResources
from pipeline.run.trainer.saving import SaveSchedule
from pipeline.run.trainer.shutdown import drain, final_monitor_row, finish_evaluations, save_final, write_summary
from pipeline.run.trainer.startup import open_run
from pipeline.run.trainer.thread_handover import HandoverWatch
from pipeline.run.trainer.write_failures import WriteFailures, short_reason

logger = logging.getLogger("mario.trainer")


class Trainer:
    def __init__(
        self,
        cfg: Config,
        *,
        sources: dict[str, str] | None = None,
        throttle: bool = True,
        train: bool = True,
        time_limit_s: float | None = None,
        on_snapshot: Callable[[Snapshot, Trainer], None] | None = None,
        collection: CollectionBackend | None = None,
    ) -> None:
        """``train=False`` runs collection only (benchmarks); ``throttle=False`` lets the
        consolidator drain regardless of the replay ratio; ``time_limit_s`` stops the run
        after that many seconds of collection; ``on_snapshot(snapshot, trainer)`` sees
        every monitor snapshot taken while the run is going (the benchmark's window; it may
        call :meth:`request_stop`); ``collection`` runs the collectors elsewhere (the Ray
        backend) instead of as this machine's processes."""
        self.cfg = cfg
        self.collection = collection
        self.time_limit_s = time_limit_s
        self.on_snapshot = on_snapshot
        self.sources = sources or {}
        self.train_enabled = train
        self.throttle = throttle
        self._resources: RunResources | None = None  # what the startup built, once it has
        self.stop_event: asyncio.Event | None = None
        self.stop_reason = ""
        self.counters: dict[CounterKey, int] = dict.fromkeys(COUNTER_KEYS, 0)
        self.learner_ns: dict[LearnerPhase, int] = dict.fromkeys(LEARNER_PHASES, 0)
        self.startup: dict[str, float] = {}
        self._sigint_count = 0
        self._t0 = time.monotonic()
        self.final_checkpoint: Path | None = None
        self.evaluations = Evaluations()
        self.fatal = ""  # why the run had to end (a collector crash loop), "" when it ended normally
        self.final_error = ""  # why the final checkpoint could not be written, "" when it was
        self.final_evaluation = False  # whether the shutdown waits for an evaluation of the last weights
        self.interrupts = StartupInterrupts()
        self.write_failures = WriteFailures()
        self.saves = SaveSchedule(cfg, self.write_failures)

    @property
    def resources(self) -> RunResources:
        """What the run holds (learner, replay, shared memory, monitor, run directory...)."""
        if self._resources is None:
            raise RuntimeError("the run has not started")
        return self._resources

    # -- counters -------------------------------------------------------------------------
    def total(self, key: CounterKey) -> int:
        """This process's count plus the resumed checkpoint's."""
        return self.resources.resumed[key] + self.counters[key]

    def _collector_totals(self) -> None:
        self.counters.update(self.resources.collector_counts())

    def _insert(self, stream: int, records: np.ndarray) -> None:
        self.resources.replay.add(stream, records)
        self.counters["records"] += len(records)

    def _publish(self) -> None:
        t = time.perf_counter_ns()
        probe_ns = publish_weights(
            self.resources,
            step=self.total("updates"),
            epsilon=self.epsilon(),
            frames=self.total("frames"),
            batch_size=self.cfg.batch_size,
        )
        self.learner_ns["probe"] += probe_ns  # the publish phase counts the rest, calibration included
        self.learner_ns["publish"] += time.perf_counter_ns() - t - probe_ns

    def epsilon(self) -> float:
        return epsilon_at(self.cfg, self.total("frames"))

    # -- tasks ----------------------------------------------------------------------------
    async def _consolidate(self) -> None:
        assert self.stop_event is not None
        res = self.resources
        while not self.stop_event.is_set():
            t = time.perf_counter_ns()
            budget = res.limiter.insert_budget(res.replay.inserted, self.counters["samples"]) if self.throttle else None
            consumed = res.consolidator.poll(budget)  # budget 0 still reads episode summaries
            self.learner_ns["consolidate"] += time.perf_counter_ns() - t
            await asyncio.sleep(0 if consumed else 0.001)

    async def _train(self) -> None:
        cfg, stop, res = self.cfg, self.stop_event, self.resources
        assert stop is not None
        replay, learner = res.replay, res.learner
        batch = cfg.batch_size
        while not stop.is_set():
            ready = res.limiter.can_sample(replay.inserted, self.counters["samples"], batch)
            if not ready or not replay.can_sample(batch):
                t = time.perf_counter_ns()
                await asyncio.sleep(0.002)
                self.learner_ns["wait"] += time.perf_counter_ns() - t
                continue
            t0 = time.perf_counter_ns()
            sample = replay.sample(batch)
            t1 = time.perf_counter_ns()
            # An update that copies the target re-estimates the statistics on these first.
            learner.update(sample, res.calibration.for_next_update())
            t2 = time.perf_counter_ns()
            self.learner_ns["sample"] += t1 - t0
            self.learner_ns["update"] += t2 - t1
            if "first update" not in self.startup:
                self.startup["first update"] = time.monotonic() - self._t0
            self.counters["samples"] += batch
            self.counters["updates"] += 1
            if self.counters["updates"] % cfg.updates_per_epoch == 0:
                self.counters["epochs"] += 1
                self._publish()  # every epoch: the collectors act with weights at most an epoch old
            await asyncio.sleep(0)  # let the consolidator run between updates

    async def _watch(self) -> None:
        """Supervisor, stop conditions, epsilon and periodic checkpoints (twice a second)."""
        cfg, stop, res = self.cfg, self.stop_event, self.resources
        assert stop is not None
        while not stop.is_set():
            res.supervisor.check()
            if res.supervisor.fatal:
                self.fatal = res.supervisor.fatal
                self.request_stop(self.fatal)
                break
            self._collector_totals()
            if "first transition" not in self.startup and self.counters["records"]:
                # Seconds since collectors were started (the learner's warm-up is separate).
                self.startup["first transition"] = time.monotonic() - self._t0
            res.weights.epsilon = self.epsilon()
            await self.keep_due_mark()  # before the stop check: the last mark counts
            if cfg.total_frames and self.total("frames") >= cfg.total_frames:
                if self.evaluations.evaluator is not None:  # the last weights evaluated, asked
                    self._publish()  # before the stop flag, which the evaluator would obey
                    self.final_evaluation = self.evaluations.request_final()
                self.request_stop(f"reached {cfg.total_frames} frames")
                break
            if self.time_limit_s is not None and time.monotonic() - self._t0 >= self.time_limit_s:
                self.request_stop(f"ran {self.time_limit_s:.0f} s")
                break
            if self.saves.checkpoint_due():
                await self.saves.checkpoint(res, self._totals())
            if self.train_enabled:
                self.saves.save_replay_if_due(res)
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except TimeoutError:
                pass
        # A stop just after the frames passed a mark keeps it: a resume goes on from the next.
        self._collector_totals()
        await self.keep_due_mark()

    async def _monitor(self) -> None:
        assert self.stop_event is not None
        res = self.resources
        # A CPU learner training beside local collectors takes threads while they stall.
        local_cpu = self.train_enabled and res.device.type == "cpu" and res.collection is None
        await snapshots.show_snapshots(
            self.stop_event,
            self.cfg.monitor_interval_s,
            self.snapshot,
            res.monitor,
            handover=HandoverWatch.for_run(self.cfg, res.num_collectors) if local_cpu else None,
            on_snapshot=None if self.on_snapshot is None else lambda snapshot: self.on_snapshot(snapshot, self),
            write_failures=self.write_failures,
            run_root=res.paths.root,
        )

    # -- evaluator ------------------------------------------------------------------------
    def _poll_evaluations(self, *, stopping: bool) -> None:
        res = self.resources
        log_path = res.paths.logs / "evaluator.log"
        self.evaluations.poll(res.monitor, stopping=stopping, log_path=log_path, frames=float(self.total("frames")))

    # -- monitor snapshot -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self._collector_totals()
        self._poll_evaluations(stopping=self.stop_event is not None and self.stop_event.is_set())
        return snapshots.take_snapshot(
            self.resources,
            time_s=time.monotonic() - self._t0,
            totals={key: self.total(key) for key in COUNTER_KEYS},
            learner_ns=self.learner_ns,
            epsilon=self.epsilon(),
            ring_capacity=self.cfg.ring_capacity,
            evaluations=self.evaluations,
            startup=self.startup,
        )

    # -- saves ----------------------------------------------------------------------------
    def _totals(self) -> dict[CounterKey, int]:
        """Every counter of the run, resumed ones included, the collectors' read now."""
        self._collector_totals()
        return {k: self.total(k) for k in COUNTER_KEYS}

    async def keep_due_mark(self) -> Path | None:
        """The mark the frames passed, unless the run failed (:class:`SaveSchedule`)."""
        if self.fatal or not self.saves.mark_due(self.total("frames")):
            return None  # twice a second: the collectors' counters are read only for a mark
        return await self.saves.keep_due_mark(self.resources, self._totals())

    # -- run ------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if self.stop_event is not None and not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()
        if self._resources is not None:
            self._resources.weights.request_stop()

    def _on_sigint(self) -> None:
        self._sigint_count += 1
        if self._sigint_count >= 2:
            # Second Ctrl-C: leave now, but never leave segments behind.
            self.resources.weights.request_stop()
            self.resources.release_shared_memory()
            os._exit(130)
        self.request_stop("interrupted (Ctrl-C again to exit at once)")

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        res = self.resources
        self.stop_event = asyncio.Event()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        loop.add_signal_handler(signal.SIGTERM, lambda: self.request_stop("terminated"))
        self._t0 = time.monotonic()
        self._publish()
        res.supervisor.start_all()
        res.monitor.announce(f"startup: {res.num_collectors} collector process(es) starting on {self.cfg.env_id}")
        if self.train_enabled and self.cfg.eval_interval_frames > 0:
            frames = self.total("frames")
            self.evaluations.start(self.cfg, res.paths.root, res.weights_segment.name, res.monitor, frames)
        tasks = [
            asyncio.create_task(self._consolidate(), name="consolidator"),
            asyncio.create_task(self._watch(), name="supervisor"),
            asyncio.create_task(self._monitor(), name="monitor"),
        ]
        if self.train_enabled:
            tasks.append(asyncio.create_task(self._train(), name="train loop"))
        for task in tasks:
            task.add_done_callback(self._task_ended)
        if self.interrupts.received:  # a Ctrl-C of the startup that was swallowed on its way
            self.request_stop("interrupted")
        try:
            await self.stop_event.wait()
        finally:
            res.weights.request_stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            res.consolidator.poll()  # what was committed before the stop
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """A task that fails ends the run with one clear error (after the final checkpoint),
        instead of leaving it running without, say, its supervisor and stop conditions."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        logger.error("the learner's %s task failed", task.get_name(), exc_info=exc)
        if not self.fatal:
            self.fatal = f"the learner's {task.get_name()} task failed ({short_reason(exc)}); its traceback is above"
        self.request_stop(self.fatal)

    def _shutdown(self) -> None:
        """Collectors stopped, the final evaluation waited for, the rings drained, the final
        checkpoint, replay and ``summary.json`` written, and the monitor's last row."""
        res = self.resources
        res.weights.request_stop()
        res.supervisor.stop()
        finish_evaluations(self.evaluations, final=self.final_evaluation)
        if self.evaluations.evaluator is not None:
            self._poll_evaluations(stopping=True)  # what it sent meanwhile
        try:
            drain(res.consolidator)
            payload, frames, score = self.saves.checkpoint_args(res, self._totals())
            root = res.paths.root
            self.final_checkpoint, self.final_error = save_final(
                res.checkpoints, payload, frames, score, run_root=root, stop_reason=self.stop_reason
            )
            if self.final_checkpoint is not None:
                self.saves.last_checkpoint_t = time.monotonic()
            if self.train_enabled:
                save_replay(res.replay, res.paths.checkpoints)
            write_summary(root, self._summary())
        finally:
            final_monitor_row(res.monitor, self.snapshot, self.write_failures, res.paths.root)

    def _summary(self) -> dict[str, Any]:
        """summary.json: what this process did, for benchmarks and scripts."""
        return snapshots.run_summary(
            self.resources,
            elapsed_s=time.monotonic() - self._t0,
            stop_reason=self.stop_reason,
            startup=self.startup,
            totals={k: self.total(k) for k in COUNTER_KEYS},
            this_process=self.counters,
            learner_ns=self.learner_ns,
            final_checkpoint=self.final_checkpoint,
            evaluations=self.evaluations,
        )

    def run(self) -> int:
        """Run until done or stopped; always stop collectors, checkpoint and unlink."""
        releases = contextlib.ExitStack()  # what the startup created, released last first
        try:
            # From the first second: a Ctrl-C or SIGTERM of the startup is never lost (the
            # event loop takes both signals over once it runs).
            with self.interrupts:
                self._resources = open_run(
                    self.cfg,
                    releases,
                    sources=self.sources,
                    collection=self.collection,
                    train=self.train_enabled,
                    interrupts=self.interrupts,
                    write_failures=self.write_failures,
                    insert=self._insert,
                )
                if self._resources.warmup_s is not None:
                    self.startup["compile+warm-up"] = self._resources.warmup_s
                self.saves.start(self._resources.resumed["frames"])
                run_event_loop(self._main())
        finally:
            with releases:  # monitor, shared memory, lock: whatever the shutdown did
                if self._resources is not None:
                    self._shutdown()
        # After the final checkpoint (or its attempt): nothing learned is lost.
        errors = [error for error in (self.fatal, self.final_error) if error]
        if errors:
            raise TrainingError("; ".join(errors))
        return 0
