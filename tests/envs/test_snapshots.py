"""A snapshot of a built Mario env put into another env built alike: every step after it
is the same as the original's (observation, reward, ends, info), and the wrappers'
counters (the no-progress cut, the step limit) carry on from the snapshot's step."""

from __future__ import annotations

import numpy as np
import pytest

from envs import make_env
from envs.snapshots import restore, take

ENV = "SuperMarioBros-1-1-v0"
RIGHT, RIGHT_JUMP, NOOP = 1, 2, 0  # right_only's actions


def played(env, actions: list[int]) -> tuple[np.ndarray, list[tuple]]:
    """Step ``actions`` from a reset; the last observation and every step's outcome."""
    obs, _ = env.reset()
    outcomes = []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        outcomes.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    return obs, outcomes


def assert_same(first: list[tuple], second: list[tuple]) -> None:
    assert len(first) == len(second)
    for (obs_a, *rest_a), (obs_b, *rest_b) in zip(first, second, strict=True):
        np.testing.assert_array_equal(obs_a, obs_b)
        assert rest_a == rest_b


def test_an_env_goes_on_from_a_restored_snapshot_as_the_original_did() -> None:
    rng = np.random.default_rng(4)
    before = [RIGHT] * 12 + rng.integers(0, 5, 18).tolist()
    after = rng.integers(0, 5, 150).tolist()
    kwargs = {"frame_skip": 4, "reward_scale": 0.1, "no_progress_steps": 60, "max_episode_steps": 4000}
    original, other = make_env(ENV, **kwargs), make_env(ENV, **kwargs)
    try:
        obs, outcomes = played(original, before)
        assert len(outcomes) == len(before)  # alive at the snapshot
        snapshot = take(original, obs)
        expected = [original.step(action) for action in after[:1]]
        for action in after[1:]:
            if expected[-1][2] or expected[-1][3]:
                break
            expected.append(original.step(action))
        other.reset()
        np.testing.assert_array_equal(restore(other, snapshot), obs)
        got = [other.step(action) for action in after[: len(expected)]]
        assert_same(expected, got)
        assert sum(step[1] for step in expected) != 0  # it moved: rewards were compared, not zeros
    finally:
        original.close()
        other.close()


def first_cut(env, actions: list[int]) -> int:
    """Steps until ``env`` truncates its episode while stepping ``actions``."""
    for step, action in enumerate(actions, start=1):
        _, _, terminated, truncated, _ = env.step(action)
        assert not terminated
        if truncated:
            return step
    raise AssertionError("no cut")


@pytest.mark.parametrize(
    ("kwargs", "before", "after"),
    [
        # Standing still from step 15 (sliding to a stop first): a fresh env would cut after 10 stalled steps.
        ({"no_progress_steps": 10}, [RIGHT] * 14 + [NOOP] * 12, [NOOP] * 30),
        # A 24-step episode: a fresh env would cut after 24.
        ({"max_episode_steps": 24}, [RIGHT] * 20, [RIGHT] * 30),
    ],
)
def test_the_wrappers_counters_carry_on_from_the_snapshot(kwargs: dict, before: list[int], after: list[int]) -> None:
    original, other = make_env(ENV, **kwargs), make_env(ENV, **kwargs)
    try:
        obs, outcomes = played(original, before)
        assert len(outcomes) == len(before)
        snapshot = take(original, obs)
        expected = first_cut(original, after)
        assert expected < min(kwargs.values())  # sooner than a fresh env's first cut
        other.reset()
        restore(other, snapshot)
        assert first_cut(other, after) == expected
    finally:
        original.close()
        other.close()


def test_an_env_whose_frames_are_drawn_or_that_is_no_mario_has_no_snapshot() -> None:
    sticky = make_env(ENV, sticky_actions=0.25, seed=0)
    catch = make_env("Catch-v0")
    try:
        obs, _ = sticky.reset()
        with pytest.raises(ValueError, match="sticky actions"):
            take(sticky, obs)
        obs, _ = catch.reset()
        with pytest.raises(TypeError, match="Mario"):
            take(catch, obs)
    finally:
        sticky.close()
        catch.close()


def test_a_state_of_one_stage_is_not_loaded_into_another() -> None:
    one, two = make_env(ENV), make_env("SuperMarioBros-1-2-v0")
    try:
        obs, _ = one.reset()
        two.reset()
        with pytest.raises(ValueError, match="cannot be loaded into stage"):
            restore(two, take(one, obs))
    finally:
        one.close()
        two.close()
