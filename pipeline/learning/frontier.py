"""Restarts near the frontier: a collector's best trajectory so far, and where to restart on it.

Go-Explore's "return, then explore" (Ecoffet et al., 2021) and the backward curriculum of
Salimans and Chen (2018, Montezuma's Revenge from one demonstration), with the agent's
own experience as the demonstration: a share of training episodes do not start at the
level's start but at a state on the furthest trajectory the collector has played, and
explore from there. Obstacles that the agent passed once by luck (a tall pipe of World
1-1 needs A held for ~7 agent steps) are then met again many times, from the states just
before them, instead of once per lucky episode.

How the collector returns to such a state: a fixed stage is deterministic given the
actions (``reset`` restores the same snapshot; the game's own randomness comes from its
frame counter), so it resets as usual and replays the recorded actions from the start,
``frame_skip`` emulator frames per replayed step. nes-py 8.2.1 keeps one snapshot per
emulator (``_backup``/``_restore``, the one ``reset`` restores), so to use a point more
than once (``frontier_point_episodes`` > 1) each env keeps a second emulator of the stage
(:class:`envs.mario.MarioEnv`'s point emulator): it is power-cycled past the start screen
(about 220 frames), replays the prefix once and saves the point, and the next episodes
from that point restore it for nothing. Either way the frames are counted
(``replayed_frames``) and never recorded as transitions.

The archive keeps one trajectory: the action sequence from the level's start up to the
step where its x position was greatest (before the step that ended it), of the episode
that went furthest. A restart point is a uniform step of it, so every obstacle on the way
is met in proportion to the steps the agent spent in front of it. Evaluation always
starts from the level's start.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EpisodeTrace", "FrontierArchive"]


class EpisodeTrace:
    """The actions and x positions of one env's current episode, counted from the level's start.

    Pre-allocated for ``capacity`` steps; an episode longer than that stops being recorded
    (``overflowed``) and is never offered to the archive.
    """

    def __init__(self, capacity: int) -> None:
        self.actions = np.zeros(capacity, np.int16)
        self.x_pos = np.zeros(capacity, np.int32)
        self.length = 0
        self.overflowed = False

    def clear(self) -> None:
        self.length = 0
        self.overflowed = False

    def copy_from(self, other: EpisodeTrace) -> None:
        """Start over as a copy of ``other`` (an episode continued from the same point)."""
        self.length, self.overflowed = other.length, other.overflowed
        self.actions[: other.length] = other.actions[: other.length]
        self.x_pos[: other.length] = other.x_pos[: other.length]

    def append(self, action: int, x_pos: int) -> None:
        """Record one agent step (its action and the x position it led to)."""
        if self.length == len(self.actions):
            self.overflowed = True
            return
        self.actions[self.length] = action
        self.x_pos[self.length] = x_pos
        self.length += 1


class FrontierArchive:
    """A collector's furthest trajectory and the restart points drawn on it.

    Args:
        share: probability that an episode starts from a restart point (0 disables).
        rng: the collector's generator.
    """

    def __init__(self, share: float, rng: np.random.Generator) -> None:
        if not 0.0 <= share < 1.0:
            raise ValueError(f"restart share must be in [0, 1), got {share!r}")
        self.share = share
        self.rng = rng
        self.actions = np.zeros(0, np.int16)  # the best trajectory, up to its furthest x
        self.best_x = -1

    def offer(self, trace: EpisodeTrace) -> bool:
        """Keep the finished episode ``trace`` if it went further than the kept trajectory;
        return whether it did.

        Its last step ended the episode (a death, the flag, a cut): the state it led to is
        no place to start from, so only the steps before it count.
        """
        if trace.overflowed or trace.length < 2:
            return False
        x_pos = trace.x_pos[: trace.length - 1]
        furthest = int(np.argmax(x_pos))  # the first step at the maximum
        if int(x_pos[furthest]) <= self.best_x:
            return False
        self.best_x = int(x_pos[furthest])
        self.actions = trace.actions[: furthest + 1].copy()
        return True

    def draw_restart(self) -> int:
        """Steps of the kept trajectory to replay before the next episode (0: the level's start)."""
        if self.share == 0.0 or len(self.actions) == 0 or self.rng.random() >= self.share:
            return 0
        return int(self.rng.integers(1, len(self.actions) + 1))
