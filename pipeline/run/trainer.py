"""The learner process: one asyncio event loop running the whole training system.

Tasks on the loop (uvloop when installed):

- consolidator: drains the collectors' ring slots into the replay memory;
- train loop: samples batches and runs learner updates under the replay-ratio limiter,
  publishing weights and epsilon every MODEL_UPDATE_FREQUENCY epochs;
- monitor: every few seconds, reads every counter and shows/logs/writes them;
- supervisor: restarts collectors that die or hang; periodic checkpoints.

Beside the collectors, an evaluator process (:mod:`pipeline.run.evaluator`, when
``eval_interval_frames > 0``) plays the evaluation protocol with the published weights every
``eval_interval_frames`` emulator frames; the monitor tick collects its results without blocking and shows
them as the ``eval_*`` gauges (table, CSV, TensorBoard).

Startup order matters: the network is compiled and warmed up *before* collectors start
(so compilation does not compete with them for the CPU, and its time is reported on its
own); then the initial weights are published, the collectors start, and the monitor's
clock starts. A Ctrl-C or SIGTERM at any moment of the startup (the compile included)
stops the run (:class:`~pipeline.run.lifecycle.StartupInterrupts`).

Shutdown (total frames reached, Ctrl-C, SIGTERM): collectors are asked to stop through
the weights block, a final checkpoint is written, and every shared-memory segment is
unlinked. A second Ctrl-C exits at once (segments are still unlinked first).

A failed periodic write (a checkpoint, a frame mark, a metrics row: a full disk) is
reported once and the run goes on with its last good checkpoint: supervision and the
stop conditions never depend on a write (:mod:`~pipeline.run.write_failures`). A task
that fails for any other reason stops the run with one clear error, never silently.

This module is the Trainer's tasks and its event loop; the pieces it assembles live beside it:
:mod:`~pipeline.run.lifecycle` (setup before the loop, shutdown after it),
:mod:`~pipeline.run.startup` (run directory, resume, device, learner and replay),
:mod:`~pipeline.run.pacing` (replay-ratio limiter, epsilon schedule),
:mod:`~pipeline.run.snapshots` (the monitor snapshot's parts, summary.json),
:mod:`~pipeline.run.evaluator.evaluations` (the evaluator's results and gauges) and
:mod:`~pipeline.run.run_checkpoints` (periodic, final and best checkpoints, resuming).
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

from config import Config
from pipeline.learning.checkpoint import CheckpointError
from pipeline.learning.flat_state import flatten_state
from pipeline.run.collection import CollectionBackend
from pipeline.run.consolidator import Consolidator
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.lifecycle import StartupInterrupts, TrainerLifecycle
from pipeline.run.monitor.keys import COUNTER_KEYS, LEARNER_PHASES, CounterKey, LearnerPhase
from pipeline.run.monitor.monitor import Monitor, Snapshot
from pipeline.run.pacing import epsilon_at, next_mark, priority_beta_at
from pipeline.run.preflight import RunLock
from pipeline.run.run_checkpoints import cloned, mark_payload, save_mark
from pipeline.run.snapshots import (
    collector_rows,
    copy_slot_counters,
    learning_gauges,
    process_gauges,
    ring_fill_pct,
    snapshot_counters,
)

# TrainingError, latest_checkpoint, resolve_resume and resolve_device are re-exported
# (``X as X``): they were defined or imported here, and main.py and the benchmarks import
# TrainingError and resolve_device from here.
from pipeline.run.startup import TrainingError as TrainingError
from pipeline.run.startup import latest_checkpoint as latest_checkpoint
from pipeline.run.startup import resolve_device as resolve_device
from pipeline.run.startup import resolve_resume as resolve_resume
from pipeline.run.startup import run_event_loop, save_replay
from pipeline.run.steadiness_watch import SteadinessWatch
from pipeline.run.supervisor import Supervisor
from pipeline.run.write_failures import WriteFailures, free_space, short_reason
from pipeline.transport import ring as R
from pipeline.transport.weights import WeightsBlock

logger = logging.getLogger("mario.trainer")


class Trainer(TrainerLifecycle):
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
        self.stop_event: asyncio.Event | None = None
        self.stop_reason = ""
        self.counters: dict[CounterKey, int] = dict.fromkeys(COUNTER_KEYS, 0)
        self.base: dict[CounterKey, int] = dict.fromkeys(COUNTER_KEYS, 0)  # from a resumed checkpoint
        self.learner_ns: dict[LearnerPhase, int] = dict.fromkeys(LEARNER_PHASES, 0)
        self.startup: dict[str, float] = {}
        self.ring_segment = self.weights_segment = None
        self.ring: R.TransitionRing | None = None
        self.weights: WeightsBlock | None = None
        self.supervisor: Supervisor | None = None
        self.monitor: Monitor | None = None
        self._sigint_count = 0
        self._t0 = time.monotonic()
        self._last_checkpoint_t = time.monotonic()
        self._last_replay_save_t = time.monotonic()
        self.final_checkpoint: Path | None = None
        self._next_mark = 0  # frames at which the next mark is kept (mark_interval_frames)
        self.consolidator: Consolidator | None = None
        self.evaluations = Evaluations()
        self.steadiness: SteadinessWatch | None = None  # set up with the learner and the replay
        self.lock: RunLock | None = None
        self.fatal = ""  # why the run had to end (a collector crash loop), "" when it ended normally
        self.final_error = ""  # why the final checkpoint could not be written, "" when it was
        self.final_evaluation = False  # whether the shutdown waits for an evaluation of the last weights
        self.interrupts = StartupInterrupts()
        self.write_failures = WriteFailures()
        self.hooks = contextlib.ExitStack()  # process-wide hooks of this run, undone at its very end

    # -- counters -------------------------------------------------------------------------
    def total(self, key: CounterKey) -> int:
        return self.base[key] + self.counters[key]

    def _collector_totals(self) -> None:
        assert self.ring is not None
        frames = steps = episodes = replayed = 0
        for slot in self.ring.slots:
            counters = slot.counters
            frames += counters.frames
            steps += counters.steps
            episodes += counters.episodes
            replayed += counters.replayed_frames
        self.counters["frames"], self.counters["steps"], self.counters["episodes"] = frames, steps, episodes
        self.counters["replayed_frames"] = replayed

    def _publish(self) -> None:
        assert self.weights is not None
        t = time.perf_counter_ns()
        if self.replay.can_sample(self.cfg.batch_size):
            self.calibrate_statistics()  # the statistics the acting copies will use
            if self.steadiness is not None:
                t_probe = time.perf_counter_ns()
                self.steadiness.at_publish(self.total("updates"))
                probe_ns = time.perf_counter_ns() - t_probe
                self.learner_ns["probe"] += probe_ns
                t += probe_ns  # the publish phase counts the rest (the calibration included)
        flat, step, epsilon = flatten_state(self.learner.publishable_state()), self.total("updates"), self.epsilon()
        version = self.weights.publish(flat, learner_step=step, epsilon=epsilon, frames=int(self.total("frames")))
        if self.collection is not None:
            self.collection.publish(flat, version=version, epsilon=epsilon, learner_step=step)
        self.learner_ns["publish"] += time.perf_counter_ns() - t

    def epsilon(self) -> float:
        return epsilon_at(self.cfg, self.total("frames"))

    # -- tasks ----------------------------------------------------------------------------
    async def _consolidate(self) -> None:
        assert self.stop_event is not None
        while not self.stop_event.is_set():
            t = time.perf_counter_ns()
            budget = (
                self.limiter.insert_budget(self.replay.inserted, self.counters["samples"]) if self.throttle else None
            )
            consumed = self.consolidator.poll(budget)  # budget 0 still reads episode summaries
            self.learner_ns["consolidate"] += time.perf_counter_ns() - t
            await asyncio.sleep(0 if consumed else 0.001)

    async def _train(self) -> None:
        cfg, stop = self.cfg, self.stop_event
        assert stop is not None
        batch, prioritized = cfg.batch_size, self.replay.prioritized
        while not stop.is_set():
            if not self.limiter.can_sample(
                self.replay.inserted, self.counters["samples"], batch
            ) or not self.replay.can_sample(batch):
                t = time.perf_counter_ns()
                await asyncio.sleep(0.002)
                self.learner_ns["wait"] += time.perf_counter_ns() - t
                continue
            t0 = time.perf_counter_ns()
            if prioritized:
                sample, index = self.replay.sample(batch, return_index=True)
            else:
                sample = self.replay.sample(batch)
            t1 = time.perf_counter_ns()
            td_errors = self.learner.update(sample)
            if prioritized:  # device ops only: no host sync per update
                self.replay.update_priorities(index, td_errors, valid=sample.weight > 0)
            t2 = time.perf_counter_ns()
            self.learner_ns["sample"] += t1 - t0
            self.learner_ns["update"] += t2 - t1
            if "first update" not in self.startup:
                self.startup["first update"] = time.monotonic() - self._t0
            self.counters["samples"] += batch
            self.counters["updates"] += 1
            if self.counters["updates"] % cfg.updates_per_epoch == 0:
                self.counters["epochs"] += 1
                if self.counters["epochs"] % cfg.model_update_frequency == 0:
                    self._publish()
            await asyncio.sleep(0)  # let the consolidator run between updates

    async def _watch(self) -> None:
        """Supervisor, stop conditions, epsilon and periodic checkpoints (twice a second)."""
        cfg, stop = self.cfg, self.stop_event
        assert stop is not None and self.supervisor is not None and self.weights is not None
        while not stop.is_set():
            self.supervisor.check()
            if self.supervisor.fatal:
                self.fatal = self.supervisor.fatal
                self.request_stop(self.fatal)
                break
            self._collector_totals()
            if "first transition" not in self.startup and self.counters["records"]:
                # Seconds since collectors were started (the learner's warm-up is separate).
                self.startup["first transition"] = time.monotonic() - self._t0
            self.weights.epsilon = self.epsilon()
            if self.replay.prioritized:
                self.replay.beta = priority_beta_at(cfg, self.total("frames"))
            if cfg.mark_interval_frames and self.total("frames") >= self._next_mark:
                await self.save_mark_in_background()  # before the stop check: the last mark counts
            if cfg.total_frames and self.total("frames") >= cfg.total_frames:
                self._ask_final_evaluation()  # before the stop flag, which the evaluator would obey
                self.request_stop(f"reached {cfg.total_frames} frames")
                break
            if self.time_limit_s is not None and time.monotonic() - self._t0 >= self.time_limit_s:
                self.request_stop(f"ran {self.time_limit_s:.0f} s")
                break
            if time.monotonic() - self._last_checkpoint_t >= cfg.checkpoint_interval_s:
                await self.save_in_background()
            if self._replay_save_due():
                # In the loop, not a thread: the replay must not change while it is written.
                # A few seconds; the rings hold collection meanwhile.
                save_replay(self.replay, self.paths.checkpoints)
                self._last_replay_save_t = time.monotonic()
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass

    def _replay_save_due(self) -> bool:
        cfg = self.cfg
        if not (self.train_enabled and cfg.save_replay and cfg.replay_save_interval_s > 0):
            return False
        return time.monotonic() - self._last_replay_save_t >= cfg.replay_save_interval_s

    async def _monitor(self) -> None:
        assert self.stop_event is not None and self.monitor is not None
        while not self.stop_event.is_set():
            try:
                await asyncio.wait_for(self.stop_event.wait(), timeout=self.cfg.monitor_interval_s)
            except asyncio.TimeoutError:
                pass
            snapshot = self.snapshot()
            running = not self.stop_event.is_set()
            if running and self.on_snapshot is not None:
                self.on_snapshot(snapshot, self)
            try:
                self.monitor.update(snapshot, status="running" if running else "stopping")
            except OSError as exc:  # metrics.csv or TensorBoard on a full disk: shown, not written
                self.write_failures.metrics_failed(self.paths.root, exc)
            else:
                self.write_failures.succeeded("metrics", str(self.monitor.csv_path))

    # -- evaluator ------------------------------------------------------------------------
    def _start_evaluator(self) -> None:
        cfg = self.cfg
        if not self.train_enabled or cfg.eval_interval_frames <= 0:
            return
        assert self.weights_segment is not None and self.monitor is not None
        self.evaluations.start(cfg, self.paths.root, self.weights_segment.name, self.monitor, self.total("frames"))

    def _ask_final_evaluation(self) -> None:
        """A run that reached its frames ends with an evaluation of its last weights."""
        if self.cfg.eval_final_timeout_s > 0 and self.evaluations.evaluator is not None:
            self._publish()
            self.final_evaluation = self.evaluations.request_final()

    def _stopping(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    # -- monitor snapshot -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        assert self.ring is not None and self.weights is not None and self.supervisor is not None
        assert self.consolidator is not None and self.steadiness is not None
        self._collector_totals()
        slots = copy_slot_counters(self.ring)
        slots_of = [self._slots_of(i) for i in range(self.num_collectors)]
        collectors = collector_rows(slots, slots_of, self.supervisor, self.weights.version)
        episodes = list(self.consolidator.episodes)[-100:]
        gauges = {
            "replay_size": float(len(self.replay)),
            "epsilon": self.epsilon(),
            "weights_version": float(self.weights.version),
            "ring_fill_pct": ring_fill_pct(slots, self.cfg.ring_capacity),
            "restarts": float(self.supervisor.restarts),
            "env_errors": float(sum(c.env_errors for c in slots)),
            "collectors_alive": float(self.supervisor.alive()),
            "bad_episode_records": float(self.consolidator.bad_episode_records),
            "poll_gap_ms": 1000.0 * self.consolidator.reset_gap(),
            **learning_gauges(self.learner.pop_metrics(), episodes),
        }
        self.evaluations.poll(
            self.monitor,
            stopping=self._stopping(),
            log_path=self.paths.logs / "evaluator.log",
            frames=float(self.total("frames")),
        )
        gauges.update(self.evaluations.gauges())
        gauges.update(self.steadiness.gauges())
        gauges.update(process_gauges(collectors, self.device))
        if self.collection is not None:
            gauges.update(self.collection.gauges())
        totals = {key: self.total(key) for key in COUNTER_KEYS}
        return Snapshot(
            time=time.monotonic() - self._t0,
            counters=snapshot_counters(totals, slots, self.learner_ns),
            gauges=gauges,
            collectors=collectors,
            startup=dict(self.startup),
        )

    # -- periodic writes ------------------------------------------------------------------
    async def save_in_background(self) -> Path | None:
        """A periodic checkpoint written by a worker thread while training goes on.

        Writing and fsyncing ~27 MB (twice when best.pt is due) can take seconds on a slow
        disk; in the event loop that stalled the consolidator and the learner alike. The
        payload is a copy taken in the loop, so the updates that go on meanwhile cannot
        tear it. A write that fails (a full disk) is reported once and retried at the next
        interval; the run goes on with its last good checkpoint. Returns the path written,
        None when it failed.
        """
        payload, frames, score = self._checkpoint_args()
        self._last_checkpoint_t = time.monotonic()  # a failed write is retried an interval later, not every tick
        try:
            path = await asyncio.to_thread(self.checkpoints.save, cloned(payload), frames, score)
        except (CheckpointError, OSError) as exc:
            failure = self.checkpoints.write_failure("periodic checkpoint", exc, payload)
            self.write_failures.failed(
                "periodic checkpoint",
                f"{failure}; training goes on, the next attempt is in {self.cfg.checkpoint_interval_s:g} s "
                "(reported once while they fail)",
            )
            return None
        self.write_failures.succeeded("periodic checkpoint", str(path))
        return path

    async def save_mark_in_background(self) -> Path | None:
        """The online net at the frame mark just passed (a few frames past it: collectors
        are not stopped for it), with its statistics re-estimated as a publish would, written
        by a worker thread; a failed write is reported once, and that mark is skipped."""
        self.calibrate_statistics()
        totals = {k: self.total(k) for k in COUNTER_KEYS}
        payload = mark_payload(self.learner, totals, self.cfg, self.num_actions)
        mark = self._next_mark
        self._next_mark = next_mark(totals["frames"], self.cfg.mark_interval_frames)
        try:
            path = await asyncio.to_thread(save_mark, self.paths.checkpoints, payload, mark)
        except (CheckpointError, OSError) as exc:
            where = free_space(self.paths.checkpoints)
            self.write_failures.failed("frame mark", f"frame mark {mark} not written ({short_reason(exc)}; {where})")
            return None
        self.write_failures.succeeded("frame mark", str(path))
        return path

    # -- run ------------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        if self.stop_event is not None and not self.stop_event.is_set():
            self.stop_reason = reason
            self.stop_event.set()
        if self.weights is not None:
            self.weights.request_stop()

    def _on_sigint(self) -> None:
        self._sigint_count += 1
        if self._sigint_count >= 2:
            # Second Ctrl-C: leave now, but never leave segments behind.
            if self.weights is not None:
                self.weights.request_stop()
            self._release_shared_memory()
            os._exit(130)
        self.request_stop("interrupted (Ctrl-C again to exit at once)")

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        loop.add_signal_handler(signal.SIGTERM, lambda: self.request_stop("terminated"))
        assert self.supervisor is not None and self.weights is not None
        self._t0 = time.monotonic()
        self._publish()
        self.supervisor.start_all()
        assert self.monitor is not None
        self.monitor.announce(f"startup: {self.num_collectors} collector process(es) starting on {self.cfg.env_id}")
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
            self.weights.request_stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.consolidator.poll()  # what was committed before the stop
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

    def run(self) -> int:
        """Run until done or stopped; always stop collectors, checkpoint and unlink."""
        try:
            # From the first second: a Ctrl-C or SIGTERM of the startup is never lost (the
            # event loop takes both signals over once it runs).
            with self.interrupts:
                self.setup()
                run_event_loop(self._main())
        finally:
            self.shutdown()
        # After the final checkpoint (or its attempt): nothing learned is lost.
        errors = [error for error in (self.fatal, self.final_error) if error]
        if errors:
            raise TrainingError("; ".join(errors))
        return 0
