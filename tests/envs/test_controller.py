"""Tests for envs.controller.FullJump on the real emulator, against the buttons computed here."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest

import envs
from envs.actions import BUTTON_BITS, FULL_JUMP_BIT, button_lists
from envs.controller import FullJump
from envs.mario import MarioEnv
from envs.wrappers import ActionSet

A = BUTTON_BITS["A"]
RIGHT = BUTTON_BITS["right"]
FULL_A = A | FULL_JUMP_BIT


class SentBytes(gymnasium.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Records the controller byte each frame reaches the emulator with, and whether Mario
    was rising before it; exposes the adapter's on_ground and rising to the wrapper above."""

    def __init__(self, env: MarioEnv) -> None:
        super().__init__(env)
        self.sent: list[int] = []
        self.rising_before: list[bool] = []
        self.grounded_before: list[bool] = []

    @property
    def on_ground(self) -> bool:
        return self.env.on_ground  # type: ignore[attr-defined]

    @property
    def rising(self) -> bool:
        return self.env.rising  # type: ignore[attr-defined]

    def step(self, action: int) -> Any:
        self.rising_before.append(self.rising)
        self.grounded_before.append(self.on_ground)
        self.sent.append(int(action))
        return self.env.step(action)


def play(bytes_: list[int], *, controller: bool = True) -> tuple[list[int], list[int], SentBytes]:
    """Send ``bytes_`` from the start of 1-1 (through FullJump, or straight to the emulator):
    the height above the start per frame, the bytes that arrived, and the recorder."""
    recorder = SentBytes(MarioEnv("SuperMarioBros-1-1-v0"))
    env: gymnasium.Env = FullJump(recorder) if controller else recorder
    _, info = env.reset()
    standing = info["y_pos"]
    heights = []
    for byte in bytes_:
        _, _, terminated, _, info = env.step(byte)
        assert not terminated
        heights.append(info["y_pos"] - standing)
    env.close()
    return heights, recorder.sent, recorder


def test_one_frame_of_a_full_jump_holds_a_through_the_rise_and_makes_the_full_jump() -> None:
    frames = 60
    hop, _, _ = play([A] + [0] * (frames - 1))
    full, sent, recorder = play([FULL_A] + [0] * (frames - 1))
    held_by_hand, _, _ = play([A] * frames, controller=False)
    assert full == held_by_hand  # the same frames as a player holding A throughout
    # Measured on the game (by hand, frame by frame): from a standstill one frame of A
    # rises 24 px, A held to the top 64.
    assert (max(hop), max(full)) == (24, 64)
    # A reached the emulator on the press, on the next frame (the game shows the jump from
    # the frame after the press: Mario still stands), then exactly on the frames Mario was
    # rising before, and on no frame after the top; no byte kept the mark.
    assert recorder.grounded_before[1] and not recorder.rising_before[1]
    rising = [i for i in range(frames) if recorder.rising_before[i]]
    assert rising == list(range(2, len(rising) + 2)) and len(rising) >= 20
    assert [i for i, byte in enumerate(sent) if byte & A] == [0, 1, *rising]
    assert max(sent) <= 0xFF


def test_hops_and_moves_without_the_mark_are_the_plain_joypads() -> None:
    # Random play with every unmarked press (hops included): byte for byte the joypad.
    rng = np.random.default_rng(0)
    presses = [0, RIGHT, RIGHT | A, RIGHT | BUTTON_BITS["B"], RIGHT | A | BUTTON_BITS["B"], A, BUTTON_BITS["left"]]
    moves = [int(b) for b in rng.choice(presses, size=200)]
    assert play(moves)[:2] == play(moves, controller=False)[:2]


def test_a_full_press_held_on_jumps_once_and_a_full_press_in_the_air_is_not_held() -> None:
    # A held on for 100 frames: one jump, as on the plain joypad (a jump needs a fresh press).
    assert play([FULL_A] * 100)[0] == play([A] * 100, controller=False)[0]
    # A full jump, then a full press again on the way down (past the top, before landing):
    # no hold starts in the air, so those bytes arrive as sent, without the mark.
    frames = [FULL_A] + [0] * 31 + [FULL_A, FULL_A] + [0] * 10
    _, sent, recorder = play(frames)
    top = next(i for i in range(2, len(frames)) if not recorder.rising_before[i])
    assert top < 32 and not recorder.grounded_before[32] and not recorder.grounded_before[33]
    assert sent[top:] == [byte & ~FULL_JUMP_BIT for byte in frames[top:]]


def test_full_jump_needs_the_mario_adapter_and_the_bare_emulator_refuses_the_mark() -> None:
    with pytest.raises(TypeError, match="MarioEnv"):
        FullJump(ActionSet(MarioEnv("SuperMarioBros-1-1-v0"), "simple"))  # type: ignore[arg-type]
    env = MarioEnv("SuperMarioBros-1-1-v0")
    env.reset()
    with pytest.raises(ValueError, match="0-255"):
        env.step(FULL_A)
    env.close()


def test_through_make_env_a_full_jump_step_rises_higher_than_a_hop_step() -> None:
    """The agent's view with right_only_full: one agent step (4 frames) of the full right+A,
    then right, rises 20+ px higher than one step of the hop right+A, then right."""
    names = [" ".join(buttons) for buttons in button_lists("right_only_full")]
    hop, full, right = names.index("right A"), names.index("right A full_jump"), names.index("right")
    peaks = {}
    for jump in (hop, full):
        env = envs.make_env("SuperMarioBros-1-1-v0", action_set="right_only_full")
        assert env.action_space.n == 7
        _, info = env.reset()
        ys = [info["y_pos"]]
        for action in [jump] + [right] * 12:
            _, _, _, _, info = env.step(action)
            ys.append(info["y_pos"])
        env.close()
        peaks[jump] = max(ys) - ys[0]
    assert peaks[full] - peaks[hop] >= 20, peaks
