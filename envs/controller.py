"""The controller between the action set and the emulator for full jumps beside hops.

The game's jump rises as long as A stays held (up to 64 px from a standstill; one frame
of A gives 24 px, one agent step of 4 frames 33 px). An agent that chooses every 4 frames
by epsilon-greedy holds A over several steps rarely, so a jump that needs the full height
(1-3's gap at x ~775) is one it seldom sees. The ``right_only_full`` action set offers a
full jump as an action of its own: its byte carries :data:`envs.actions.FULL_JUMP_BIT`,
and :class:`FullJump` turns that into the game's buttons. Once such a press starts a jump
from the ground, A stays pressed for as long as Mario rises, whatever the agent chooses
meanwhile, and is released at the top. Everything else is the plain joypad: the hops
(right+A without the mark), a full-jump press in the air, an A held on from before a
landing (the NES starts a jump only on a fresh press) and every action without A reach the
emulator unchanged.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
import numpy as np

from envs.actions import BUTTON_BITS, FULL_JUMP_BIT

__all__ = ["FullJump"]


class FullJump(gymnasium.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Hold A through a jump's rise when a full-jump press starts it from the ground.

    Wraps :class:`envs.mario.MarioEnv` directly (controller bytes, one frame per step),
    below sticky actions and the action set; takes bytes of 0-511 and sends 0-255.
    """

    A_BIT = BUTTON_BITS["A"]

    def __init__(self, env: gymnasium.Env[np.ndarray, int]) -> None:
        super().__init__(env)
        if not (hasattr(env, "on_ground") and hasattr(env, "rising")):
            raise TypeError(f"FullJump wraps a MarioEnv (needs on_ground and rising), got {type(env).__name__}")
        self._holding = False  # a full jump is rising: A stays pressed
        self._taking_off = False  # the frame after the press that started it

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the emulator; no jump is held."""
        self._holding = self._taking_off = False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Send ``action`` without its full-jump mark, with A added while a full jump rises."""
        full = bool(int(action) & FULL_JUMP_BIT)
        byte = int(action) & ~FULL_JUMP_BIT
        mario: Any = self.env
        if self._holding:
            # The game shows a jump pressed on one frame from the next one on: on the frame
            # after the press Mario may still stand, and A stays pressed there too.
            if mario.rising or (self._taking_off and mario.on_ground):
                byte |= self.A_BIT
            else:
                self._holding = False  # at the top (or it never took off): A is the agent's again
            self._taking_off = False
        if not self._holding and full and byte & self.A_BIT and mario.on_ground:
            # A full jump from the ground: it starts if the press is fresh (else Mario stays
            # on the ground and the frame after next ends the hold).
            self._holding = self._taking_off = True
        return self.env.step(byte)
