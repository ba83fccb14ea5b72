"""Tests for pipeline.learning.episode_loop: the env an evaluation plays."""

from __future__ import annotations

from config import Config
from envs.wrappers import FlagReward, RewardScale
from pipeline.learning.episode_loop import build_env


def test_evaluation_plays_the_tasks_reward_whatever_the_run_trained_with() -> None:
    env = build_env(Config(env_id="SuperMarioBros-1-1-v0", flag_reward=500.0, reward_scale=0.1), seed=0)
    layers = [type(env)]
    while hasattr(env, "env"):
        env = env.env
        layers.append(type(env))
    assert FlagReward not in layers and RewardScale not in layers  # game units, no flag bonus
    env.close()
