"""The collector process: plays the game and writes every step into the ring.

A collector builds its own emulators (never inherited from the parent), keeps a CPU
copy of the Q-network in eval mode with one intra-op thread, and acts epsilon-greedy
with the epsilon the learner publishes (:mod:`~pipeline.learning.exploration`).

It steps ``envs_per_collector`` environments in lockstep and chooses their actions with
ONE batched forward pass. Inference is the only per-step cost a collector adds on top
of the emulator; a batch-1 forward of the Nature CNN costs about 1-1.6 ms between
emulator steps (its 6 MB fully connected weights fall out of cache), while one forward
for four stacks costs little more than for one (docs/benchmarks.md has the figures).

Each environment owns one ring slot (one stream: a single producer, whole episodes in
order). Each step becomes one record in that slot; each finished episode adds a FINAL
record (its last observation) and a msgpack summary. The collector's first slot is its
"home": PID, heartbeat, phase times and weights version live in its header (its
:class:`~pipeline.transport.ring.SlotCounters`), so the learner's monitor and supervisor
read them without any message passing.

When every env explores the network is not evaluated at all: the actions do not depend
on it, which saves CPU early in training.

When it looks for new weights it also looks at the weights block's hold: with
``eval_max_lag_frames`` set, the evaluator holds training while an evaluation it has
not started is that many frames overdue, and the collector waits (counted as stall).

With ``frontier_start_share`` > 0 a share of episodes start at a point of the collector's
furthest trajectory so far, reached by replaying its recorded actions
(:mod:`~pipeline.run.collector.frontier_starts`); only what follows is recorded, as an episode of its
own (a START record).
"""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback

import numpy as np

from pipeline.common.child import ParentWatch
from pipeline.common.priority import yield_to_learner
from pipeline.common.seeds import stream_seed
from pipeline.learning.exploration import epsilon_greedy
from pipeline.learning.frontier import EpisodeTrace
from pipeline.run.collector.args import CollectorArgs
from pipeline.run.collector.env_failures import EnvFailures, InjectedFaults
from pipeline.run.collector.env_stream import EnvStream
from pipeline.run.collector.stage_frontiers import StageFrontiers
from pipeline.transport import episodes as episode_channel
from pipeline.transport import ring as R
from pipeline.transport.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, FLAG_TRUNCATED

# Collectors need one intra-op thread; set before torch is imported in this process.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

PARENT_CHECK_STEPS = 256
# A collector looks for new weights between episodes and at least every this many agent
# steps (all its envs together): at Mario's ~150 steps/s per env a few seconds, well within
# the hundred updates of an epoch, and a check is a single read of the version word.
WEIGHTS_CHECK_STEPS = 200
MAX_TRACE_STEPS = 20_000  # longest episode kept for frontier starts when episodes are unlimited
HOLD_CHECK_S = 0.01  # how often a collector held for the evaluator looks again


class _Stop(Exception):
    """The learner asked to stop, or it is gone."""


def collector_main(args: CollectorArgs) -> None:
    """Process entry point (the target of a collector Process)."""
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
    except Exception:
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
        self.parent = ParentWatch(args.parent_pid)  # the learner: stop once it is gone
        import torch

        from envs import make_env, preprocess_ns
        from pipeline.transport.segments import attach_segment

        torch.set_num_threads(1)
        self.torch = torch
        self.args = args
        self.cfg = args.config
        yield_to_learner(self.cfg.collector_niceness)  # the learner gets a core the moment it wants one
        self.logger = logger
        self._make_env = make_env
        self._preprocess_ns = preprocess_ns
        self.ring_segment = attach_segment(args.ring_name)
        self.weights_segment = attach_segment(args.weights_name)
        try:
            self._set_up()
        except BaseException as exc:
            # A failed start (a bad env, an injected crash) lets go of the segments before
            # the exception leaves the process: the set-up's frames hold views into them,
            # and a segment freed at exit under a live view prints a BufferError.
            traceback.clear_frames(exc.__traceback__)
            self.close()
            raise

    def _set_up(self) -> None:
        """Everything a collector builds on its attached segments: its envs and its network."""
        from pipeline.learning.flat_state import StateLoader
        from pipeline.learning.policy import network_of
        from pipeline.transport.weights import WeightsBlock

        args, logger, torch = self.args, self.logger, self.torch
        ring = R.TransitionRing.from_buffer(self.ring_segment.buf)
        slot_indices = args.slots or (args.slot,)
        slots = [ring.slots[i] for i in slot_indices]
        self.home = slots[0]
        self.counters = self.home.counters
        for slot in slots:
            # Stalls on any of its envs' rings beat the collector's heartbeat and add to its
            # stall time: the supervisor and the monitor read the home slot.
            slot.transitions.stats = slot.episodes.stats = self.counters
        self.weights = WeightsBlock(self.weights_segment.buf)
        for slot in slots:
            slot.counters.starts += 1
        self.counters.pid = os.getpid()
        self.counters.state = R.STATE_STARTING
        self.counters.beat()
        starts = self.counters.starts
        number = args.collectors_before + args.slot
        self.rng = np.random.default_rng(stream_seed(self.cfg.seed, number, starts))
        streams_before = args.collectors_before * self.cfg.envs_per_collector
        frame_stack = self.cfg.frame_stack
        self.stacks = np.zeros((len(slots), frame_stack, 84, 84), np.uint8)
        self.stacks_tensor = torch.from_numpy(self.stacks)  # shares memory with stacks
        self.streams = []
        for k, (index, slot) in enumerate(zip(slot_indices, slots)):
            seed = stream_seed(self.cfg.seed, streams_before + index, starts)
            self.streams.append(EnvStream(self._build_env(seed), slot, seed, self.stacks[k]))
        self.num_actions = int(self.streams[0].env.action_space.n)
        self.model = network_of(self.cfg, self.num_actions).eval()
        # Restarts near the frontier: the collector's furthest trajectory per stage, each env's trace.
        self.frontiers: StageFrontiers | None = None
        if self.cfg.frontier_start_share > 0:
            self.frontiers = StageFrontiers(self.cfg, self.rng, args, self.counters, self.weights, logger)
            capacity = self.cfg.max_episode_steps or MAX_TRACE_STEPS
            for stream in self.streams:
                stream.trace = EpisodeTrace(capacity)
        self.loader = StateLoader(self.model)
        if self.loader.num_floats != self.weights.num_floats:
            raise RuntimeError(
                f"weights block holds {self.weights.num_floats} floats, the collector's network needs "
                f"{self.loader.num_floats}"
            )
        self.weights_version = 0
        self.failures = EnvFailures(self.args.slot, self.logger)
        self.faults = InjectedFaults(args.fault)

    # -- helpers ------------------------------------------------------------------------
    def _build_env(self, seed: int):
        return self._make_env(self.cfg.env_id, seed=seed, **self.cfg.env_kwargs())

    def _should_stop(self) -> bool:
        return self.weights.stop_requested or self.parent.gone()

    def _sync_weights(self) -> None:
        version = self.weights.version
        if version != self.weights_version:
            self.weights_version = self.weights.read(self.loader.staging)
            self.loader.load()
            self.counters.weights_version = self.weights_version

    def _wait_while_held(self) -> None:
        """Wait while the evaluator holds training at a due evaluation (``eval_max_lag_frames``).

        Like a full ring, this is back-pressure, not a hang: the wait counts as stall time
        and keeps the heartbeat beating; the stop flag and the parent's death end it.
        """
        if not self.weights.held:
            return
        counted = time.monotonic_ns()
        while self.weights.held and not self._should_stop():
            time.sleep(HOLD_CHECK_S)
            now = time.monotonic_ns()
            self.counters.add_phase_ns("stall", now - counted)
            counted = now
            self.counters.beat()

    def _write(self, slot: R.Slot, frame: np.ndarray, action: int, reward: float, flags: int) -> None:
        transitions = slot.transitions
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

    def _env_failed(self, stream: EnvStream) -> None:
        """Log an environment exception (backing off if it keeps failing: :class:`EnvFailures`),
        rebuild the env and cut the failed episode."""
        stream.counters.env_errors += 1
        if not self.failures.record(should_stop=self._should_stop, beat=self.counters.beat):
            raise _Stop
        stream.preprocess_done_ns += self._preprocess_ns(stream.env)  # the new env's clock starts at 0
        try:
            stream.env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close too
            pass
        stream.env = self._build_env(stream.seed)
        stream.needs_reset = True

    def _reset(self, stream: EnvStream) -> bool:
        try:
            obs, info = stream.env.reset(seed=stream.seed if stream.first_reset else None)
            stream.replayed_steps = 0
            stream.demo_actions, stream.demo_played = [], 0
            if self.frontiers is not None:
                assert stream.trace is not None
                stream.trace.clear()
                start = self.frontiers.start(stream, obs, info)
                if start is None:
                    raise _Stop
                obs = start
        except _Stop:
            raise
        except Exception:  # noqa: BLE001 - see _env_failed
            self._env_failed(stream)
            return False
        stream.first_reset = stream.needs_reset = False
        stream.stack[:] = obs
        stream.flags = FLAG_START
        stream.episode_return = 0.0
        stream.episode_steps = 0
        return True

    def _preprocess_total(self) -> int:
        return sum(s.preprocess_done_ns + self._preprocess_ns(s.env) for s in self.streams)

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> None:
        torch = self.torch
        counters, cfg = self.counters, self.cfg
        check_every = max(1, WEIGHTS_CHECK_STEPS // len(self.streams))  # in rounds
        frame_skip = 1 if cfg.env_id.startswith("Catch") else cfg.frame_skip
        reward_scale = float(cfg.reward_scale)
        perf = time.perf_counter_ns
        # Phase times accumulate in locals and are stored once a round; a restarted
        # collector carries on from what earlier processes on this slot counted.
        emulate_ns = counters.phase_ns("emulate")
        infer_ns = counters.phase_ns("infer")
        write_ns = counters.phase_ns("write")
        preprocess_base = counters.phase_ns("preprocess")
        preprocess_seen = self._preprocess_total()
        self._sync_weights()
        epsilon = self.weights.epsilon if self.weights.version else 1.0
        counters.state = R.STATE_RUNNING
        rounds = 0
        while True:
            t0 = perf()
            for stream in self.streams:
                while stream.needs_reset and not self._reset(stream):
                    pass
            # Exploration for every env at once; one forward for the greedy ones.
            actions, greedy = epsilon_greedy(self.rng, len(self.streams), self.num_actions, epsilon)
            t1 = perf()
            if greedy.any():
                with torch.inference_mode():
                    best = self.model(self.stacks_tensor).argmax(1).numpy()
                actions = np.where(greedy, best, actions)
            t2 = perf()
            write_ns_round = 0
            episode_ended = False
            for stream, chosen in zip(self.streams, actions.tolist()):
                action = stream.action(chosen)
                try:
                    self.faults.on_step(stream.steps)
                    next_obs, reward, terminated, truncated, info = stream.env.step(action)
                except Exception:  # noqa: BLE001 - the episode is cut; replay handles cuts
                    self._env_failed(stream)
                    continue
                tw = perf()
                done = terminated or truncated
                flags = stream.flags | (FLAG_TERMINATED if terminated else FLAG_TRUNCATED if truncated else 0)
                self._write(stream.slot, stream.stack[-1], action, reward, flags)
                stream.flags = 0
                stream.steps += 1
                stream.frames += frame_skip
                stream.episode_steps += 1
                stream.episode_return += reward
                stream.stack[:-1] = stream.stack[1:]
                stream.stack[-1] = next_obs
                if stream.trace is not None:
                    stream.trace.append(action, int(info["x_pos"]))
                if done:
                    self._write(stream.slot, next_obs, 0, 0.0, FLAG_FINAL)
                    if self.frontiers is not None:
                        self.frontiers.finish(stream)
                stream.counters.steps = stream.steps
                stream.counters.frames = stream.frames
                te = perf()
                write_ns_round += te - tw
                if done:
                    episode_ended = True
                    stream.episodes += 1
                    stream.counters.episodes = stream.episodes
                    summary = episode_channel.EpisodeSummary(
                        ret=float(stream.episode_return / reward_scale),
                        length=stream.episode_steps,
                        x_pos=int(info.get("x_pos", 0)),
                        flag_get=bool(info.get("flag_get", False)),
                        world=int(info.get("world", 0)),
                        stage=int(info.get("stage", 0)),
                        collector=self.args.slot,
                        weights_version=self.weights_version,
                        epsilon=float(epsilon),
                        truncated=bool(truncated),
                        replayed_steps=stream.replayed_steps,
                    )
                    episode_channel.send(stream.slot.episodes, summary, self._should_stop)
                    stream.needs_reset = True
            t3 = perf()
            # The preprocessing wrappers time themselves; the rest of stepping is emulation
            # (resets included, which happen at the top of the round).
            preprocess_now = self._preprocess_total()
            preprocess_delta = preprocess_now - preprocess_seen
            preprocess_seen = preprocess_now
            infer_ns += t2 - t1
            write_ns += write_ns_round
            emulate_ns += (t1 - t0) + (t3 - t2 - write_ns_round) - preprocess_delta
            counters.set_phase_ns("preprocess", preprocess_base + preprocess_now)
            counters.set_phase_ns("emulate", emulate_ns)
            counters.set_phase_ns("infer", infer_ns)
            counters.set_phase_ns("write", write_ns)
            counters.beat()
            rounds += 1
            # New weights between episodes, and at least every WEIGHTS_CHECK_STEPS steps.
            if episode_ended or rounds % check_every == 0:
                self._wait_while_held()
                self._sync_weights()
                epsilon = self.weights.epsilon
            if self.weights.stop_requested or (rounds % PARENT_CHECK_STEPS == 0 and self._should_stop()):
                raise _Stop

    def close(self) -> None:
        from pipeline.transport.segments import release

        # Also called by a start that failed part-way: whatever was built is dropped.
        if getattr(self, "counters", None) is not None:
            self.counters.state = R.STATE_STOPPED
        # Drop every view into the ring so its segment can close (the frontier starter
        # holds the slot's counters too).
        self.home = self.counters = None  # type: ignore[assignment]
        self.frontiers = None
        self.streams = []
        if getattr(self, "weights", None) is not None:
            self.weights.close()
        release(self.ring_segment, unlink=False)
        release(self.weights_segment, unlink=False)
