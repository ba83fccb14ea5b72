"""Snapshots along a collector's furthest trajectory, so a frontier start replays a few
steps from the nearest one instead of the whole prefix from the level's start.

A frontier start returns to step ``s`` of the kept trajectory. Replaying ``s`` steps from
the level's start cost the collectors 2.1 emulator frames for every frame they recorded
on 1-3 (restarts drawn uniformly along a 415-step trajectory). Each replay now leaves
a snapshot (:mod:`envs.snapshots`) every ``spacing`` steps it passes, and the next start
restores the last one at or before its step and replays only the rest.

A snapshot holds the emulator's whole state, about 260 KB. The spacing starts at
``FIRST_SPACING`` steps and doubles whenever the trajectory would need more than
``MOST_SNAPSHOTS`` of them (the snapshots off the new grid are dropped), so a collector
holds at most about 17 MB of them, whatever the trajectory's length.

The snapshots belong to one trajectory. When the archive keeps another, those within the
prefix the two share stay (they are the same states); the rest are dropped. The x
positions of the trajectory's steps are kept beside them, since a start's trace (from
the level's start) needs them for the steps it did not replay.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from envs.snapshots import EnvSnapshot, restore, take
from pipeline.learning.frontier import shared_steps

FIRST_SPACING = 8  # trajectory steps between snapshots while the trajectory is short
MOST_SNAPSHOTS = 64  # snapshots kept at most; beyond, the spacing doubles


class TrajectorySnapshots:
    """Snapshots of the states along one trajectory, taken as replays pass them."""

    def __init__(self) -> None:
        self.trajectory = np.zeros(0, np.int16)  # the actions the snapshots were taken along
        self.x_pos = np.zeros(0, np.int32)  # x after each step, known for steps [0, known)
        self.known = 0
        self.spacing = FIRST_SPACING
        self.snapshots: dict[int, EnvSnapshot] = {}  # steps replayed -> the state after them

    def follow(self, trajectory: np.ndarray) -> None:
        """Keep only what holds for ``trajectory`` (the archive's, which may have changed)."""
        if trajectory is self.trajectory:
            return
        shared = shared_steps(self.trajectory, trajectory)
        self.snapshots = {step: snap for step, snap in self.snapshots.items() if step <= shared}
        x_pos = np.zeros(len(trajectory), np.int32)
        self.known = min(self.known, shared)
        x_pos[: self.known] = self.x_pos[: self.known]
        self.trajectory, self.x_pos = trajectory, x_pos
        while len(trajectory) > MOST_SNAPSHOTS * self.spacing:
            self.spacing *= 2
            self.snapshots = {step: snap for step, snap in self.snapshots.items() if step % self.spacing == 0}

    def nearest(self, steps: int) -> int:
        """The most steps at or before ``steps`` that a snapshot was taken after (0: none)."""
        step = steps - steps % self.spacing
        while step > 0 and step not in self.snapshots:
            step -= self.spacing
        return step

    def restore(self, env: gymnasium.Env, steps: int) -> np.ndarray:
        """Put ``env`` into the state after ``steps`` steps (a snapshot's); its observation."""
        return restore(env, self.snapshots[steps])

    def passed(self, env: gymnasium.Env, steps: int, obs: np.ndarray, x_pos: int) -> None:
        """A replay has just played step ``steps`` (1-based) of the trajectory: note its
        x, and take a snapshot on the grid if none is kept."""
        if steps == self.known + 1:
            self.x_pos[steps - 1] = x_pos
            self.known = steps
        if steps % self.spacing == 0 and steps not in self.snapshots:
            self.snapshots[steps] = take(env, obs)
