"""Tests for envs.mario.MarioEnv on the real NES emulator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.ids import EnvIdError
from envs.mario import INFO_KEYS, MarioEnv

MARIO_INFO_KEYS = {"x_pos", "y_pos", "flag_get", "world", "stage", "life", "score", "time", "coins", "status"}
RIGHT = 0b10000000
RIGHT_RUN_JUMP = 0b10000011


def _check_info(info: dict) -> None:
    assert set(info) == MARIO_INFO_KEYS
    for key in MARIO_INFO_KEYS - {"flag_get", "status"}:
        assert type(info[key]) is int, (key, type(info[key]))
    assert type(info["flag_get"]) is bool
    assert info["status"] in {"small", "tall", "fireball"}


def test_reset_and_step_follow_the_gymnasium_api() -> None:
    env = MarioEnv("SuperMarioBros-1-1-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.uint8 and obs.shape == (240, 256, 3)
    assert env.observation_space.contains(obs)
    _check_info(info)
    assert (info["world"], info["stage"], info["x_pos"]) == (1, 1, 40)
    result = env.step(RIGHT)
    assert len(result) == 5
    obs, reward, terminated, truncated, info = result
    assert obs.shape == (240, 256, 3) and obs.dtype == np.uint8
    assert type(reward) is float
    assert type(terminated) is bool and type(truncated) is bool
    _check_info(info)
    assert obs is env.last_rgb
    env.close()


def test_observations_are_copies_not_views_of_the_emulator_screen() -> None:
    env = MarioEnv("SuperMarioBros-1-1-v0")
    env.reset()
    first, *_ = env.step(RIGHT)
    snapshot = first.copy()
    for _ in range(60):
        latest, *_ = env.step(RIGHT)
    assert not np.array_equal(latest, snapshot)  # the screen did change...
    assert np.array_equal(first, snapshot)  # ...but the earlier observation did not
    assert first.flags.c_contiguous and first.flags.writeable
    env.close()


def test_same_seed_and_actions_give_identical_frames_in_two_instances() -> None:
    pair = [MarioEnv("SuperMarioBros-1-1-v0") for _ in range(2)]
    moves = [0, RIGHT, RIGHT | 1, RIGHT | 2, RIGHT_RUN_JUMP, 1]
    actions = np.random.default_rng(1).choice(moves, size=200)
    traces = []
    for env in pair:
        obs, _ = env.reset(seed=5)
        frames, rewards, infos = [obs], [], []
        for action in actions:
            obs, reward, terminated, _, info = env.step(int(action))
            frames.append(obs)
            rewards.append(reward)
            infos.append(info)
            if terminated:
                break
        traces.append((frames, rewards, infos))
        env.close()
    (frames_a, rewards_a, infos_a), (frames_b, rewards_b, infos_b) = traces
    assert len(frames_a) == len(frames_b) > 100
    assert all(np.array_equal(a, b) for a, b in zip(frames_a, frames_b))
    assert rewards_a == rewards_b and infos_a == infos_b
    assert infos_a[-1]["x_pos"] > 40  # the actions did move Mario: the trace is not trivial


def test_reward_is_x_progress_plus_clock_and_death_terminates() -> None:
    """Reward = x_pos delta + (negative) game-clock delta; running into the goomba ends it."""
    env = MarioEnv("SuperMarioBros-1-1-v0")
    _, previous = env.reset()
    for _ in range(400):
        _, reward, terminated, truncated, info = env.step(RIGHT)
        assert truncated is False
        if terminated:
            break
        dx = info["x_pos"] - previous["x_pos"]
        clock = min(info["time"] - previous["time"], 0)
        assert reward == dx + clock
        previous = info
    assert terminated, "running right in 1-1 must lose a life to the first goomba"
    assert reward == -15.0  # the death penalty, -25 clipped to the reward range
    with pytest.raises(ValueError):
        env.step(RIGHT)  # the emulator refuses to step past the end
    env.reset()
    env.step(RIGHT)  # ...and a reset makes it usable again
    env.close()


def test_the_games_build_and_lost_levels_is_another_rom() -> None:
    frames = {}
    for env_id in ("SuperMarioBros-1-1-v0", "SuperMarioBros-v0", "SuperMarioBros2-v0"):
        env = MarioEnv(env_id)
        obs, info = env.reset()
        assert obs.shape == (240, 256, 3) and obs.flags.c_contiguous
        assert (info["world"], info["stage"]) == (1, 1)
        assert set(info) == set(INFO_KEYS)
        frames[env_id] = obs
        env.close()
    # The full game starts where 1-1 does; Lost Levels' 1-1 is drawn differently.
    assert np.array_equal(frames["SuperMarioBros-1-1-v0"], frames["SuperMarioBros-v0"])
    assert not np.array_equal(frames["SuperMarioBros-1-1-v0"], frames["SuperMarioBros2-v0"])


def test_stage_id_starts_in_its_stage() -> None:
    env = MarioEnv("SuperMarioBros-4-2-v0")
    _, info = env.reset()
    assert (info["world"], info["stage"]) == (4, 2)
    env.close()


def test_random_stages_are_in_range_and_reproducible_from_the_seed() -> None:
    sequences = []
    for _ in range(2):
        env = MarioEnv("SuperMarioBrosRandomStages-v0")
        stages = []
        for seed in (0, None, None):
            _, info = env.reset(seed=seed)
            assert 1 <= info["world"] <= 8 and 1 <= info["stage"] <= 4
            drawn = (info["world"], info["stage"])
            stages.append(drawn)
            _, _, _, _, info = env.step(RIGHT)
            assert (info["world"], info["stage"]) == drawn  # the stage stays the drawn one
        sequences.append(stages)
        _, info = env.reset(options={"stages": ["2-3"]})
        assert (info["world"], info["stage"]) == (2, 3)
        # The draw itself (no emulator needed) reaches all 32 stages.
        all_stages = {(world, stage) for world in range(1, 9) for stage in range(1, 5)}
        assert {env._sample_stage(None) for _ in range(500)} == all_stages
        env.close()
    assert sequences[0] == sequences[1]
    assert len(set(sequences[0])) > 1


def test_random_stages_constructor_subset() -> None:
    env = MarioEnv("SuperMarioBrosRandomStages-v0", stages=["3-1"])
    _, info = env.reset(seed=1)
    assert (info["world"], info["stage"]) == (3, 1)
    env.close()
    with pytest.raises(ValueError, match="'9-9'"):
        MarioEnv("SuperMarioBrosRandomStages-v0", stages=["9-9"])


def test_bad_arguments_and_close() -> None:
    with pytest.raises(EnvIdError, match="'SuperMarioBros-9-1-v0'"):
        MarioEnv("SuperMarioBros-9-1-v0")
    with pytest.raises(EnvIdError):
        MarioEnv("Catch-v0")
    with pytest.raises(ValueError, match="render_mode"):
        MarioEnv("SuperMarioBros-1-1-v0", render_mode="human")
    env = MarioEnv("SuperMarioBros-1-1-v0", render_mode="rgb_array")
    env.reset()
    assert env.render() is env.last_rgb
    with pytest.raises(ValueError, match="0-255"):
        env.step(256)
    env.close()
    env.close()  # closing twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        env.step(0)


@pytest.mark.parametrize("env_id", ["SuperMarioBros-1-1-v0", "SuperMarioBrosRandomStages-v0"])
def test_gymnasium_env_checker_passes_without_warnings(env_id: str) -> None:
    stages = ["1-1", "1-2"] if "Random" in env_id else None  # keep emulator builds few
    env = MarioEnv(env_id, stages=stages)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env, skip_render_check=True)
