"""Epsilon-greedy: a share epsilon of the steps explore, uniformly over the actions; ez-greedy
holds each random action for a drawn number of steps."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.learning.exploration import HeldExploration, epsilon_greedy, zeta_probabilities


def test_a_share_epsilon_of_the_steps_explore() -> None:
    rng = np.random.default_rng(3)
    shares = [(~epsilon_greedy(rng, 4, 4, 0.3)[1]).mean() for _ in range(4000)]
    assert 0.27 < float(np.mean(shares)) < 0.33


def test_epsilon_zero_is_greedy_and_one_always_explores() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        assert epsilon_greedy(rng, 8, 7, 0.0)[1].all()
        assert not epsilon_greedy(rng, 8, 7, 1.0)[1].any()


def test_random_actions_are_uniform_over_the_action_set_and_seeded() -> None:
    actions = np.concatenate([epsilon_greedy(np.random.default_rng(s), 64, 7, 1.0)[0] for s in range(100)])
    counts = np.bincount(actions, minlength=7)
    assert counts.shape == (7,) and actions.min() >= 0
    assert np.all(np.abs(counts / counts.sum() - 1 / 7) < 0.02)
    first, second = (epsilon_greedy(np.random.default_rng(5), 16, 7, 0.5) for _ in range(2))
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])


class ScriptedDraws:
    """Stands in for the collector's generator with the uniforms and integers a test chose,
    so each step's outcome can be worked out by hand."""

    def __init__(self, uniforms: list[list[float]], integers: list[list[int]]) -> None:
        self.uniforms, self.ints = list(uniforms), list(integers)

    def random(self, count: int) -> np.ndarray:
        draw = np.asarray(self.uniforms.pop(0))
        assert draw.shape == (count,)
        return draw

    def integers(self, high: int, size: int) -> np.ndarray:
        draw = np.asarray(self.ints.pop(0))
        assert draw.shape == (size,) and draw.max() < high
        return draw


def test_zeta_probabilities_are_n_to_the_minus_two_normalised_over_the_cut() -> None:
    # 1, 1/4, 1/9 over their sum 49/36.
    np.testing.assert_allclose(zeta_probabilities(3), np.array([36, 9, 4]) / 49)
    assert zeta_probabilities(1).tolist() == [1.0]
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        zeta_probabilities(0)


def test_a_held_random_action_is_taken_for_its_drawn_steps_whatever_epsilon_is_then() -> None:
    # Cut at 3: the CDF is 36/49 = 0.735, 45/49 = 0.918, 1, so a uniform of 0.95 holds 3
    # steps, 0.5 one step and 0.8 two.
    draws = ScriptedDraws(
        uniforms=[[0.2, 0.7], [0.95], [0.9, 0.1], [0.5], [0.0, 0.9], [0.9, 0.9], [0.3, 0.6], [0.8], [0.1, 0.99]],
        integers=[[4], [1], [2]],
    )
    held = HeldExploration(draws, num_envs=2, num_actions=5, max_steps=3)  # type: ignore[arg-type]
    steps = [held.choose(0.5) for _ in range(3)]
    # Step 1: env 0 starts (0.2 < 0.5) action 4 for 3 steps; env 1 is greedy (0.7).
    # Step 2: env 0 holds (its draw 0.9 is ignored); env 1 starts action 1 for 1 step.
    # Step 3: env 0 holds its last step at epsilon's draw 0.0; env 1 is free and greedy (0.9).
    assert [s[1].tolist() for s in steps] == [[False, True], [False, False], [False, True]]
    assert [int(s[0][0]) for s in steps] == [4, 4, 4]
    assert int(steps[1][0][1]) == 1
    # Step 4: both free, both greedy at 0.9. Even at epsilon 0 a free env is greedy.
    assert held.choose(0.0)[1].tolist() == [True, True]
    # Step 5: env 0 starts action 2 for 2 steps (0.8); env 1 greedy. Its episode ends: the
    # next step is free again, and greedy at the draw 0.1 with epsilon 0.
    actions, greedy = held.choose(0.5)
    assert greedy.tolist() == [False, True] and int(actions[0]) == 2 and held.remaining.tolist() == [1, 0]
    held.end(0)
    assert held.choose(0.0)[1].tolist() == [True, True]
    assert not draws.uniforms and not draws.ints  # every draw was used where worked out above


def test_holds_last_as_long_as_the_cut_zeta_distribution_says() -> None:
    rng = np.random.default_rng(7)
    held = HeldExploration(rng, num_envs=1, num_actions=5, max_steps=8)
    lengths = np.bincount(held.durations(200_000), minlength=9)[1:] / 200_000
    np.testing.assert_allclose(lengths, zeta_probabilities(8), atol=0.004)
