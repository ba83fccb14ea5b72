"""Tests for envs.make_env / envs.num_actions: the assembled stacks, seeding, errors."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import gymnasium
import numpy as np
import pytest

import envs
from pipeline.common.child import process_context


def test_run_config_no_progress_steps_reaches_the_env_as_a_truncation() -> None:
    from config import Config

    cfg = Config(no_progress_steps=3)
    env = envs.make_env("SuperMarioBros-1-1-v0", **cfg.env_kwargs())
    env.reset()
    ends = [env.step(0)[2:4] for _ in range(3)]  # NOOP: no new x, cut at the third step
    assert ends == [(False, False), (False, False), (False, True)]
    env.close()


def test_run_config_flag_reward_sits_below_the_scale_and_evaluation_plays_the_task() -> None:
    from config import Config
    from envs.wrappers import FlagReward, RewardScale

    def chain(env: gymnasium.Env) -> list[gymnasium.Env]:
        layers = [env]
        while hasattr(layers[-1], "env"):
            layers.append(layers[-1].env)
        return layers

    cfg = Config(flag_reward=500.0)
    trained = chain(envs.make_env(cfg.env_id, **cfg.env_kwargs()))
    kinds = [type(layer) for layer in trained]
    assert kinds.index(RewardScale) < kinds.index(FlagReward)  # the bonus is scaled with the rest
    assert trained[kinds.index(FlagReward)].bonus == 500.0
    task = [type(layer) for layer in chain(envs.make_env(cfg.env_id, **cfg.env_kwargs(task_reward=True)))]
    assert FlagReward not in task and RewardScale not in task
    with pytest.raises(ValueError, match="flag_reward applies to Mario ids"):
        envs.make_env("Catch-v0", flag_reward=1.0)
    with pytest.raises(ValueError, match="flag_reward must be a finite number"):
        envs.make_env("SuperMarioBros-1-1-v0", flag_reward=-1.0)


def test_full_mario_stack_outputs_84x84_uint8() -> None:
    env = envs.make_env("SuperMarioBros-1-1-v0", no_progress_steps=10, max_episode_steps=100)
    assert env.observation_space.shape == (84, 84) and env.observation_space.dtype == np.uint8
    obs, info = env.reset()
    assert obs.shape == (84, 84) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(1)
        assert obs.shape == (84, 84) and obs.dtype == np.uint8
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert env.unwrapped.last_rgb.shape == (240, 256, 3)
    assert info["x_pos"] > 40  # action 1 of "simple" is "right"
    env.close()


def test_stack_wiring_without_frame_skip() -> None:
    """With one frame per step the stack output is resize(gray(latest raw frame)), scaled reward."""
    stack = envs.make_env("SuperMarioBros-1-1-v0", frame_skip=1, reward_scale=0.5)
    raw = envs.make_env("SuperMarioBros-1-1-v0", frame_skip=1, preprocess=False)
    stack.reset()
    raw.reset()
    for _ in range(40):
        obs, reward, *_ = stack.step(1)
        rgb, raw_reward, *_ = raw.step(1)
        assert np.array_equal(rgb, stack.unwrapped.last_rgb)
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        assert np.array_equal(obs, cv2.resize(gray, (84, 84), interpolation=cv2.INTER_AREA))
        assert reward == raw_reward * 0.5
    stack.close()
    raw.close()


def test_preprocess_false_gives_rgb_frames_with_the_action_set_and_skip() -> None:
    env = envs.make_env("SuperMarioBros-1-1-v0", preprocess=False, action_set="right_only")
    assert env.action_space.n == 5
    obs, _ = env.reset()
    assert obs.shape == (240, 256, 3)
    obs, *_ = env.step(1)
    assert obs.shape == (240, 256, 3) and obs.dtype == np.uint8
    env.close()


def test_right_jump_holding_a_lifts_mario_and_walking_does_not() -> None:
    """Action 1 of right_jump presses A (Mario leaves the ground), action 0 only walks."""
    heights = {}
    for action in (0, 1):
        env = envs.make_env("SuperMarioBros-1-1-v0", action_set="right_jump")
        assert env.action_space.n == 2
        ground = env.reset()[1]["y_pos"]
        ys = [env.step(action)[4]["y_pos"] for _ in range(6)]
        heights[action] = max(ys) - ground
        env.close()
    assert heights[0] == 0
    assert heights[1] > 16


def test_time_limit_truncates() -> None:
    env = envs.make_env("SuperMarioBros-1-1-v0", max_episode_steps=3)
    env.reset()
    flags = [env.step(1)[3] for _ in range(3)]
    assert flags == [False, False, True]
    env.close()


@pytest.mark.parametrize(
    ("action_set", "package_list"),
    [("right_only", "RIGHT_ONLY"), ("simple", "SIMPLE_MOVEMENT"), ("complex", "COMPLEX_MOVEMENT")],
)
def test_num_actions_matches_the_package_lists_and_the_built_env(action_set: str, package_list: str) -> None:
    from gym_super_mario_bros import actions

    expected = len(getattr(actions, package_list))
    assert envs.num_actions("SuperMarioBros-1-1-v0", action_set) == expected
    env = envs.make_env("SuperMarioBros-1-1-v0", action_set=action_set)
    assert env.action_space.n == expected
    env.close()


def test_num_actions_builds_no_emulator(monkeypatch: pytest.MonkeyPatch) -> None:
    from nes_py import nes_env

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("num_actions built an emulator")

    monkeypatch.setattr(nes_env.NESEnv, "__init__", refuse)
    assert envs.num_actions("SuperMarioBrosRandomStages-v0", "complex") == 12
    assert envs.num_actions("Catch-v0", "simple") == 3
    with pytest.raises(AssertionError, match="built an emulator"):
        envs.make_env("SuperMarioBros-1-1-v0")  # control: the patch does catch a build


def test_catch_through_make_env() -> None:
    env = envs.make_env("Catch-v0", action_set="complex", frame_skip=4, no_progress_steps=1, reward_scale=2.0)
    assert env.action_space.n == envs.num_actions("Catch-v0", "simple") == 3
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84) and obs.dtype == np.uint8
    rewards = []
    for _ in range(5):  # one ball; no-progress truncation does not apply to Catch
        obs, reward, terminated, truncated, _ = env.step(0)
        assert not truncated
        rewards.append(reward)
    assert rewards[:4] == [0.0] * 4 and abs(rewards[4]) == 2.0
    assert env.unwrapped.optimal_return == 5.0
    limited = envs.make_env("Catch-v0", max_episode_steps=4)
    limited.reset(seed=0)
    assert [limited.step(0)[3] for _ in range(4)] == [False, False, False, True]


def test_seed_makes_unseeded_resets_reproducible() -> None:
    def first_frames(env_id: str, seed: int) -> list[np.ndarray]:
        env = envs.make_env(env_id, seed=seed)
        frames = [env.reset()[0] for _ in range(3)]
        env.close()
        return frames

    def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
        return all(np.array_equal(x, y) for x, y in zip(a, b))

    assert same(first_frames("Catch-v0", 3), first_frames("Catch-v0", 3))
    assert not same(first_frames("Catch-v0", 3), first_frames("Catch-v0", 4))
    stages = []
    for _ in range(2):
        env = envs.make_env("SuperMarioBrosRandomStages-v0", seed=11)
        infos = [env.reset()[1] for _ in range(2)]
        stages.append([(info["world"], info["stage"]) for info in infos])
        env.close()
    assert stages[0] == stages[1]


def test_invalid_arguments_raise_clear_errors() -> None:
    with pytest.raises(envs.EnvIdError, match="'SuperMarioBros-9-1-v0'.*world must be 1-8"):
        envs.make_env("SuperMarioBros-9-1-v0")
    with pytest.raises(envs.EnvIdError, match="'Foo-v0'"):
        envs.num_actions("Foo-v0", "simple")
    with pytest.raises(ValueError, match="'jump'.*right_only, simple, complex"):
        envs.make_env("SuperMarioBros-1-1-v0", action_set="jump")
    with pytest.raises(ValueError, match="'jump'"):
        envs.num_actions("Catch-v0", "jump")
    with pytest.raises(ValueError, match="frame_skip"):
        envs.make_env("Catch-v0", frame_skip=0)
    with pytest.raises(ValueError, match="reward_scale"):
        envs.make_env("Catch-v0", reward_scale=float("nan"))
    with pytest.raises(ValueError, match="max_episode_steps"):
        envs.make_env("Catch-v0", max_episode_steps=-5)
    assert isinstance(envs.make_env("Catch-v0", max_episode_steps=None), gymnasium.Env)


def test_env_built_in_a_child_process_matches_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    # A child started as collectors are (process_context: forked from the fork server).
    # The helper is imported by plain module name so the child, which receives this
    # sys.path, can import it whatever pytest import mode loaded this file.
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    import _spawn_child

    env_ids = ("SuperMarioBros-1-1-v0", "Catch-v0")
    parent = {env_id: _spawn_child.step_and_checksum(env_id, 3, 60) for env_id in env_ids}
    with process_context().Pool(1) as pool:
        child = {env_id: pool.apply(_spawn_child.step_and_checksum, (env_id, 3, 60)) for env_id in parent}
    assert child == parent
    assert "_spawn_child" in sys.modules
