"""Frontier starts in a collector: an episode that begins at a point of the furthest
trajectory so far, reached by restoring a snapshot along it and replaying its recorded
actions from there.

With ``frontier_start_share`` > 0 a share of a collector's episodes start near the
frontier (:class:`~pipeline.learning.frontier.FrontierArchive` keeps the trajectory and
draws the start). The env resets as usual, is put into the state of the last snapshot
before that point (:mod:`~pipeline.learning.trajectory_snapshots`; none: the level's
start) and replays the recorded actions from there. Only what follows is recorded, as an
episode of its own; the frames stepped to get there are counted in the home slot's
``replayed_frames``.
"""

from __future__ import annotations

import logging

import numpy as np

from config import Config
from pipeline.learning.frontier import FrontierArchive
from pipeline.learning.trajectory_snapshots import TrajectorySnapshots
from pipeline.run.collector.env_stream import EnvStream
from pipeline.transport import ring as R
from pipeline.transport.weights import WeightsBlock

REPLAY_BEAT_STEPS = 32  # replayed agent steps between heartbeats (~0.1 s on a free core)


class FrontierStarter:
    """Takes a collector's freshly reset envs to their episode's start point."""

    def __init__(
        self,
        archive: FrontierArchive,
        cfg: Config,
        counters: R.SlotCounters,
        weights: WeightsBlock,
        logger: logging.Logger,
        collector_index: int,
    ) -> None:
        self.archive = archive
        self.cfg = cfg
        self.counters = counters  # the collector's home slot: heartbeat and replayed frames
        self.weights = weights
        self.logger = logger
        self.collector_index = collector_index
        self.mismatch_logged = False  # a replay that ended its episode is logged once
        self.snapshots = TrajectorySnapshots()  # shared by the collector's envs (one stage, one process)

    def start(self, stream: EnvStream, obs: np.ndarray) -> np.ndarray | None:
        """Maybe start the episode at a point of the furthest trajectory; return the
        observation it starts from, or None when the run is stopping mid-replay.

        The point is reached by restoring the last snapshot before it and replaying the
        trajectory's steps from there (from the level's start when there is none). The
        whole prefix goes into the env's trace (the episode is still counted from the
        level's start), the frames stepped into ``replayed_frames``; none is recorded.
        Should the replay end an episode (the stage did not replay the same way), the env
        starts at the level's start instead. With ``frontier_demo_steps`` the episode
        starts that many steps before the drawn step, and its first actions are the
        trajectory's (``stream.demo_actions``): recorded as transitions, a demonstration of
        the steps before the drawn one that the policy may not yet take.
        """
        assert stream.trace is not None
        policy_start = self.archive.draw_restart()
        if policy_start == 0:
            return obs
        # With frontier_demo_steps the episode starts that many steps earlier (at least one
        # step into the level) and plays the trajectory's actions up to the drawn step first.
        demo = min(self.cfg.frontier_demo_steps, policy_start - 1)
        steps = policy_start - demo
        env, trace, snapshots = stream.env, stream.trace, self.snapshots
        snapshots.follow(self.archive.actions)
        restored = snapshots.nearest(steps)
        if restored:
            obs = snapshots.restore(env, restored)
            trace.extend(snapshots.trajectory[:restored], snapshots.x_pos[:restored])
        actions = snapshots.trajectory[:steps].tolist()
        for step in range(restored, steps):
            if (step - restored) % REPLAY_BEAT_STEPS == 0:
                # A long trajectory takes seconds to replay (more on a busy core): the
                # supervisor must not take it for a hang, nor wait for it to stop the run.
                self.counters.beat()
                if self.weights.stop_requested:
                    return None
            action = actions[step]
            obs, _, terminated, truncated, info = env.step(action)
            self.counters.replayed_frames += self.cfg.frame_skip
            trace.append(action, int(info["x_pos"]))
            if not (terminated or truncated):
                snapshots.passed(env, step + 1, obs, int(info["x_pos"]))
            else:
                if not self.mismatch_logged:
                    self.mismatch_logged = True
                    self.logger.warning(
                        "collector %d: replaying %d recorded steps ended the episode at step %d; "
                        "that env starts at the level's start this time",
                        self.collector_index,
                        steps,
                        trace.length,
                    )
                trace.clear()
                return env.reset()[0]
        stream.replayed_steps = steps
        stream.demo_actions = snapshots.trajectory[steps:policy_start].tolist()
        return obs
