"""Tests for envs.wrappers on the real emulator (and one scripted env), against values computed here."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest

from envs.actions import action_bytes
from envs.mario import MarioEnv
from envs.wrappers import (
    ActionSet,
    FlagReward,
    Grayscale,
    MaxAndSkip,
    NoProgressTruncation,
    Resize,
    RewardScale,
)

RIGHT = 0b10000000
MOVES = [0, RIGHT, RIGHT | 1, RIGHT | 2, RIGHT | 3, 1, 0b01000000]


def _luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma in float, computed without OpenCV."""
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def _area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """Row i averages input cells [i*s, (i+1)*s) weighted by how much of each it covers."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in))
    for i in range(n_out):
        low, high = i * scale, (i + 1) * scale
        for j in range(math.floor(low), min(math.ceil(high), n_in)):
            weights[i, j] = (min(high, j + 1) - max(low, j)) / scale
    return weights


def _frames_until_done(action: int, limit: int = 400) -> tuple[list[np.ndarray], list[float]]:
    env = MarioEnv("SuperMarioBros-1-1-v0")
    env.reset()
    frames, rewards = [], []
    for _ in range(limit):
        obs, reward, terminated, _, _ = env.step(action)
        frames.append(obs)
        rewards.append(reward)
        if terminated:
            break
    env.close()
    assert terminated
    return frames, rewards


def _skipping_simple_env() -> MaxAndSkip:
    return MaxAndSkip(ActionSet(MarioEnv("SuperMarioBros-1-1-v0"), "simple"), 4)


def test_action_set_sends_the_controller_bytes() -> None:
    wrapped = ActionSet(MarioEnv("SuperMarioBros-1-1-v0"), "simple")
    raw = MarioEnv("SuperMarioBros-1-1-v0")
    assert wrapped.action_space.n == 7
    assert wrapped.get_action_meanings()[2] == "right A"
    wrapped.reset()
    raw.reset()
    actions = np.random.default_rng(2).integers(0, 7, size=120)
    table = action_bytes("simple")
    for action in actions:
        obs_w, reward_w, *_ = wrapped.step(int(action))
        obs_r, reward_r, *_ = raw.step(table[int(action)])
        assert np.array_equal(obs_w, obs_r) and reward_w == reward_r
    with pytest.raises(ValueError, match="out of range"):
        wrapped.step(-1)
    wrapped.close()
    raw.close()


def test_max_and_skip_matches_four_hand_stepped_frames() -> None:
    wrapped = MaxAndSkip(MarioEnv("SuperMarioBros-1-1-v0"), skip=4)
    raw = MarioEnv("SuperMarioBros-1-1-v0")
    obs_w, _ = wrapped.reset()
    obs_r, _ = raw.reset()
    assert np.array_equal(obs_w, obs_r)
    actions = np.random.default_rng(3).choice(MOVES, size=50)
    differed = 0
    for step, action in enumerate(actions):  # noqa: B007 (step is read after the loop)
        obs, reward, terminated, truncated, _ = wrapped.step(int(action))
        frames, rewards = [], []
        for _ in range(4):
            frame, r, raw_terminated, _, _ = raw.step(int(action))
            frames.append(frame)
            rewards.append(r)
            if raw_terminated:
                break
        assert terminated == raw_terminated and not truncated
        assert reward == sum(rewards)
        assert np.array_equal(obs, np.maximum(frames[-2], frames[-1]) if len(frames) > 1 else frames[0])
        differed += not np.array_equal(frames[-2], frames[-1])
        if terminated:
            break
    assert step >= 20  # enough agent steps compared
    assert differed > 0  # the max really combined two different frames
    wrapped.close()
    raw.close()


def test_max_and_skip_stops_when_the_episode_ends() -> None:
    frames, rewards = _frames_until_done(RIGHT)
    total = len(frames)
    for skip in (4, next(s for s in range(2, 13) if (total - 1) % s == 0)):
        # With (total - 1) % skip == 0 the last agent step runs exactly one frame.
        env = MaxAndSkip(MarioEnv("SuperMarioBros-1-1-v0"), skip=skip)
        env.reset()
        steps, returned = 0, 0.0
        terminated = False
        while not terminated:
            obs, reward, terminated, _, _ = env.step(RIGHT)
            steps += 1
            returned += reward
        assert steps == math.ceil(total / skip)
        assert returned == pytest.approx(sum(rewards))
        frames_in_last_step = total - (steps - 1) * skip
        # The frames before the last two of a step are not copied, so a terminal step
        # whose second-to-last frame was one of those returns the last frame alone.
        previous_kept = frames_in_last_step >= 2 and frames_in_last_step - 2 >= skip - 2
        if previous_kept:
            assert np.array_equal(obs, np.maximum(frames[-2], frames[-1]))
        else:
            assert np.array_equal(obs, frames[-1])
        env.close()


def test_max_and_skip_returns_owned_frames_and_restores_copying() -> None:
    env = MaxAndSkip(MarioEnv("SuperMarioBros-1-1-v0"), skip=4)
    env.reset()
    obs, *_ = env.step(RIGHT)
    kept = obs.copy()
    assert env.unwrapped.skip_frame_copy is False  # a direct step copies again
    raw_frame, *_ = env.unwrapped.step(RIGHT)  # the emulator's buffer moves on...
    assert np.array_equal(obs, kept)  # ...the wrapper's observation does not
    raw_kept = raw_frame.copy()
    env.unwrapped.step(RIGHT)
    assert np.array_equal(raw_frame, raw_kept)
    env.close()


def test_grayscale_uses_bt601_luma() -> None:
    env = Grayscale(MarioEnv("SuperMarioBros-1-1-v0"))
    assert env.observation_space.shape == (240, 256)
    obs, _ = env.reset()
    for _ in range(30):
        obs, *_ = env.step(RIGHT)
        assert obs.dtype == np.uint8 and obs.shape == (240, 256)
        expected = np.round(_luma(env.unwrapped.last_rgb))
        assert np.abs(obs.astype(np.int16) - expected).max() <= 1
    env.close()


@pytest.mark.parametrize("shape", [(60, 64), (84, 84)])
def test_resize_is_an_area_average(shape: tuple[int, int]) -> None:
    env = Resize(Grayscale(MarioEnv("SuperMarioBros-1-1-v0")), *shape)
    assert env.observation_space.shape == shape
    env.reset()
    rows, cols = _area_matrix(240, shape[0]), _area_matrix(256, shape[1])
    for _ in range(20):
        obs, *_ = env.step(RIGHT)
        assert obs.shape == shape and obs.dtype == np.uint8
        gray = _luma(env.unwrapped.last_rgb)
        if shape == (60, 64):  # integer factor: plain 4x4 block means
            expected = gray.reshape(60, 4, 64, 4).mean(axis=(1, 3))
        else:
            expected = rows @ gray @ cols.T
        assert np.abs(obs - expected).max() <= 1.0
    env.close()


class _ScriptedEnd(gymnasium.Env):
    """Three steps of reward 1; the third ends the episode with ``flag_get`` as given."""

    observation_space = gymnasium.spaces.Box(0, 255, (1,), np.uint8)
    action_space = gymnasium.spaces.Discrete(1)

    def __init__(self, flag: bool, *, truncate: bool = False) -> None:
        self.flag, self.truncate, self.t = flag, truncate, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.t = 0
        return np.zeros(1, np.uint8), {"flag_get": False}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        end = self.t == 3
        info = {"flag_get": end and self.flag}
        return np.zeros(1, np.uint8), 1.0, end and not self.truncate, end and self.truncate, info


@pytest.mark.parametrize(
    ("flag", "truncate", "expected"),
    [(True, False, [1.0, 1.0, 501.0]), (False, False, [1.0, 1.0, 1.0]), (True, True, [1.0, 1.0, 1.0])],
)
def test_flag_reward_pays_once_on_the_terminal_flag_step(flag: bool, truncate: bool, expected: list[float]) -> None:
    env = FlagReward(_ScriptedEnd(flag, truncate=truncate), 500.0)
    env.reset()
    assert [env.step(0)[1] for _ in range(3)] == expected
    with pytest.raises(ValueError, match="flag reward"):
        FlagReward(_ScriptedEnd(True), 0.0)


def test_reward_scale_multiplies_the_reward() -> None:
    scaled = RewardScale(MarioEnv("SuperMarioBros-1-1-v0"), 0.1)
    plain = MarioEnv("SuperMarioBros-1-1-v0")
    scaled.reset()
    plain.reset()
    nonzero = 0
    for _ in range(150):
        _, reward_s, terminated, _, _ = scaled.step(RIGHT)
        _, reward_p, *_ = plain.step(RIGHT)
        assert reward_s == pytest.approx(reward_p * 0.1)
        nonzero += reward_p != 0
        if terminated:
            break
    assert nonzero > 10
    with pytest.raises(ValueError, match="reward scale"):
        RewardScale(plain, 0.0)
    scaled.close()
    plain.close()


def test_no_progress_truncates_after_exactly_max_steps_standing_still() -> None:
    max_steps = 6
    env = NoProgressTruncation(_skipping_simple_env(), max_steps)
    for _ in range(2):  # the second round checks that reset restarts the count
        _, info = env.reset()
        start_x = info["x_pos"]
        for step in range(1, max_steps + 1):
            _, _, terminated, truncated, info = env.step(0)  # NOOP: Mario stands still
            assert info["x_pos"] == start_x and not terminated
            assert truncated == (step == max_steps), step
    env.close()


def test_no_progress_does_not_truncate_while_moving_right() -> None:
    env = NoProgressTruncation(_skipping_simple_env(), 3)
    env.reset()
    for _ in range(25):
        _, _, terminated, truncated, info = env.step(1)  # right
        assert not truncated and not terminated
    assert info["x_pos"] > 100
    env.close()


def test_no_progress_zero_disables() -> None:
    env = NoProgressTruncation(_skipping_simple_env(), 0)
    env.reset()
    for _ in range(30):
        _, _, _, truncated, _ = env.step(0)
        assert not truncated
    env.close()
    with pytest.raises(ValueError, match="no-progress"):
        NoProgressTruncation(env, -1)
