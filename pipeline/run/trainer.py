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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import envs
from config import Config
from pipeline.learning.checkpoint import (
    CHECKPOINT_PATTERN,
    CheckpointError,
    capture_rng_state,
    check_compatible,
    checkpoint_name,
    load_checkpoint,
    restore_rng_state,
    rotate_checkpoints,
    save_checkpoint,
)
from pipeline.learning.flat_state import flatten_state, state_numel
from pipeline.learning.learner import Learner, LearnerSettings
from pipeline.learning.replay import ReplayMemory
from pipeline.run.collector import CollectorArgs
from pipeline.run.consolidator import Consolidator
from pipeline.run.evaluator import Evaluator
from pipeline.run.monitor import Monitor, Snapshot
from pipeline.run.supervisor import Supervisor
from pipeline.transport import ring as R
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock, block_bytes

logger = logging.getLogger("mario.trainer")

COUNTER_KEYS = ("frames", "steps", "records", "updates", "samples", "episodes", "epochs")


class TrainingError(Exception):
    """A run cannot start or continue (bad checkpoint, unusable device...): one clear message."""


@dataclass
class RunPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def make(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device='cuda' but no CUDA GPU is available; use --device cpu or --device auto")
    return torch.device(name)


def latest_checkpoint(directory: Path) -> Path | None:
    """The periodic checkpoint with the most frames (the count is in its name)."""
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))]
    return max(found)[1] if found else None


def resolve_resume(resume: str) -> tuple[Path, Path]:
    """Map --resume (a checkpoint file or a run directory) to (checkpoint, run directory)."""
    path = Path(resume)
    if path.is_dir():
        directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = latest_checkpoint(directory)
        if found is None:
            raise TrainingError(f"--resume {resume}: no checkpoint (ckpt-*.pt) found in {directory}")
        path = found
    elif not path.exists():
        raise TrainingError(f"--resume {resume}: no such file or directory; pass a checkpoint or a run directory")
    run_root = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return path, run_root


def epsilon_at(cfg: Config, frames: int) -> float:
    fraction = min(1.0, frames / cfg.epsilon_decay_frames)
    return cfg.epsilon_start + fraction * (cfg.epsilon_end - cfg.epsilon_start)


class RateLimiter:
    """Keeps samples drawn per inserted transition near ``ratio``, in both directions.

    Sampling waits while the learner is ahead; consolidation (and so, through the full
    ring, the collectors) waits while the learner is behind by more than ``slack``
    samples. Before ``min_size`` transitions are stored, inserts are free.
    """

    def __init__(self, ratio: float, min_size: int, slack_samples: float) -> None:
        self.ratio = ratio
        self.min_size = min_size
        self.slack = slack_samples

    def can_sample(self, inserted: int, samples: int, batch: int) -> bool:
        return inserted >= self.min_size and samples + batch <= (inserted - self.min_size) * self.ratio + batch

    def can_insert(self, inserted: int, samples: int) -> bool:
        if inserted < self.min_size:
            return True
        return (inserted - self.min_size) * self.ratio - samples <= self.slack


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
    ) -> None:
        """``train=False`` runs collection only (benchmarks); ``throttle=False`` lets the
        consolidator drain regardless of the replay ratio; ``time_limit_s`` stops the run
        after that many seconds of collection; ``on_snapshot(snapshot, trainer)`` sees
        every monitor snapshot taken while the run is going (the benchmark's window; it may
        call :meth:`request_stop`)."""
        self.cfg = cfg
        self.time_limit_s = time_limit_s
        self.on_snapshot = on_snapshot
        self.sources = sources or {}
        self.train_enabled = train
        self.throttle = throttle
        self.stop_event: asyncio.Event | None = None
        self.stop_reason = ""
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_KEYS, 0)
        self.base: dict[str, int] = dict.fromkeys(COUNTER_KEYS, 0)  # from a resumed checkpoint
        self.learner_ns: dict[str, int] = dict.fromkeys(("wait", "sample", "update", "publish", "consolidate"), 0)
        self.startup: dict[str, float] = {}
        self.ring_segment = self.weights_segment = None
        self.ring: R.TransitionRing | None = None
        self.weights: WeightsBlock | None = None
        self.supervisor: Supervisor | None = None
        self.monitor: Monitor | None = None
        self._sigint_count = 0
        self._t0 = time.monotonic()
        self._last_checkpoint_t = time.monotonic()
        self.final_checkpoint: Path | None = None
        self.best_return = float("-inf")
        self.consolidator: Consolidator | None = None
        self.evaluator: Evaluator | None = None
        self.last_eval: dict[str, Any] | None = None  # the newest evaluation result
        self.evaluations = 0
        self.eval_seconds = {"wall": 0.0, "cpu": 0.0}  # summed over this process's evaluations
        self._evaluator_exit_reported = False

    # -- setup ----------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        if cfg.resume:
            self.resume_path, root = resolve_resume(cfg.resume)
            # Read it before anything is created: a bad file must leave nothing behind.
            self._resume_state = load_checkpoint(self.resume_path)
            missing = {"learner", "counters", "rng", "config"} - set(self._resume_state)
            if missing or "online" not in self._resume_state.get("learner", {}):
                raise CheckpointError(
                    f"{self.resume_path}: not a training checkpoint of this project (missing "
                    f"{', '.join(sorted(missing)) or 'learner.online'}); pass a ckpt-*.pt "
                    f"file or a run directory written by main.py"
                )
            # A network of another shape (action set, dueling, frame stack) fails here too.
            from models import QNetwork

            probe = QNetwork(envs.num_actions(cfg.env_id, cfg.action_set), cfg.frame_stack, cfg.dueling)
            check_compatible(probe, self._resume_state["learner"]["online"], self.resume_path)
        else:
            self.resume_path = None
            name = cfg.run_name or time.strftime("%Y%m%d-%H%M%S") + f"-{cfg.env_id}"
            root = Path(cfg.run_dir) / name
        self.paths = RunPaths(root)
        self.paths.make()
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
        threads = cfg.learner_threads or max(1, (os.cpu_count() or 1) - cfg.num_processes)
        torch.set_num_threads(threads)
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed)
        self.num_actions = envs.num_actions(cfg.env_id, cfg.action_set)
        self.learner = Learner(
            self.num_actions,
            LearnerSettings(
                learning_rate=cfg.learning_rate,
                adam_eps=cfg.adam_eps,
                gamma=cfg.gamma,
                grad_clip=cfg.grad_clip,
                grad_accum=cfg.grad_accum,
                target_sync_updates=cfg.target_sync_updates,
                dueling=cfg.dueling,
                frame_stack=cfg.frame_stack,
                compile=cfg.compile,
                amp=cfg.amp,
                device=str(self.device),
            ),
        )
        self.num_streams = cfg.num_processes * cfg.envs_per_collector  # one ring slot per environment
        self.replay = ReplayMemory(
            cfg.replay_capacity,
            self.num_streams,
            frame_stack=cfg.frame_stack,
            n_step=cfg.n_step,
            gamma=cfg.gamma,
            device=replay_device,
            seed=cfg.seed,
        )
        slack = max(32 * cfg.batch_size, cfg.replay_ratio * cfg.ring_capacity)
        self.limiter = RateLimiter(cfg.replay_ratio, cfg.learning_starts, slack)
        if self.resume_path is not None:
            self._load(self.resume_path)

        # The monitor comes up first, so the user sees startup progress from the first second.
        self.monitor = Monitor(
            self.paths.root, mode=cfg.monitor, interval_s=cfg.monitor_interval_s, resume=self.resume_path is not None
        )
        self.monitor.start_display()
        self.monitor.announce(f"run directory {self.paths.root}")
        if self.train_enabled:
            self.monitor.announce(
                f"startup: warming up the learner on {self.device} (compile={cfg.compile}, "
                f"amp={cfg.amp}, batch {cfg.batch_size}); the monitor's clock starts after it"
            )
            seconds = self.learner.warmup(cfg.batch_size)
            self.startup["compile+warm-up"] = seconds
            self.monitor.startup_reported.add("compile+warm-up")  # announced just below
            self.monitor.announce(
                f"startup: compile+warm-up done in {seconds:.1f} s (compiled={self.learner.compiled}, "
                f"amp={self.learner.amp_dtype})"
            )
        self._create_shared_memory()

    def _load(self, path: Path) -> None:
        state = self._resume_state
        check_compatible(self.learner.online, state["learner"]["online"], path)
        self.learner.load_state_dict(state["learner"])
        for key in COUNTER_KEYS:
            self.base[key] = int(state["counters"].get(key, 0))
        restore_rng_state(state["rng"])
        self.best_return = float(state.get("best_return", float("-inf")))
        logger.info("resumed from %s at %d frames, %d updates", path, self.base["frames"], self.base["updates"])

    def _create_shared_memory(self) -> None:
        cfg = self.cfg
        layout = R.RingLayout(self.num_streams, cfg.ring_capacity)
        self.ring_segment = segments.create_segment(segments.segment_name(self.tag, "ring"), layout.total_bytes)
        self.ring = R.TransitionRing.initialise(self.ring_segment.buf, layout)
        num_floats = state_numel(self.learner.online.state_dict())
        self.weights_segment = segments.create_segment(
            segments.segment_name(self.tag, "weights"), block_bytes(num_floats)
        )
        self.weights = WeightsBlock.initialise(self.weights_segment.buf, num_floats)
        self.consolidator = Consolidator(self.ring, self._insert)
        # The supervisor watches each collector's home slot (its first).
        home_slots = [self.ring.slots[self._slots_of(i)[0]] for i in range(cfg.num_processes)]
        self.supervisor = Supervisor(home_slots, self._collector_args, heartbeat_timeout_s=cfg.heartbeat_timeout_s)

    def _slots_of(self, collector: int) -> tuple[int, ...]:
        k = self.cfg.envs_per_collector
        return tuple(range(collector * k, (collector + 1) * k))

    def _collector_args(self, slot: int) -> CollectorArgs:
        assert self.ring_segment is not None and self.weights_segment is not None
        return CollectorArgs(
            slot=slot,
            config=self.cfg.to_dict(),
            ring_name=self.ring_segment.name,
            weights_name=self.weights_segment.name,
            parent_pid=os.getpid(),
            log_path=str(self.paths.logs / f"collector-{slot}.log"),
            slots=self._slots_of(slot),
        )

    # -- counters -------------------------------------------------------------------------
    def total(self, key: str) -> int:
        return self.base[key] + self.counters[key]

    def _collector_totals(self) -> None:
        assert self.ring is not None
        frames = steps = episodes = 0
        for slot in self.ring.slots:
            frames += int(slot.header[R.FRAMES])
            steps += int(slot.header[R.STEPS])
            episodes += int(slot.header[R.EPISODES])
        self.counters["frames"], self.counters["steps"], self.counters["episodes"] = frames, steps, episodes

    def _insert(self, stream: int, records: np.ndarray) -> None:
        self.replay.add(stream, records)
        self.counters["records"] += len(records)

    def _publish(self) -> None:
        assert self.weights is not None
        t = time.perf_counter_ns()
        self.weights.publish(
            flatten_state(self.learner.publishable_state()), learner_step=self.total("updates"), epsilon=self.epsilon()
        )
        self.learner_ns["publish"] += time.perf_counter_ns() - t

    def epsilon(self) -> float:
        return epsilon_at(self.cfg, self.total("frames"))

    # -- tasks ----------------------------------------------------------------------------
    async def _consolidate(self) -> None:
        assert self.stop_event is not None
        while not self.stop_event.is_set():
            t = time.perf_counter_ns()
            consumed = 0
            if not self.throttle or self.limiter.can_insert(self.replay.inserted, self.counters["samples"]):
                consumed = self.consolidator.poll()
            self.learner_ns["consolidate"] += time.perf_counter_ns() - t
            await asyncio.sleep(0 if consumed else 0.001)

    async def _train(self) -> None:
        cfg, stop = self.cfg, self.stop_event
        assert stop is not None
        batch = cfg.batch_size
        while not stop.is_set():
            if not self.limiter.can_sample(
                self.replay.inserted, self.counters["samples"], batch
            ) or not self.replay.can_sample(batch):
                t = time.perf_counter_ns()
                await asyncio.sleep(0.002)
                self.learner_ns["wait"] += time.perf_counter_ns() - t
                continue
            t0 = time.perf_counter_ns()
            sample = self.replay.sample(batch)
            t1 = time.perf_counter_ns()
            self.learner.update(sample)
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
            self._collector_totals()
            if "first transition" not in self.startup and self.counters["records"]:
                # Seconds since collectors were started (the learner's warm-up is separate).
                self.startup["first transition"] = time.monotonic() - self._t0
            self.weights.epsilon = self.epsilon()
            if cfg.total_frames and self.total("frames") >= cfg.total_frames:
                self.request_stop(f"reached {cfg.total_frames} frames")
                break
            if self.time_limit_s is not None and time.monotonic() - self._t0 >= self.time_limit_s:
                self.request_stop(f"ran {self.time_limit_s:.0f} s")
                break
            if time.monotonic() - self._last_checkpoint_t >= cfg.checkpoint_interval_s:
                self.save(final=False)
            try:
                await asyncio.wait_for(stop.wait(), timeout=0.5)
            except asyncio.TimeoutError:
                pass

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
        self.evaluator = Evaluator(
            cfg,
            self.paths.root,
            self.weights_segment.name,
            interval_s=cfg.eval_interval_s,
            episodes=cfg.eval_episodes,
            max_steps=cfg.eval_max_steps,
        )
        self.evaluator.start()
        self.monitor.announce(
            f"evaluator: {cfg.eval_episodes} greedy episode(s) every {cfg.eval_interval_s:g} s, "
            f"best video in {self.paths.root / 'videos'}"
        )

    def _poll_evaluator(self) -> None:
        """Take finished evaluations (never blocks); report a dead evaluator once."""
        if self.evaluator is None:
            return
        for result in self.evaluator.poll():
            self.evaluations += 1
            self.last_eval = result
            self.eval_seconds["wall"] += float(result.get("eval_s", 0.0))
            self.eval_seconds["cpu"] += float(result.get("cpu_s", 0.0))
            if self.monitor is not None:
                best = f"; new best -> {result['video']}" if result.get("video") else ""
                self.monitor.announce(
                    f"evaluation of weights v{result['weights_version']} (update {result['learner_step']}): "
                    f"return {result['mean_return']:.1f}, x_pos {result['mean_x_pos']:.0f}, "
                    f"flag rate {result['flag_rate']:.2f}{best}"
                )
        code = self.evaluator.exitcode
        if code is not None and not self._evaluator_exit_reported and not self._stopping():
            self._evaluator_exit_reported = True
            message = (
                f"evaluator exited with code {code}; training goes on without it "
                f"(see {self.paths.logs / 'evaluator.log'})"
            )
            if self.monitor is not None and self.monitor.mode != "off":
                self.monitor.announce(message)  # a log line, or a line under the live table
            else:
                logger.error(message)

    def _stopping(self) -> bool:
        return self.stop_event is not None and self.stop_event.is_set()

    def _eval_gauges(self) -> dict[str, float]:
        last = self.last_eval or {}
        nan = float("nan")
        gauges = {
            "evaluations": float(self.evaluations),
            "eval_return": float(last.get("mean_return", nan)),
            "eval_x_pos": float(last.get("mean_x_pos", nan)),
            "eval_max_x_pos": float(last.get("max_x_pos", nan)),
            "eval_flag_rate": float(last.get("flag_rate", nan)),
            "eval_length": float(last.get("mean_length", nan)),
            "eval_best_return": float(last.get("best_return", nan)),
            "eval_weights_version": float(last.get("weights_version", nan)),
            "eval_s": float(last.get("eval_s", nan)),
            "eval_cpu_s": float(last.get("cpu_s", nan)),
            "eval_wall_s_total": self.eval_seconds["wall"],
            "eval_cpu_s_total": self.eval_seconds["cpu"],
        }
        if self.evaluator is not None:
            from pipeline.run.procstats import process_stats

            stats = process_stats(self.evaluator.pid if self.evaluator.alive else None)
            gauges["evaluator_cpu_pct"] = stats["cpu_pct"]
            gauges["evaluator_rss_mb"] = stats["rss_mb"]
        return gauges

    # -- monitor snapshot -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        from pipeline.run.procstats import process_stats

        assert self.ring is not None and self.weights is not None and self.supervisor is not None
        self._collector_totals()
        counters = {k: float(self.total(k)) for k in COUNTER_KEYS}
        collectors = []
        pending = 0
        slot_counters = [slot.counters() for slot in self.ring.slots]
        for c in slot_counters:
            pending += c["write_seq"] - c["read_seq"]
            for name, _ in R.PHASES:
                counters[f"collector_{name}_ns"] = counters.get(f"collector_{name}_ns", 0.0) + c[f"{name}_ns"]
        for i in range(self.cfg.num_processes):
            mine = [slot_counters[j] for j in self._slots_of(i)]
            home = mine[0]
            proc = self.supervisor.states[i].process
            stats = process_stats(proc.pid if proc is not None and proc.is_alive() else None)
            collectors.append(
                {
                    "frames": sum(c["frames"] for c in mine),
                    "steps": sum(c["steps"] for c in mine),
                    "weights_version": home["weights_version"],
                    "weights_lag": self.weights.version - home["weights_version"],
                    "restarts": self.supervisor.states[i].restarts,
                    "env_errors": sum(c["env_errors"] for c in mine),
                    **stats,
                    **{f"{name}_ns": home[f"{name}_ns"] for name, _ in R.PHASES},
                }
            )
        for name, ns in self.learner_ns.items():
            counters[f"learner_{name}_ns"] = float(ns)
        metrics = self.learner.pop_metrics()
        episodes = list(self.consolidator.episodes)[-100:]
        gauges = {
            "replay_size": float(len(self.replay)),
            "epsilon": self.epsilon(),
            "weights_version": float(self.weights.version),
            "ring_fill_pct": 100.0 * pending / (self.cfg.ring_capacity * self.num_streams),
            "restarts": float(self.supervisor.restarts),
            "env_errors": float(sum(c["env_errors"] for c in slot_counters)),
            "collectors_alive": float(self.supervisor.alive()),
            "bad_episode_records": float(self.consolidator.bad_episode_records),
            "poll_gap_ms": 1000.0 * self.consolidator.reset_gap(),
            "loss": metrics.get("loss", float("nan")),
            "td_error": metrics.get("td_abs", float("nan")),
            "mean_q": metrics.get("q_mean", float("nan")),
            "grad_norm": metrics.get("grad_norm", float("nan")),
            "episode_return": float(np.mean([e.ret for e in episodes])) if episodes else float("nan"),
            "episode_x_pos": float(np.mean([e.x_pos for e in episodes])) if episodes else float("nan"),
            "flag_rate": float(np.mean([e.flag_get for e in episodes])) if episodes else float("nan"),
            "episode_length": float(np.mean([e.length for e in episodes])) if episodes else float("nan"),
        }
        self._poll_evaluator()
        gauges.update(self._eval_gauges())
        gauges["collectors_rss_mb"] = float(sum(c["rss_mb"] for c in collectors))
        gauges["collectors_cpu_pct"] = float(sum(c["cpu_pct"] for c in collectors))
        learner_stats = process_stats(os.getpid())
        gauges["learner_cpu_pct"] = learner_stats["cpu_pct"]
        gauges["learner_rss_mb"] = learner_stats["rss_mb"]
        if self.device.type == "cuda":
            gauges["gpu_mem_mb"] = torch.cuda.memory_allocated(self.device) / 2**20
            try:
                gauges["gpu_util_pct"] = float(torch.cuda.utilization(self.device))
            except Exception:  # noqa: BLE001 - needs pynvml; memory is still shown
                pass
        return Snapshot(
            time=time.monotonic() - self._t0,
            counters=counters,
            gauges=gauges,
            collectors=collectors,
            startup=dict(self.startup),
        )

    # -- checkpoints ----------------------------------------------------------------------
    def save(self, *, final: bool) -> Path:
        self._collector_totals()
        counters = {k: self.total(k) for k in COUNTER_KEYS}
        payload: dict[str, Any] = {
            "learner": self.learner.state_dict(),
            "counters": counters,
            "config": self.cfg.to_dict(),
            "num_actions": self.num_actions,
            "rng": capture_rng_state(),
        }
        path = self.paths.checkpoints / checkpoint_name(counters["frames"])
        save_checkpoint(path, payload)
        # best.pt: the weights behind the best rolling training return so far.
        score = self._rolling_return()
        if score is not None and score > self.best_return:
            self.best_return = score
            payload["best_return"] = score
            save_checkpoint(self.paths.checkpoints / "best.pt", payload)
        rotate_checkpoints(self.paths.checkpoints, self.cfg.keep_checkpoints, self.paths.checkpoints / "best.pt")
        self._last_checkpoint_t = time.monotonic()
        if final:
            self.final_checkpoint = path
        return path

    def _rolling_return(self, min_episodes: int = 10) -> float | None:
        if self.consolidator is None or len(self.consolidator.episodes) < min_episodes:
            return None
        return float(np.mean([e.ret for e in list(self.consolidator.episodes)[-100:]]))

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
        self.monitor.announce(f"startup: {self.cfg.num_processes} collector process(es) starting on {self.cfg.env_id}")
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
            _run_event_loop(self._main())
        finally:
            self.shutdown()
        return 0

    def shutdown(self) -> None:
        if self.weights is not None:
            self.weights.request_stop()
        if self.supervisor is not None:
            self.supervisor.stop()
        if self.evaluator is not None:
            # It also saw the stop flag; an evaluation in flight is abandoned, not waited for.
            self.evaluator.stop(timeout_s=10)
        try:
            if self.ring is not None and getattr(self, "learner", None) is not None:
                if self.consolidator is not None:
                    # Collectors are stopped: drain everything they committed (a pass takes
                    # at most max_records_per_slot per slot, so loop until a pass is empty).
                    while self.consolidator.poll():
                        pass
                path = self.save(final=True)
                logger.info("final checkpoint: %s (%s)", path, self.stop_reason or "stopped")
                self._write_summary()
        finally:
            if self.monitor is not None:
                if self.ring is not None:
                    self.monitor.update(self.snapshot(), status="stopped")
                self.monitor.close()
            self._release_shared_memory()

    def _write_summary(self) -> None:
        """summary.json: what this process did, for benchmarks and scripts."""
        assert self.supervisor is not None
        summary = {
            "elapsed_s": time.monotonic() - self._t0,
            "stop_reason": self.stop_reason,
            "startup_s": self.startup,
            "counters": {k: self.total(k) for k in COUNTER_KEYS},
            "this_process": dict(self.counters),
            "restarts": self.supervisor.restarts,
            # Exactly-once accounting: after the final drain, every committed record of every
            # slot was consumed once and inserted into replay once.
            "slots": [
                {
                    "write_seq": int(slot.header[R.WRITE_SEQ]),
                    "read_seq": int(slot.header[R.READ_SEQ]),
                    "consumed": int(self.consolidator.records[i]) if self.consolidator else 0,
                    "starts": int(slot.header[R.STARTS]),
                    "env_errors": int(slot.header[R.ENV_ERRORS]),
                }
                for i, slot in enumerate(self.ring.slots)
            ]
            if self.ring is not None
            else [],
            "replay_inserted": self.replay.inserted,
            "bad_episode_records": self.consolidator.bad_episode_records if self.consolidator else 0,
            "learner_phase_s": {k: v / 1e9 for k, v in self.learner_ns.items()},
            "compiled": bool(getattr(self.learner, "compiled", False)),
            "amp_dtype": str(getattr(self.learner, "amp_dtype", None)),
            "final_checkpoint": str(self.final_checkpoint) if self.final_checkpoint else "",
            "evaluations": self.evaluations,
            "last_evaluation": self.last_eval,
        }
        (self.paths.root / "summary.json").write_text(json.dumps(summary, indent=2))

    def _release_shared_memory(self) -> None:
        if self.ring is not None:
            self.ring.close()
        if self.weights is not None:
            self.weights.close()
        if self.supervisor is not None:
            self.supervisor.slots = []
        self.consolidator = None  # type: ignore[assignment]
        segments.release(self.ring_segment, unlink=True)
        segments.release(self.weights_segment, unlink=True)
        self.ring_segment = self.weights_segment = None
        self.ring = None


def _run_event_loop(coro) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is missing on some platforms
        asyncio.run(coro)
    else:
        uvloop.run(coro)
