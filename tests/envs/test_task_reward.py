"""Tests for envs.task_reward: the reward every figure was measured with, on the new emulator."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from envs.mario import MarioEnv
from envs.task_reward import TaskReward

RIGHT_ONLY_BYTES = (0, 128, 129, 130, 131)  # NOOP, right, right+A, right+B, right+A+B


def _info(x: int, time: int, *, dying: bool = False, dead: bool = False) -> dict[str, object]:
    return {"x_pos": x, "time": time, "is_dying": dying, "is_dead": dead}


def test_x_progress_and_the_clock_sum() -> None:
    reward = TaskReward()
    reward.reset(_info(40, 400))
    assert reward.step(_info(43, 400)) == 3.0
    assert reward.step(_info(45, 399)) == 1.0  # 2 to the right, the clock ticked once
    assert reward.step(_info(41, 399)) == -4.0  # walking left costs


def test_a_teleport_is_no_progress_and_a_clock_rise_no_bonus() -> None:
    reward = TaskReward()
    reward.reset(_info(100, 300))
    assert reward.step(_info(106, 300)) == 0.0  # more than 5 px in one frame: a pipe or a warp
    assert reward.step(_info(100, 300)) == 0.0  # and back
    assert reward.step(_info(101, 400)) == 1.0  # the clock only counts down; a rise is not rewarded


def test_a_death_is_minus_25_clipped_to_minus_15_and_a_big_step_to_plus_15() -> None:
    reward = TaskReward()
    reward.reset(_info(10, 300))
    assert reward.step(_info(12, 300, dying=True)) == -15.0
    assert reward.step(_info(12, 300, dead=True)) == -15.0
    reward.reset(_info(10, 300))
    assert reward.step(_info(15, 300)) == 5.0  # the largest progress a frame can earn


def _actions(count: int = 3000, seed: int = 12345) -> list[int]:
    """RIGHT_ONLY controller bytes, each held 1-8 frames, from a fixed seed."""
    rng = np.random.default_rng(seed)
    out: list[int] = []
    while len(out) < count:
        out += [RIGHT_ONLY_BYTES[int(rng.integers(5))]] * int(rng.integers(1, 9))
    return out[:count]


def test_mario_1_1_replays_what_the_previous_packages_gave() -> None:
    """The same ROM and controller bytes give the same frames, returns and episode ends.

    The expected values were measured on gym-super-mario-bros 7.4.0 / nes-py 8.2.1 (the
    packages every figure of docs/ was measured with) by the same loop over its own
    ``SuperMarioBrosEnv(rom_mode="vanilla", target=(1, 1))``: per episode its return and the
    x_pos where it ended, the open episode's return, and a hash of every frame.
    """
    env = MarioEnv("SuperMarioBros-1-1-v0")
    episodes, episode_return, frames = [], 0.0, hashlib.sha256()
    env.reset()
    for action in _actions():
        obs, reward, terminated, _, info = env.step(action)
        episode_return += reward
        frames.update(np.ascontiguousarray(obs).tobytes())
        if terminated:
            episodes.append((episode_return, info["x_pos"]))
            episode_return = 0.0
            env.reset()
    env.close()
    assert episodes == [(1010.0, 1131), (1013.0, 1130), (249.0, 313)]
    assert episode_return == pytest.approx(564.0)
    assert frames.hexdigest()[:16] == "3fec93c8119b6fe6"
