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

Startup order matters (:func:`~pipeline.run.trainer.startup.open_run`): the network is
compiled and warmed up *before* collectors start (so compilation does not compete with
them for the CPU, and its time is reported on its own); then the initial weights are
published, the collectors start, and the monitor's clock starts. A Ctrl-C or SIGTERM at
any moment of the startup (the compile included) stops the run
(:class:`~pipeline.run.trainer.interrupts.StartupInterrupts`). What the run holds meanwhile is one
:class:`~pipeline.run.trainer.resources.RunResources`.

Shutdown (total frames reached, Ctrl-C, SIGTERM): collectors are asked to stop through
the weights block, a final checkpoint, the replay and ``summary.json`` are written
(:mod:`~pipeline.run.trainer.shutdown`), and the run's release stack releases what the startup
created: every shared-memory segment is unlinked whatever failed. A second Ctrl-C exits
at once (segments are still unlinked first).

A failed periodic write (a checkpoint, a frame mark, a metrics row: a full disk) is
reported once and the run goes on with its last good checkpoint: supervision and the
stop conditions never depend on a write (:mod:`~pipeline.run.trainer.write_failures`). A task
that fails for any other reason stops the run with one clear error, never silently.

Beside it: :mod:`~pipeline.run.trainer.pieces` (run directory, resume, learner, replay),
:mod:`~pipeline.run.pacing` (replay ratio, epsilon), :mod:`~pipeline.run.trainer.calibration`
(precise-BN states), :mod:`~pipeline.run.trainer.snapshots` (monitor snapshot, summary.json),
:mod:`~pipeline.run.evaluator.evaluations` and :mod:`~pipeline.run.trainer.checkpoints`.
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
from pipeline.learning.flat_state import flatten_state
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.keys import COUNTER_KEYS, LEARNER_PHASES, CounterKey, LearnerPhase
from pipeline.run.monitor.monitor import Snapshot
from pipeline.run.pacing import epsilon_at
from pipeline.run.trainer import snapshots
from pipeline.run.trainer.collection import CollectionBackend
from pipeline.run.trainer.interrupts import StartupInterrupts
from pipeline.run.trainer.pieces import TrainingError, run_event_loop, save_replay
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
        res = self.resources
        t = time.perf_counter_ns()
        if res.replay.can_sample(self.cfg.batch_size):
            res.calibration.calibrate()  # the statistics the acting copies will use
            t_probe = time.perf_counter_ns()
            res.steadiness.at_publish(self.total("updates"))
            probe_ns = time.perf_counter_ns() - t_probe
            self.learner_ns["probe"] += probe_ns
            t += probe_ns  # the publish phase counts the rest (the calibration included)
        flat, step, epsilon = flatten_state(res.learner.publishable_state()), self.total("updates"), self.epsilon()
        version = res.weights.publish(flat, learner_step=step, epsilon=epsilon, frames=int(self.total("frames")))
        if res.collection is not None:
            res.collection.publish(flat, version=version, epsilon=epsilon, learner_step=step)
        self.learner_ns["publish"] += time.perf_counter_ns() - t

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
                self._ask_final_evaluation()  # before the stop flag, which the evaluator would obey
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
        handover = HandoverWatch.for_run(self.cfg, res.num_collectors) if local_cpu else None
        while not self.stop_event.is_set():
            try:
                await asyncio.wait_for(self.stop_event.wait(), timeout=self.cfg.monitor_interval_s)
            except TimeoutError:
                pass
            snapshot = self.snapshot()
            if handover is not None:
                handover.observe(snapshot.time, snapshot.counters)
            running = not self.stop_event.is_set()
            if running and self.on_snapshot is not None:
                self.on_snapshot(snapshot, self)
            try:
                res.monitor.update(snapshot, status="running" if running else "stopping")
            except OSError as exc:  # metrics.csv or TensorBoard on a full disk: shown, not written
                self.write_failures.metrics_failed(res.paths.root, exc)
            else:
                self.write_failures.succeeded("metrics", str(res.monitor.csv_path))

    # -- evaluator ------------------------------------------------------------------------
    def _start_evaluator(self) -> None:
        cfg, res = self.cfg, self.resources
        if not self.train_enabled or cfg.eval_interval_frames <= 0:
            return
        self.evaluations.start(cfg, res.paths.root, res.weights_segment.name, res.monitor, self.total("frames"))

    def _ask_final_evaluation(self) -> None:
        """A run that reached its frames ends with an evaluation of its last weights."""
        if self.evaluations.evaluator is not None:
            self._publish()
            self.final_evaluation = self.evaluations.request_final()

    def _poll_evaluations(self, *, stopping: bool) -> None:
        res = self.resources
        log_path = res.paths.logs / "evaluator.log"
        self.evaluations.poll(res.monitor, stopping=stopping, log_path=log_path, frames=float(self.total("frames")))

    # -- monitor snapshot -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        res = self.resources
        self._collector_totals()
        slots = snapshots.copy_slot_counters(res.ring)
        slots_of = [res.slots_of(i) for i in range(res.num_collectors)]
        collectors = snapshots.collector_rows(slots, slots_of, res.supervisor, res.weights.version)
        episodes = list(res.consolidator.episodes)[-100:]
        gauges = {
            "replay_size": float(len(res.replay)),
            "epsilon": self.epsilon(),
            "weights_version": float(res.weights.version),
            "ring_fill_pct": snapshots.ring_fill_pct(slots, self.cfg.ring_capacity),
            "restarts": float(res.supervisor.restarts),
            "env_errors": float(sum(c.env_errors for c in slots)),
            "collectors_alive": float(res.supervisor.alive()),
            "bad_episode_records": float(res.consolidator.bad_episode_records),
            "poll_gap_ms": 1000.0 * res.consolidator.reset_gap(),
            **snapshots.learning_gauges(res.learner.pop_metrics(), episodes),
        }
        self._poll_evaluations(stopping=self.stop_event is not None and self.stop_event.is_set())
        gauges.update(self.evaluations.gauges())
        gauges.update(res.steadiness.gauges())
        gauges.update(snapshots.process_gauges(collectors, res.device))
        if res.collection is not None:
            gauges.update(res.collection.gauges())
        totals = {key: self.total(key) for key in COUNTER_KEYS}
        return Snapshot(
            time=time.monotonic() - self._t0,
            counters=snapshots.snapshot_counters(totals, slots, self.learner_ns),
            gauges=gauges,
            collectors=collectors,
            startup=dict(self.startup),
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
        self._start_evaluator()
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
            if self.cfg.save_replay and self.train_enabled:
                save_replay(res.replay, res.paths.checkpoints)
            write_summary(root, self._summary())
        finally:
            final_monitor_row(res.monitor, self.snapshot, self.write_failures, res.paths.root)

    def _summary(self) -> dict[str, Any]:
        """summary.json: what this process did, for benchmarks and scripts."""
        res = self.resources
        summary = snapshots.run_summary(
            elapsed_s=time.monotonic() - self._t0,
            stop_reason=self.stop_reason,
            startup=self.startup,
            totals={k: self.total(k) for k in COUNTER_KEYS},
            this_process=self.counters,
            supervisor=res.supervisor,
            ring=res.ring,
            consolidator=res.consolidator,
            replay_inserted=res.replay.inserted,
            learner=res.learner,
            learner_ns=self.learner_ns,
            final_checkpoint=self.final_checkpoint,
            evaluations=self.evaluations,
        )
        if res.collection is not None:
            summary["cluster"] = res.collection.summary()
        return summary

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
                self._started()
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

    def _started(self) -> None:
        res = self.resources
        if res.warmup_s is not None:
            self.startup["compile+warm-up"] = res.warmup_s
        self.saves.start(res.resumed["frames"])
