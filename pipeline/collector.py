"""The collector process: plays the game and writes every step into its ring slot.

A collector builds its own emulator (never inherited from the parent), keeps a CPU copy
of the Q-network in eval mode with one intra-op thread, and acts epsilon-greedy with the
epsilon the learner publishes. Each step becomes one record in the collector's slot of
the transition ring; each finished episode adds a FINAL record (its last observation)
and a msgpack summary. Counters, phase times and a heartbeat live in the slot header,
so the learner's monitor and supervisor read them without any message passing.

When the random branch of epsilon-greedy is taken the network is not evaluated at all:
the action does not depend on it, and skipping it saves the collector's scarcest
resource, CPU time, early in training when epsilon is high.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import episodes as episode_channel
from pipeline import ring as R
from pipeline.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, FLAG_TRUNCATED

# Collectors need one intra-op thread; set before torch is imported in this process.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

ENV_ERROR_LIMIT = 5  # env failures within ENV_ERROR_WINDOW_S before backing off
ENV_ERROR_WINDOW_S = 60.0
ENV_ERROR_BACKOFF_S = 5.0
PARENT_CHECK_STEPS = 256


@dataclass
class CollectorArgs:
    """Everything a collector process needs; plain values so it pickles for spawn."""

    slot: int
    config: dict[str, Any]
    ring_name: str
    weights_name: str
    parent_pid: int
    log_path: str = ""
    fault: str = ""  # fault injection for reliability tests: "" or "env_error:<step>" / "env_error_always"


class _Stop(Exception):
    """The learner asked to stop, or it is gone."""


def collector_main(args: CollectorArgs) -> None:
    """Process entry point (target of a spawn Process)."""
    # Ctrl-C in a terminal reaches the whole process group; the learner decides when
    # collectors stop (through the weights block), so they ignore SIGINT themselves.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logger = _make_logger(args)
    collector = None
    try:
        collector = Collector(args, logger)
        collector.run()
    except _Stop:
        pass
    except Exception:  # noqa: BLE001 - the supervisor sees the exit code; log why
        logger.error("collector %d failed:\n%s", args.slot, traceback.format_exc())
        raise
    finally:
        if collector is not None:
            collector.close()


def _make_logger(args: CollectorArgs) -> logging.Logger:
    logger = logging.getLogger(f"mario.collector.{args.slot}")
    logger.propagate = False
    if args.log_path and not logger.handlers:
        handler = logging.FileHandler(args.log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger


class Collector:
    def __init__(self, args: CollectorArgs, logger: logging.Logger) -> None:
        import torch

        from envs import make_env, preprocess_ns
        from models import QNetwork
        from pipeline.shm import attach_segment
        from pipeline.weights import StateLoader, WeightsBlock

        torch.set_num_threads(1)
        self.torch = torch
        self.args = args
        self.cfg = args.config
        self.logger = logger
        self._make_env = make_env
        self._preprocess_ns = preprocess_ns
        self.ring_segment = attach_segment(args.ring_name)
        self.weights_segment = attach_segment(args.weights_name)
        ring = R.TransitionRing.from_buffer(self.ring_segment.buf)
        self.slot = ring.slots[args.slot]
        self.header = self.slot.header
        self.weights = WeightsBlock(self.weights_segment.buf)
        self.header[R.PID] = os.getpid()
        self.header[R.STARTS] = int(self.header[R.STARTS]) + 1
        self.header[R.STATE] = R.STATE_STARTING
        self.header[R.HEARTBEAT_NS] = time.monotonic_ns()
        self.seed = int(self.cfg["seed"]) + 1000 * args.slot + 1_000_003 * int(self.header[R.STARTS])
        self.rng = np.random.default_rng(self.seed)
        self.env = self._build_env()
        self.num_actions = int(self.env.action_space.n)
        self.model = QNetwork(self.num_actions, self.cfg["frame_stack"], self.cfg["dueling"]).eval()
        self.loader = StateLoader(self.model)
        if self.loader.num_floats != self.weights.num_floats:
            raise RuntimeError(
                f"weights block holds {self.weights.num_floats} floats, the collector's network needs "
                f"{self.loader.num_floats}"
            )
        self.weights_version = 0
        self.stack = np.zeros((self.cfg["frame_stack"], 84, 84), np.uint8)
        self.stack_tensor = torch.from_numpy(self.stack).unsqueeze(0)  # shares memory with stack
        self.env_errors: list[float] = []  # times of recent env failures (bounded by the window)
        self.seen_errors: set[str] = set()
        self.preprocess_done_ns = 0  # preprocessing time of envs this process already replaced
        self.fault_step = -1
        if args.fault.startswith("env_error:"):
            self.fault_step = int(args.fault.split(":", 1)[1])

    # -- helpers ------------------------------------------------------------------------
    def _build_env(self):
        cfg = self.cfg
        return self._make_env(
            cfg["env_id"], action_set=cfg["action_set"], frame_skip=cfg["frame_skip"],
            reward_scale=cfg["reward_scale"], no_progress_steps=cfg["no_progress_steps"],
            max_episode_steps=cfg["max_episode_steps"], seed=self.seed,
        )

    def _should_stop(self) -> bool:
        return self.weights.stop_requested or os.getppid() != self.args.parent_pid

    def _sync_weights(self) -> None:
        version = self.weights.version
        if version != self.weights_version:
            self.weights_version = self.weights.read(self.loader.staging)
            self.loader.load()
            self.header[R.WEIGHTS_VERSION] = self.weights_version

    def _write(self, frame: np.ndarray, action: int, reward: float, flags: int) -> None:
        transitions = self.slot.transitions
        try:
            transitions.wait_for_space(self._should_stop)
        except R.RingStopped:
            raise _Stop from None
        cell = transitions.next_cell()
        cell["frame"] = frame
        cell["action"] = action
        cell["reward"] = reward
        cell["flags"] = flags
        transitions.commit()

    def _env_failed(self) -> None:
        """Log an environment exception, rebuild the env, and back off if it keeps failing.

        The first occurrence of an error is logged with its traceback; repeats of the same
        error get one line each, so a flapping env cannot flood the log.
        """
        now = time.monotonic()
        self.env_errors = [t for t in self.env_errors if now - t < ENV_ERROR_WINDOW_S] + [now]
        self.header[R.ENV_ERRORS] = int(self.header[R.ENV_ERRORS]) + 1
        error = traceback.format_exception_only(*sys.exc_info()[:2])[-1].strip()
        if error not in self.seen_errors:
            if len(self.seen_errors) < 100:
                self.seen_errors.add(error)
            self.logger.error("collector %d: environment raised; rebuilding it:\n%s", self.args.slot,
                              traceback.format_exc())
        else:
            self.logger.error("collector %d: environment raised again (%s); rebuilding it", self.args.slot, error)
        if len(self.env_errors) >= ENV_ERROR_LIMIT:
            self.logger.error("collector %d: %d environment failures in the last %.0f s; backing off %.0f s "
                              "before rebuilding", self.args.slot, len(self.env_errors), ENV_ERROR_WINDOW_S,
                              ENV_ERROR_BACKOFF_S)
            deadline = time.monotonic() + ENV_ERROR_BACKOFF_S
            while time.monotonic() < deadline:
                if self._should_stop():
                    raise _Stop
                self.header[R.HEARTBEAT_NS] = time.monotonic_ns()
                time.sleep(0.1)
            self.env_errors.clear()
        self.preprocess_done_ns += self._preprocess_ns(self.env)  # the new env's clock starts at 0
        try:
            self.env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            pass
        self.env = self._build_env()

    def _maybe_inject_fault(self, steps: int) -> None:
        """Reliability tests only: raise inside env stepping as a broken emulator would."""
        if self.args.fault == "env_error_always":
            raise RuntimeError("injected environment fault (every step)")
        if steps == self.fault_step:
            self.fault_step = -1  # once
            raise RuntimeError(f"injected environment fault at step {steps}")

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        torch = self.torch
        header, cfg = self.header, self.cfg
        check_every = int(cfg["weights_check_steps"])
        frame_skip = 1 if cfg["env_id"].startswith("Catch") else int(cfg["frame_skip"])
        reward_scale = float(cfg["reward_scale"])
        perf = time.perf_counter_ns
        steps = int(header[R.STEPS])
        frames = int(header[R.FRAMES])
        episodes = int(header[R.EPISODES])
        emulate_ns = int(header[R.EMULATE_NS])
        infer_ns = int(header[R.INFER_NS])
        write_ns = int(header[R.WRITE_NS])
        preprocess_base = int(header[R.PREPROCESS_NS])  # earlier processes on this slot
        self._sync_weights()
        header[R.STATE] = R.STATE_RUNNING
        first_reset = True
        while True:
            try:
                obs, info = self.env.reset(seed=self.seed if first_reset else None)
            except Exception:  # noqa: BLE001 - see _env_failed
                self._env_failed()
                continue
            first_reset = False
            self.stack[:] = obs
            flags = FLAG_START
            episode_return = 0.0
            episode_steps = 0
            epsilon = self.weights.epsilon if self.weights.version else 1.0
            while True:
                t0 = perf()
                if self.rng.random() < epsilon:
                    action = int(self.rng.integers(self.num_actions))
                    t1 = t0
                else:
                    with torch.inference_mode():
                        action = int(self.model(self.stack_tensor).argmax(1))
                    t1 = perf()
                try:
                    self._maybe_inject_fault(steps)
                    next_obs, reward, terminated, truncated, info = self.env.step(action)
                except Exception:  # noqa: BLE001 - the episode is cut; replay handles cuts
                    self._env_failed()
                    break
                t2 = perf()
                done = terminated or truncated
                if terminated:
                    flags |= FLAG_TERMINATED
                elif truncated:
                    flags |= FLAG_TRUNCATED
                self._write(self.stack[-1], action, reward, flags)
                flags = 0
                steps += 1
                frames += frame_skip
                episode_steps += 1
                episode_return += reward
                self.stack[:-1] = self.stack[1:]
                self.stack[-1] = next_obs
                if done:
                    self._write(next_obs, 0, 0.0, FLAG_FINAL)
                t3 = perf()
                # The preprocessing wrappers time themselves; the rest of env.step is emulation.
                preprocess_ns = preprocess_base + self.preprocess_done_ns + self._preprocess_ns(self.env)
                infer_ns += t1 - t0
                emulate_ns += t2 - t1 - (preprocess_ns - int(header[R.PREPROCESS_NS]))
                write_ns += t3 - t2
                header[R.PREPROCESS_NS] = preprocess_ns
                header[R.STEPS] = steps
                header[R.FRAMES] = frames
                header[R.EMULATE_NS] = emulate_ns
                header[R.INFER_NS] = infer_ns
                header[R.WRITE_NS] = write_ns
                header[R.HEARTBEAT_NS] = time.monotonic_ns()
                if steps % check_every == 0:
                    self._sync_weights()
                    epsilon = self.weights.epsilon
                if steps % PARENT_CHECK_STEPS == 0 and self._should_stop():
                    raise _Stop
                if done:
                    episodes += 1
                    header[R.EPISODES] = episodes
                    summary = episode_channel.EpisodeSummary(
                        ret=float(episode_return / reward_scale), length=episode_steps,
                        x_pos=int(info.get("x_pos", 0)), flag_get=bool(info.get("flag_get", False)),
                        world=int(info.get("world", 0)), stage=int(info.get("stage", 0)),
                        collector=self.args.slot, weights_version=self.weights_version,
                        epsilon=float(epsilon), truncated=bool(truncated),
                    )
                    episode_channel.send(self.slot.episodes, summary, self._should_stop)
                    self._sync_weights()
                    break
            if self._should_stop():
                raise _Stop

    def close(self) -> None:
        from pipeline.shm import release

        self.header[R.STATE] = R.STATE_STOPPED
        self.slot = self.header = None  # type: ignore[assignment]
        self.weights.close()
        release(self.ring_segment, unlink=False)
        release(self.weights_segment, unlink=False)


def default_log_path(run_path: str | Path, slot: int) -> str:
    return str(Path(run_path) / "logs" / f"collector-{slot}.log")
