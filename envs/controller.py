"""A controller change between the agent's buttons and the emulator: the held jump.

The game's jump rises as long as A stays held (up to 64 px from a standstill; one frame
of A gives 24 px, one agent step of 4 frames 33 px). An agent that chooses every 4 frames
by epsilon-greedy holds A over several steps rarely, so a jump that needs the full height
(1-3's gap at x ~775, the tall pipes of 1-1) is one it seldom sees. :class:`HeldJump`
makes every jump a held one: once a frame with A starts a jump from the ground, A stays
pressed for as long as Mario rises, whatever the agent chooses meanwhile, and is released
at the top. Everything else is the plain joypad: a press in the air, an A held on from
before a landing (the NES starts a jump only on a fresh press) and every action without A
reach the emulator unchanged.

It changes the controller, not the game, so figures with it are not comparable with the
field's plain joypad; the short hop is gone (every jump is a full one).
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np

from envs.actions import BUTTON_BITS

__all__ = ["HeldJump"]


class HeldJump(gymnasium.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Hold A through a jump's rise once a frame with A leaves the ground.

    Wraps :class:`envs.mario.MarioEnv` directly (controller bytes, one frame per step),
    below sticky actions and the action set.
    """

    A_BIT = BUTTON_BITS["A"]

    def __init__(self, env: gymnasium.Env[np.ndarray, int]) -> None:
        super().__init__(env)
        if not (hasattr(env, "on_ground") and hasattr(env, "rising")):
            raise TypeError(f"HeldJump wraps a MarioEnv (needs on_ground and rising), got {type(env).__name__}")
        self._holding = False  # a jump started by A is rising: A stays pressed
        self._taking_off = False  # the frame after the press that started it

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the emulator; no jump is held."""
        self._holding = self._taking_off = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Send ``action``, with A added while a jump it started still rises."""
        byte = int(action)
        mario: Any = self.env
        if self._holding:
            # The game shows a jump pressed on one frame from the next one on: on the frame
            # after the press Mario may still stand, and A stays pressed there too.
            if mario.rising or (self._taking_off and mario.on_ground):
                byte |= self.A_BIT
            else:
                self._holding = False  # at the top (or it never took off): A is the agent's again
            self._taking_off = False
        if not self._holding and byte & self.A_BIT and mario.on_ground:
            # A from the ground: a jump starts if the press is fresh (else Mario stays on the
            # ground and the frame after next ends the hold).
            self._holding = self._taking_off = True
        return self.env.step(byte)
