"""Epsilon-greedy: a share epsilon of the steps explore, uniformly over the actions."""

from __future__ import annotations

import numpy as np

from pipeline.learning.exploration import epsilon_greedy


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
