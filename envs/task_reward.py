"""The reward every figure of this project was measured with, computed from the emulator.

gym-super-mario-bros 9 rewards a new best x (clipped at 5 a step), the clock, a death and
score and coin terms; the learning benchmark, the shipped agents and every result in
docs were measured on version 7's reward, so the project computes that one itself, from
the info dict the emulator returns with each frame:

* the x delta since the last frame (``x_pos``: RAM 0x6D * 256 + 0x86), taken as 0 when it
  jumps by more than 5 (a pipe or a stage change teleports Mario);
* the clock's change (``time``, which only counts down: a rise, at a reset, is 0);
* -25 on a frame where Mario is dying or dead (``is_dying``/``is_dead``: the player
  state RAM 0x0E is 0x0B or 0x06, or his y viewport 0xB5 is below the screen);
* the sum clipped to [-15, 15], so a death is -15.

The info is built after the frame and before the emulator's own skip frames (the death
animation, area changes), the moment version 7 read its RAM, so every frame's reward is
equal to version 7's (checked frame for frame over 154k frames of both packages on the
same ROM and controller bytes: 1-1, 1-2, 4-1, the full game, Lost Levels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REWARD_LIMIT = 15.0  # the reward is clipped to +-REWARD_LIMIT
DEATH_PENALTY = -25.0  # before the clip: a death step is -15 unless the clock also ticks
TELEPORT_DX = 5  # an x change larger than this in one frame is a teleport, not progress


class TaskReward:
    """Per-emulator reward state: the x position and clock of the previous frame."""

    def __init__(self) -> None:
        self._x_last = 0
        self._time_last = 0

    def reset(self, info: Mapping[str, Any]) -> None:
        """Start from a reset's info (the x and clock the first step is measured from)."""
        self._x_last = int(info["x_pos"])
        self._time_last = int(info["time"])

    def state(self) -> tuple[int, int]:
        """What the next reward depends on (for a snapshot of the env)."""
        return self._x_last, self._time_last

    def set_state(self, state: tuple[int, int]) -> None:
        """Put back a :meth:`state`."""
        self._x_last, self._time_last = state

    def step(self, info: Mapping[str, Any]) -> float:
        """The reward of the frame whose info this is."""
        x, time = int(info["x_pos"]), int(info["time"])
        dx = x - self._x_last
        if abs(dx) > TELEPORT_DX:
            dx = 0
        dt = min(time - self._time_last, 0)
        death = DEATH_PENALTY if info["is_dying"] or info["is_dead"] else 0.0
        self._x_last, self._time_last = x, time
        return max(-REWARD_LIMIT, min(REWARD_LIMIT, dx + dt + death))
