"""How a collector explores: epsilon-greedy, or ez-greedy's held random actions.

Each agent step, every env of a collector takes a uniform random action with probability
epsilon (the one the learner publishes) and the network's greedy action otherwise. The
draws are a few numpy operations on arrays of ``num_envs`` (no loop over the envs), and
the caller skips the network's forward when no env is greedy, which saves CPU early in
training.

With ``explore_hold_steps`` > 1 an exploration event holds its random action for a
duration drawn from a zeta distribution cut at that many steps (ez-greedy: Dabney,
Ostrovski and Barreto, ICLR 2021, "Temporally-Extended epsilon-Greedy Exploration",
mu = 2 as there). Why for Mario: 1-3's gap at x ~775 is crossed only by a jump with A held
for 3-6 agent steps started within about 3 steps of the edge; one-step random actions
string such a hold together almost never. An earlier ez-greedy was measured on 1-1 only,
in combinations, and removed (docs/learning-history.md); this one is an option for 1-3.
"""

from __future__ import annotations

import numpy as np

__all__ = ["HeldExploration", "ZETA_MU", "epsilon_greedy", "zeta_probabilities"]

ZETA_MU = 2.0  # the paper's exponent: P(n) proportional to n ** -2


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


def zeta_probabilities(max_steps: int, mu: float = ZETA_MU) -> np.ndarray:
    """``P(n)`` for ``n = 1 .. max_steps`` of the zeta distribution cut at ``max_steps``."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    weights = np.arange(1, max_steps + 1, dtype=np.float64) ** -mu
    return weights / weights.sum()


class HeldExploration:
    """ez-greedy over a collector's envs: each env's held random action and the steps left.

    A free env (no steps left) starts an exploration event with probability epsilon: a
    uniform random action and a duration ``n`` from the cut zeta distribution; it takes the
    action now and for the ``n - 1`` steps after, whatever epsilon is then. Otherwise it is
    greedy. The hold lives here, not in the network, so a weights update does not end it;
    :meth:`end` ends it when the env's episode ends.
    """

    def __init__(self, rng: np.random.Generator, num_envs: int, num_actions: int, max_steps: int) -> None:
        self.rng = rng
        self.num_actions = num_actions
        self._cdf = np.cumsum(zeta_probabilities(max_steps))
        self._cdf[-1] = 1.0  # no draw may fall past the last duration by rounding
        self.held = np.zeros(num_envs, np.int64)  # the action each env holds
        self.remaining = np.zeros(num_envs, np.int64)  # steps of it still to take, this one included

    def durations(self, count: int) -> np.ndarray:
        """``count`` durations drawn from the cut zeta distribution (inverse CDF, vectorized)."""
        return np.searchsorted(self._cdf, self.rng.random(count), side="right") + 1

    def choose(self, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
        """This step's actions for the exploring envs ``[num_envs]`` and the mask of greedy envs
        (the actions are meaningful only where the mask is False)."""
        start = (self.remaining == 0) & (self.rng.random(self.remaining.shape[0]) < epsilon)
        starting = int(np.count_nonzero(start))
        if starting:
            self.held[start] = self.rng.integers(self.num_actions, size=starting)
            self.remaining[start] = self.durations(starting)
        exploring = self.remaining > 0
        self.remaining[exploring] -= 1
        return self.held.copy(), ~exploring

    def end(self, env: int) -> None:
        """End ``env``'s hold: its episode ended, and a new one starts free."""
        self.remaining[env] = 0
