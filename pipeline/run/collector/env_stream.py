"""One environment of a collector, the ring slot it writes to, and its episode's state.

A collector steps several of these in lockstep (:mod:`~pipeline.run.collector.collector_main`); each owns
one ring slot, so each is a single producer writing whole episodes in order. The totals
carry on from the slot's counters, so a restarted collector continues them.
"""

from __future__ import annotations

import numpy as np

from pipeline.learning.frontier import EpisodeTrace
from pipeline.transport import ring as R


class EnvStream:
    """One environment of a collector and the ring slot it writes to."""

    def __init__(self, env, slot: R.Slot, seed: int, stack: np.ndarray) -> None:
        self.env = env
        self.slot = slot
        self.counters = slot.counters
        self.seed = seed
        self.stack = stack  # a view into the collector's (K, S, 84, 84) batch
        self.needs_reset = True
        self.first_reset = True
        self.flags = 0
        self.episode_return = 0.0
        self.episode_steps = 0
        # Carry on from the slot's counters: a restarted collector continues the totals.
        self.steps = self.counters.steps
        self.frames = self.counters.frames
        self.episodes = self.counters.episodes
        self.preprocess_done_ns = 0  # preprocessing time of envs of this stream already replaced
        self.trace: EpisodeTrace | None = None  # the episode's actions from the level's start
        self.replayed_steps = 0  # steps replayed to this episode's start point
        self.stage = ""  # the episode's stage, "W-S" (frontier starts: whose archive it feeds)
        # The trajectory's actions this episode plays first, recorded as its own
        # (frontier_demo_steps), and how many it has played; the policy acts after them.
        self.demo_actions: list[int] = []
        self.demo_played = 0

    def action(self, chosen: int) -> int:
        """The action this step plays: the next demonstrated one while any is left, else ``chosen``."""
        if self.demo_played < len(self.demo_actions):
            self.demo_played += 1
            return self.demo_actions[self.demo_played - 1]
        return chosen

    @property
    def policy_start(self) -> int:
        """Steps from the level's start to where the policy took over this episode (0: the level's start)."""
        return self.replayed_steps + len(self.demo_actions)
