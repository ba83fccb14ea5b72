"""The learner process: one asyncio event loop running the whole training system.

Tasks on the loop (uvloop when installed):

- consolidator: drains the collectors' ring slots into the replay memory;
- train loop: samples batches and runs learner updates under the replay-ratio limiter,
  publishing weights and epsilon every MODEL_UPDATE_FREQUENCY epochs;
- monitor: every few seconds, reads every counter and shows/logs/writes them;
- supervisor: restarts collectors that die or hang; periodic checkpoints.

Beside the collectors, an evaluator process (:mod:`pipeline.run.evaluator`, when
``eval_interval_s > 0``) plays greedy episodes with the published weights every
``eval_interval_s``; the monitor tick collects its results without blocking and shows
them as the ``eval_*`` gauges (table, CSV, TensorBoard).

Startup order matters: the network is compiled and warmed up *before* collectors start
(so compilation does not compete with them for the CPU, and its time is reported on its
own); then the initial weights are published, the collectors start, and the monitor's
clock starts.

Shutdown (total frames reached, Ctrl-C, SIGTERM): collectors are asked to stop through
the weights block, a final checkpoint is written, and every shared-memory segment is
unlinked. A second Ctrl-C exits at once (segments are still unlinked first).

This module is the Trainer's lifecycle and its tasks; the pieces it assembles live beside it:
:mod:`~pipeline.run.startup` (run directory, resume, device, learner and replay),
:mod:`~pipeline.run.pacing` (replay-ratio limiter, epsilon schedule),
:mod:`~pipeline.run.snapshots` (the monitor snapshot's parts, summary.json),
:mod:`~pipeline.run.evaluations` (the evaluator's results and gauges) and
:mod:`~pipeline.run.run_checkpoints` (periodic, final and best checkpoints, resuming).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import envs
from config import Config
from pipeline.learning.flat_state import flatten_state, state_numel
from pipeline.run.collection import CollectionBackend
from pipeline.run.collector import CollectorArgs
from pipeline.run.consolidator import Consolidator
from pipeline.run.evaluations import Evaluations
from pipeline.run.monitor import COUNTER_KEYS, LEARNER_PHASES, CounterKey, LearnerPhase, Monitor, Snapshot
from pipeline.run.pacing import RateLimiter, epsilon_at, priority_beta_at
from pipeline.run.preflight import RunLock
from pipeline.run.run_checkpoints import (
    RunCheckpoints,
    checkpoint_payload,
    cloned,
    mark_payload,
    next_mark,
    resume_from,
    rolling_return,
    save_mark,
)
from pipeline.run.snapshots import (
    collector_rows,
    copy_slot_counters,
    learning_gauges,
    process_gauges,
    ring_fill_pct,
    run_summary,
    snapshot_counters,
)

# TrainingError, latest_checkpoint and resolve_resume are re-exported (``X as X``): they
# were defined here, and main.py and the benchmarks import TrainingError from here.
from pipeline.run.startup import (
    RunPaths,
    build_learner,
    build_replay,
    changed_on_resume,
    check_machine_and_lock,
    load_resume_checkpoint,
    new_run_root,
    resolve_device,
    restore_replay,
    run_event_loop,
    save_replay,
    seed_and_threads,
    warm_up_learner,
)
from pipeline.run.startup import TrainingError as TrainingError
from pipeline.run.startup import latest_checkpoint as latest_checkpoint
from pipeline.run.startup import resolve_resume as resolve_resume
from pipeline.run.supervisor import Supervisor
from pipeline.transport import ring as R
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock, block_bytes

logger = logging.getLogger("mario.trainer")
SLACK_BATCHES = 4  # how far (in batches of samples) the learner may fall behind the replay ratio


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
        self.lock: RunLock | None = None
        self.fatal = ""  # why the run had to end (a collector crash loop), "" when it ended normally

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
        self.checkpoints = RunCheckpoints(self.paths.checkpoints, cfg.keep_checkpoints)
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
        self.replay = build_replay(cfg, self.num_streams, replay_device)
        restored = 0
        if self.resume_path is not None and cfg.save_replay:
            restored = self.replay.inserted if restore_replay(self.replay, self.paths.checkpoints) else 0
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
        )

    # -- counters -------------------------------------------------------------------------
    def total(self, key: CounterKey) -> int:
        return self.base[key] + self.counters[key]

    def _collector_totals(self) -> None:
        assert self.ring is not None
        frames = steps = episodes = 0
        for slot in self.ring.slots:
            counters = slot.counters
            frames += counters.frames
            steps += counters.steps
            episodes += counters.episodes
        self.counters["frames"], self.counters["steps"], self.counters["episodes"] = frames, steps, episodes

    def _insert(self, stream: int, records: np.ndarray) -> None:
        self.replay.add(stream, records)
        self.counters["records"] += len(records)

    def _publish(self) -> None:
        assert self.weights is not None
        t = time.perf_counter_ns()
        flat, step, epsilon = flatten_state(self.learner.publishable_state()), self.total("updates"), self.epsilon()
        version = self.weights.publish(flat, learner_step=step, epsilon=epsilon)
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
            self.monitor.update(snapshot, status="running" if running else "stopping")

    # -- evaluator ------------------------------------------------------------------------
    def _start_evaluator(self) -> None:
        cfg = self.cfg
        if not self.train_enabled or cfg.eval_interval_s <= 0:
            return
        assert self.weights_segment is not None and self.monitor is not None
        self.evaluations.start(cfg, self.paths.root, self.weights_segment.name, self.monitor)

    def _stopping(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    # -- monitor snapshot -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        assert self.ring is not None and self.weights is not None and self.supervisor is not None
        assert self.consolidator is not None
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
        self.evaluations.poll(self.monitor, stopping=self._stopping(), log_path=self.paths.logs / "evaluator.log")
        gauges.update(self.evaluations.gauges())
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

    # -- checkpoints ----------------------------------------------------------------------
    def _checkpoint_args(self) -> tuple[dict, int, float | None]:
        self._collector_totals()
        totals = {k: self.total(k) for k in COUNTER_KEYS}
        payload = checkpoint_payload(self.learner, totals, self.cfg, self.num_actions)
        score = rolling_return(self.consolidator.episodes if self.consolidator is not None else ())
        return payload, totals["frames"], score

    def save(self, *, final: bool) -> Path:
        """A periodic (or the final) checkpoint, and best.pt when the rolling return is the best yet."""
        path = self.checkpoints.save(*self._checkpoint_args())
        self._last_checkpoint_t = time.monotonic()
        if final:
            self.final_checkpoint = path
        return path

    async def save_in_background(self) -> Path:
        """A periodic checkpoint written by a worker thread while training goes on.

        Writing and fsyncing ~27 MB (twice when best.pt is due) can take seconds on a slow
        disk; in the event loop that stalled the consolidator and the learner alike. The
        payload is a copy taken in the loop, so the updates that go on meanwhile cannot
        tear it.
        """
        payload, frames, score = self._checkpoint_args()
        path = await asyncio.to_thread(self.checkpoints.save, cloned(payload), frames, score)
        self._last_checkpoint_t = time.monotonic()
        return path

    async def save_mark_in_background(self) -> Path:
        """The online net at the frame mark just passed (a few frames past it: collectors
        are not stopped for it), written by a worker thread."""
        totals = {k: self.total(k) for k in COUNTER_KEYS}
        payload = mark_payload(self.learner, totals, self.cfg, self.num_actions)
        mark = self._next_mark
        self._next_mark = next_mark(totals["frames"], self.cfg.mark_interval_frames)
        return await asyncio.to_thread(save_mark, self.paths.checkpoints, payload, mark)

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
            asyncio.create_task(self._consolidate()),
            asyncio.create_task(self._watch()),
            asyncio.create_task(self._monitor()),
        ]
        if self.train_enabled:
            tasks.append(asyncio.create_task(self._train()))
        try:
            await self.stop_event.wait()
        finally:
            self.weights.request_stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.consolidator.poll()  # what was committed before the stop
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    def run(self) -> int:
        """Run until done or stopped; always stop collectors, checkpoint and unlink."""
        try:
            self.setup()
            run_event_loop(self._main())
        finally:
            self.shutdown()
        if self.fatal:
            raise TrainingError(self.fatal)  # after the final checkpoint: nothing learned is lost
        return 0

    def shutdown(self) -> None:
        if self.weights is not None:
            self.weights.request_stop()
        if self.supervisor is not None:
            self.supervisor.stop()
        self.evaluations.stop(timeout_s=10)
        try:
            if self.ring is not None and getattr(self, "learner", None) is not None:
                if self.consolidator is not None:
                    # Collectors are stopped: drain everything they committed (a pass takes
                    # at most max_records_per_slot per slot, so loop until a pass is empty).
                    while self.consolidator.poll():
                        pass
                path = self.save(final=True)
                logger.info("final checkpoint: %s (%s)", path, self.stop_reason or "stopped")
                if self.cfg.save_replay and self.train_enabled:
                    save_replay(self.replay, self.paths.checkpoints)
                self._write_summary()
        finally:
            if self.monitor is not None:
                if self.ring is not None:
                    self.monitor.update(self.snapshot(), status="stopped")
                self.monitor.close()
            self._release_shared_memory()
            if self.lock is not None:
                self.lock.release()

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
        (self.paths.root / "summary.json").write_text(json.dumps(summary, indent=2))

    def _release_shared_memory(self) -> None:
        if self.ring is not None:
            self.ring.close()
        if self.weights is not None:
            self.weights.close()
        if self.supervisor is not None:
            self.supervisor.slots = []
        self.consolidator = None  # type: ignore[assignment]
        if self.collection is not None:
            self.collection.close()
        segments.release(self.ring_segment, unlink=True)
        segments.release(self.weights_segment, unlink=True)
        self.ring_segment = self.weights_segment = None
        self.ring = None
