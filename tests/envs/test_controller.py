"""Tests for envs.controller.HeldJump on the real emulator, against the buttons computed here."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest

import envs
from envs.actions import BUTTON_BITS, button_lists
from envs.controller import HeldJump
from envs.mario import MarioEnv
from envs.wrappers import ActionSet

A = BUTTON_BITS["A"]
RIGHT = BUTTON_BITS["right"]


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


def play(bytes_: list[int], *, held: bool) -> tuple[list[int], list[int], SentBytes]:
    """Send ``bytes_`` from the start of 1-1: the height above the start per frame, and the
    bytes that arrived."""
    recorder = SentBytes(MarioEnv("SuperMarioBros-1-1-v0"))
    env: gymnasium.Env = HeldJump(recorder) if held else recorder
    _, info = env.reset()
    standing = info["y_pos"]
    heights = []
    for byte in bytes_:
        _, _, terminated, _, info = env.step(byte)
        assert not terminated
        heights.append(info["y_pos"] - standing)
    env.close()
    return heights, recorder.sent, recorder


def test_one_frame_of_a_holds_a_through_the_rise_and_makes_the_full_jump() -> None:
    frames = 60
    one_frame = [A] + [0] * (frames - 1)
    plain, _, _ = play(one_frame, held=False)
    held, sent, recorder = play(one_frame, held=True)
    full, _, _ = play([A] * frames, held=False)
    assert held == full  # the same frames as a player holding A throughout
    # Measured on the game (by hand, frame by frame): from a standstill one frame of A
    # rises 24 px, A held to the top 64.
    assert (max(plain), max(held)) == (24, 64)
    # A reached the emulator on the press, on the next frame (the game shows the jump from
    # the frame after the press: Mario still stands), then exactly on the frames Mario was
    # rising before, and on no frame after the top.
    assert recorder.grounded_before[1] and not recorder.rising_before[1]
    rising = [i for i in range(frames) if recorder.rising_before[i]]
    assert rising == list(range(2, len(rising) + 2)) and len(rising) >= 20
    assert [i for i, byte in enumerate(sent) if byte & A] == [0, 1, *rising]


def test_a_held_a_after_landing_does_not_jump_again_and_moves_without_a_are_the_joypads() -> None:
    # A held on for 100 frames: one jump, as on the plain joypad (a jump needs a fresh press).
    assert play([A] * 100, held=True)[:2] == play([A] * 100, held=False)[:2]
    # Random play without A (standing, walking, running, left): byte for byte the joypad.
    rng = np.random.default_rng(0)
    moves = [int(b) for b in rng.choice([0, RIGHT, RIGHT | BUTTON_BITS["B"], BUTTON_BITS["left"]], size=200)]
    assert play(moves, held=True)[:2] == play(moves, held=False)[:2]


def test_a_press_in_the_air_is_not_held() -> None:
    # A held jump, then A pressed again on the way down (past the top, before landing):
    # no hold starts in the air, so those bytes arrive as sent.
    frames = [A] + [0] * 31 + [A, A] + [0] * 10
    _, sent, recorder = play(frames, held=True)
    top = next(i for i in range(2, len(frames)) if not recorder.rising_before[i])
    assert top < 32 and not recorder.grounded_before[32] and not recorder.grounded_before[33]
    assert sent[top:] == frames[top:]


def test_held_jump_needs_the_mario_adapter_and_a_mario_id() -> None:
    with pytest.raises(TypeError, match="MarioEnv"):
        HeldJump(ActionSet(MarioEnv("SuperMarioBros-1-1-v0"), "simple"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="held_jump applies to Mario ids"):
        envs.make_env("Catch-v0", held_jump=True)


def test_through_make_env_one_step_of_right_a_clears_more_than_the_plain_joypad() -> None:
    """The agent's view: one agent step (4 frames) of right+A, then right: the held jump
    rises higher than the plain one, which lets A go after the step."""
    right_a, right = button_lists("right_only").index(["right", "A"]), button_lists("right_only").index(["right"])
    peaks = {}
    for held in (False, True):
        env = envs.make_env("SuperMarioBros-1-1-v0", held_jump=held)
        _, info = env.reset()
        ys = [info["y_pos"]]
        for action in [right_a] + [right] * 12:
            _, _, _, _, info = env.step(action)
            ys.append(info["y_pos"])
        env.close()
        peaks[held] = max(ys) - ys[0]
    assert peaks[True] - peaks[False] >= 20, peaks
