"""How a collector explores: epsilon-greedy, optionally temporally extended (ez-greedy).

ez-greedy (Dabney, Ostrovski and Barreto, ICLR 2021, "Temporally-Extended epsilon-Greedy
Exploration", appendix B.1): while an env is not repeating an action, with probability
epsilon it draws a uniform random action *and a duration* ``n`` from a zeta distribution,
``P(n) proportional to n ** -mu`` for ``n = 1 .. max_duration``, and takes that action
for the next ``n`` agent steps; otherwise it acts greedily. Plain epsilon-greedy is the
case ``max_duration = 1``: every exploration event lasts one step.

Why it matters for Mario: a tall pipe of World 1-1 needs A held for ~7 consecutive agent
steps. Epsilon-greedy over the 7 SIMPLE actions strings 7 A-actions together with
probability ~0.3 % even at epsilon 1; with ``mu = 2`` about 9 % of ez-greedy's
exploration events last 7 steps or more, and a third of those draw an action with A.

Everything is vectorized over a collector's envs (a few numpy operations on arrays of
``num_envs`` per step, no loop over the envs). The repeat state lives here, not in the
network, so it survives a weights update; :meth:`TemporallyExtendedEpsilonGreedy.reset`
ends an env's repeat at an episode's start.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TemporallyExtendedEpsilonGreedy", "zeta_probabilities"]


def zeta_probabilities(mu: float, max_duration: int) -> np.ndarray:
    """``P(n)`` for ``n = 1 .. max_duration`` of the zeta distribution cut at ``max_duration``."""
    if max_duration < 1:
        raise ValueError(f"max_duration must be >= 1, got {max_duration}")
    weights = np.arange(1, max_duration + 1, dtype=np.float64) ** -float(mu)
    return weights / weights.sum()


class TemporallyExtendedEpsilonGreedy:
    """Per-env exploration state of a collector: the action being repeated and the steps left.

    Each step, :meth:`choose` returns every env's exploratory action and a mask of the envs
    that act greedily this step (the caller fills those from one batched forward pass and
    skips the forward when the mask is empty).

    Args:
        num_envs: envs stepped together.
        num_actions: size of the action set.
        rng: the collector's generator (all draws come from it, so a seed replays them).
        max_duration: longest repeat in agent steps (1 = plain epsilon-greedy).
        mu: the zeta exponent (2 in the paper).
    """

    def __init__(
        self, num_envs: int, num_actions: int, rng: np.random.Generator, *, max_duration: int = 1, mu: float = 2.0
    ) -> None:
        self.num_actions = num_actions
        self.rng = rng
        self.max_duration = max_duration
        self._cdf = np.cumsum(zeta_probabilities(mu, max_duration))
        self._cdf[-1] = 1.0  # no draw may fall past the last duration by rounding
        self.held = np.zeros(num_envs, np.int64)  # the action each env repeats
        self.remaining = np.zeros(num_envs, np.int64)  # steps of it still to take

    def durations(self, count: int) -> np.ndarray:
        """``count`` durations drawn from the cut zeta distribution (inverse CDF, vectorized)."""
        return np.searchsorted(self._cdf, self.rng.random(count), side="right") + 1

    def reset(self, env: int) -> None:
        """End ``env``'s repeat (a new episode starts)."""
        self.remaining[env] = 0

    def choose(self, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
        """This step's exploratory actions ``[num_envs]`` and the mask of greedy envs.

        An env with steps left repeats its action; a free env starts a repeat with
        probability ``epsilon`` (and takes its first step now), else it is greedy. The
        returned actions are meaningful only where the mask is False.
        """
        free = self.remaining == 0
        start = free & (self.rng.random(free.shape[0]) < epsilon)
        starting = int(np.count_nonzero(start))
        if starting:
            self.held[start] = self.rng.integers(self.num_actions, size=starting)
            self.remaining[start] = self.durations(starting)
        exploring = self.remaining > 0
        self.remaining[exploring] -= 1
        return self.held.copy(), ~exploring
