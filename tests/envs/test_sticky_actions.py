"""envs.wrappers.StickyActions: which byte reaches the console each frame, checked against
the rule written out here, its seeding, and its place in make_env on the real emulator."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

import envs
from envs.wrappers import STICKY_STREAM, StickyActions

RIGHT = 0b10000000
RIGHT_A = RIGHT | 1


class _ByteRecorder(gymnasium.Env[np.ndarray, int]):
    """Records every controller byte it is sent; an empty screen."""

    observation_space = spaces.Box(0, 255, (1,), np.uint8)
    action_space = spaces.Discrete(256)

    def __init__(self) -> None:
        self.sent: list[int] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return np.zeros(1, np.uint8), {}

    def step(self, action: int):
        self.sent.append(int(action))
        return np.zeros(1, np.uint8), 0.0, False, False, {}


def _sent(p: float, requested: list[int], seed: int) -> list[int]:
    recorder = _ByteRecorder()
    env = StickyActions(recorder, p)
    env.reset(seed=seed)
    for byte in requested:
        env.step(byte)
    return recorder.sent


def test_each_frame_sends_the_request_or_the_previous_frames_byte_by_the_seeded_draw() -> None:
    requested = [RIGHT, RIGHT_A] * 2000
    sent = _sent(0.25, requested, seed=11)
    # The rule, written out: frame i keeps the byte sent before it (NOOP after a reset)
    # when the i-th draw of the (seed, STICKY_STREAM) generator is below p.
    draws = np.random.default_rng((11, STICKY_STREAM)).random(len(requested))
    expected, previous = [], 0
    for byte, draw in zip(requested, draws, strict=True):
        previous = previous if draw < 0.25 else byte
        expected.append(previous)
    assert sent == expected
    # The requests alternate, so a frame sends the wrong set when it is kept (1/4) after a
    # frame that sent its own (share q): q = 1 - q/4, so 1/4 x 4/5 = 0.2 of the frames.
    assert 0.17 < sum(a != b for a, b in zip(sent, requested, strict=True)) / len(sent) < 0.23


def test_no_stickiness_sends_every_request_and_a_reset_releases_the_buttons() -> None:
    requested = [RIGHT, RIGHT_A, 0, RIGHT] * 50
    assert _sent(0.0, requested, seed=3) == requested
    recorder = _ByteRecorder()
    env = StickyActions(recorder, 0.5)
    env.reset(seed=0)
    for _ in range(40):
        env.step(RIGHT)
    env.reset(seed=0)
    env.step(RIGHT_A)
    draw = np.random.default_rng((0, STICKY_STREAM)).random()
    # After the reset the previous frame's buttons are none: a kept first frame is NOOP.
    assert recorder.sent[-1] == (0 if draw < 0.5 else RIGHT_A)


def test_a_seeded_reset_replays_the_draws_and_another_seed_does_not() -> None:
    requested = [RIGHT, RIGHT_A] * 200
    assert _sent(0.25, requested, seed=5) == _sent(0.25, requested, seed=5)
    assert _sent(0.25, requested, seed=5) != _sent(0.25, requested, seed=6)
    # The draws are a generator of their own: the env's (a random stage's draw) is untouched.
    recorder = _ByteRecorder()
    env = StickyActions(recorder, 0.25)
    env.reset(seed=5)
    for byte in requested:
        env.step(byte)
    assert recorder.np_random.random() == np.random.default_rng(5).random()


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_a_probability_outside_zero_to_one_is_refused(p: float) -> None:
    with pytest.raises(ValueError, match=r"sticky action probability must be in \[0, 1\)"):
        StickyActions(_ByteRecorder(), p)
    with pytest.raises(ValueError, match="sticky_actions must be a probability"):
        envs.make_env("SuperMarioBros-1-1-v0", sticky_actions=p)


def test_catch_refuses_sticky_actions() -> None:
    with pytest.raises(ValueError, match="applies to Mario ids"):
        envs.make_env("Catch-v0", sticky_actions=0.25)


def _x_trace(sticky: float, seed: int, steps: int = 60) -> list[int]:
    """x_pos after each agent step of NOOP and right in turn on 1-1, from ``seed``."""
    env = envs.make_env("SuperMarioBros-1-1-v0", action_set="right_only", sticky_actions=sticky, seed=seed)
    try:
        env.reset(seed=seed)
        trace = []
        for step in range(steps):
            _, _, terminated, truncated, info = env.step(step % 2)
            trace.append(info["x_pos"])
            assert not (terminated or truncated)
        return trace
    finally:
        env.close()


def test_on_the_emulator_sticky_frames_change_the_run_and_a_seed_replays_it() -> None:
    plain = _x_trace(0.0, seed=1)
    sticky = _x_trace(0.25, seed=1)
    assert sticky == _x_trace(0.25, seed=1)  # a fixed stage from a seed replays exactly
    assert sticky != plain and sticky != _x_trace(0.25, seed=2)
    # Kept frames hold right through some of the NOOPs: Mario gets further than without.
    assert sticky[-1] > plain[-1]
