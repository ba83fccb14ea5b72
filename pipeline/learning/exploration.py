"""How a collector explores: epsilon-greedy, vectorized over its envs.

Each agent step, every env of a collector takes a uniform random action with probability
epsilon (the one the learner publishes) and the network's greedy action otherwise. The
draws are a few numpy operations on arrays of ``num_envs`` (no loop over the envs), and
the caller skips the network's forward when no env is greedy, which saves CPU early in
training. Temporally extended exploration (ez-greedy's held random actions) lost on the
learning benchmark, on 1-1 and on 1-3, and was removed (docs/learning-history.md).
"""

from __future__ import annotations

import numpy as np

__all__ = ["epsilon_greedy"]


def epsilon_greedy(
    rng: np.random.Generator, num_envs: int, num_actions: int, epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """This step's random actions ``[num_envs]`` and the mask of the envs that act greedily.

    Each env explores with probability ``epsilon``; the returned actions are meaningful
    only where the mask is False (the caller fills the others from one batched forward).
    All draws come from ``rng``, the collector's generator, so a seed replays them.
    """
    greedy = rng.random(num_envs) >= epsilon
    actions = rng.integers(num_actions, size=num_envs)
    return actions, greedy
