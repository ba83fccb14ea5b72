"""Tests for envs.catch.CatchEnv: rendering, rules, optimal return, determinism."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.catch import CELL_H, CELL_W, COLS, ROWS, CatchEnv

MARIO_INFO_KEYS = {"x_pos", "y_pos", "flag_get", "world", "stage", "life", "score", "time", "coins", "status"}
NOOP, LEFT, RIGHT = 0, 1, 2


def _parse(frame: np.ndarray) -> tuple[int, int, int]:
    """Read (ball row, ball column, paddle column) off the pixels: 16x14 cells, 2 px left margin."""
    assert (COLS, ROWS, CELL_W, CELL_H) == (5, 6, 16, 14)  # the geometry this reading is written for
    assert set(np.unique(frame)) <= {0, 255}
    bright = frame == 255
    paddle_band, field = bright[70:], bright[:70]
    assert paddle_band.sum() == 16 * 14 and field.sum() == 16 * 14  # one full cell each
    paddle_col = (np.argwhere(paddle_band)[:, 1].min() - 2) // 16
    ys, xs = np.argwhere(field).min(axis=0)
    assert ys % 14 == 0 and (xs - 2) % 16 == 0  # cells are grid-aligned
    return ys // 14, (xs - 2) // 16, paddle_col


def _play(env: CatchEnv, policy, seed: int) -> tuple[float, int, dict]:
    obs, info = env.reset(seed=seed)
    total, steps, terminated = 0.0, 0, False
    while not terminated:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        assert not truncated
        total += reward
        steps += 1
    return total, steps, info


def _optimal(obs: np.ndarray) -> int:
    _, ball_col, paddle_col = _parse(obs)
    return NOOP if ball_col == paddle_col else (LEFT if ball_col < paddle_col else RIGHT)


def test_observation_and_info() -> None:
    env = CatchEnv()
    obs, info = env.reset(seed=0)
    assert obs.shape == (84, 84) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    assert env.action_space.n == 3
    assert set(info) == MARIO_INFO_KEYS
    assert info["status"] == "catch" and info["world"] == 0 and info["stage"] == 0
    ball_row, ball_col, paddle_col = _parse(obs)
    assert ball_row == 0 and info["x_pos"] == paddle_col and info["y_pos"] == 0
    obs2, *_ = env.step(NOOP)
    assert _parse(obs2) == (1, ball_col, paddle_col)
    assert not np.shares_memory(obs, obs2)  # each step returns a new frame
    assert env.last_rgb.shape == (84, 84, 3) and np.array_equal(env.last_rgb[:, :, 1], obs2)


def test_optimal_policy_reaches_optimal_return() -> None:
    env = CatchEnv(balls_per_episode=5)
    assert env.optimal_return == 5.0
    for seed in range(10):
        total, steps, info = _play(env, _optimal, seed)
        assert total == env.optimal_return
        assert steps == 5 * 5  # 5 balls, each 5 steps to fall
        assert info["flag_get"] is True and info["score"] == 5 and info["life"] == 0


def test_missing_costs_one_and_no_flag() -> None:
    """Standing still catches a ball only if it falls onto the paddle's column."""
    env = CatchEnv(balls_per_episode=3)
    obs, _ = env.reset(seed=4)
    expected, total, terminated = 0.0, 0.0, False
    while not terminated:
        ball_row, ball_col, paddle_col = _parse(obs)
        if ball_row == 0:  # a new ball: its outcome is decided now
            expected += 1.0 if ball_col == paddle_col else -1.0
        obs, reward, terminated, _, info = env.step(NOOP)
        total += reward
    assert total == expected
    assert info["flag_get"] == (expected == 3.0)


def test_random_policy_scores_less_than_optimal() -> None:
    env = CatchEnv()
    rng = np.random.default_rng(0)
    returns = [_play(env, lambda _obs: int(rng.integers(3)), seed)[0] for seed in range(30)]
    assert np.mean(returns) < -1  # about -2.9: most balls missed


def test_same_seed_same_episode_different_seed_different_balls() -> None:
    actions = np.random.default_rng(1).integers(0, 3, size=25)

    def trace(seed: int) -> list[np.ndarray]:
        env = CatchEnv()
        obs, _ = env.reset(seed=seed)
        frames = [obs]
        for action in actions:
            obs, *_ = env.step(int(action))
            frames.append(obs)
        return frames

    first, again, other = trace(7), trace(7), trace(8)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="balls_per_episode"):
        CatchEnv(balls_per_episode=0)
    env = CatchEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="got 3"):
        env.step(3)


def test_gymnasium_env_checker_passes_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(CatchEnv(), skip_render_check=True)
