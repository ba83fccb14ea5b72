"""The evaluation protocol the in-training evaluator and the learning benchmark share.

A policy is judged the way the field reports Atari and Mario agents: ``episodes``
episodes at a small random-action rate (epsilon 0.05 in the benchmark), each started
from a seed of its own, summed up as the mean and median x_pos and the flag rate. A
fixed Mario stage is deterministic, so a greedy policy has a single trajectory and one
changed decision moves its x_pos by a pipe or a pit; a little epsilon turns that single
figure into a distribution over starts the policy has to recover from.

Episode ``i`` of a protocol whose first seed is ``s`` uses seed ``s + i`` twice:

- ``env.reset(seed=s + i)`` (Catch's ball columns, a random stage's draw);
- the epsilon draws come from :func:`epsilon_rng` ``(s + i)``, a stream of its own per
  episode, so an episode's figures depend only on the weights and its seed: the same
  weights with the same seeds give the same figures, whatever the episode count or the
  order the episodes run in.

The epsilon stream is derived from the seed, not the seed itself: gymnasium seeds the
env's generator with ``default_rng(seed)``'s exact stream, and the same stream for the
random actions would tie every random action to the env's draws.

``sticky`` plays the episodes with sticky actions (:class:`envs.wrappers.StickyActions`, the
stochastic protocol of Machado et al. 2018; their draws are a third stream of the episode's
seed); None plays without them, as every run trains.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pipeline.learning.episode_loop import EpisodeResult, Step, play_episode, summarise

__all__ = [
    "EVAL_SEED_OFFSET",
    "FIGURE_KEYS",
    "EvaluationProtocol",
    "epsilon_rng",
    "episode_seeds",
    "play_protocol",
    "protocol_figures",
]

EVAL_SEED_OFFSET = 5_000_000  # evaluation seeds never coincide with collector seeds
EPSILON_STREAM = 1  # the second number of the epsilon generator's seed sequence
# What a protocol reports (episode_loop.summarise's names), in the order it is printed.
FIGURE_KEYS: tuple[str, ...] = (
    "episodes",
    "mean_x_pos",
    "median_x_pos",
    "max_x_pos",
    "flag_rate",
    "mean_return",
    "mean_length",
)


def episode_seeds(first: int, episodes: int) -> list[int]:
    """The seeds of a protocol's episodes: ``first``, ``first + 1``, ... (all distinct)."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes!r}")
    return list(range(first, first + episodes))


def epsilon_rng(seed: int) -> Any:
    """The generator of one episode's random actions: a stream of its own, derived from ``seed``."""
    import numpy as np

    return np.random.default_rng((seed, EPSILON_STREAM))


@dataclass(frozen=True)
class EvaluationProtocol:
    """How a policy is evaluated: ``episodes`` episodes from ``first_seed`` on, at ``epsilon``.

    Attributes:
        episodes: episodes per evaluation.
        epsilon: probability of a uniform random action at each step (0 = greedy).
        first_seed: the first episode's seed; episode ``i`` uses ``first_seed + i``.
        max_steps: agent steps after which an episode is cut (0 = only the env's limits).
        sticky: the sticky-action probability the episodes are played with (None: none,
            as every run trains).
    """

    episodes: int
    epsilon: float
    first_seed: int
    max_steps: int
    sticky: float | None = None

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon!r}")
        if self.max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {self.max_steps!r}")
        if self.sticky is not None and not 0.0 <= self.sticky < 1.0:
            raise ValueError(f"sticky must be in [0, 1) or None, got {self.sticky!r}")

    @property
    def seeds(self) -> list[int]:
        return episode_seeds(self.first_seed, self.episodes)

    def key(self) -> str:
        """A string that names the protocol exactly (a cache key: another protocol never matches)."""
        last = self.first_seed + self.episodes - 1
        key = (
            f"episodes={self.episodes},epsilon={self.epsilon:g},seeds={self.first_seed}..{last},"
            f"max_steps={self.max_steps}"
        )
        # Only when set: the keys of protocols from before sticky existed stay valid.
        return key if self.sticky is None else f"{key},sticky={self.sticky:g}"

    def describe(self) -> str:
        """One line for people, e.g. ``20 episodes at epsilon 0.05 (seeds 5000000..5000019)``."""
        last = self.first_seed + self.episodes - 1
        seeds = f"seed {self.first_seed}" if self.episodes == 1 else f"seeds {self.first_seed}..{last}"
        sticky = "" if self.sticky is None else f", sticky actions {self.sticky:g}"
        return f"{self.episodes} episode(s) at epsilon {self.epsilon:g}{sticky} ({seeds})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "episodes": self.episodes,
            "epsilon": self.epsilon,
            "first_seed": self.first_seed,
            "max_steps": self.max_steps,
            "sticky": self.sticky,
        }

    @property
    def sticky_actions(self) -> float:
        """The probability :func:`~pipeline.learning.episode_loop.build_env` plays these episodes with."""
        return 0.0 if self.sticky is None else self.sticky


def protocol_steps(
    env: Any,
    model: Any,
    protocol: EvaluationProtocol,
    seed: int,
    *,
    frame_stack: int,
    num_actions: int,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[Step]:
    """The steps of the protocol's episode from ``seed``: its epsilon drawn from the
    episode's own generator, its step cap (see :func:`~pipeline.learning.episode_loop.play_episode`)."""
    return play_episode(
        env,
        model,
        frame_stack=frame_stack,
        num_actions=num_actions,
        seed=seed,
        epsilon=protocol.epsilon,
        rng=epsilon_rng(seed),
        max_steps=protocol.max_steps,
        should_stop=should_stop,
    )


def play_protocol(
    env: Any,
    model: Any,
    protocol: EvaluationProtocol,
    *,
    frame_stack: int,
    num_actions: int,
    should_stop: Callable[[], bool] | None = None,
) -> list[EpisodeResult] | None:
    """Play every episode of ``protocol``; None when ``should_stop`` interrupted it.

    The caller runs torch on one thread (:func:`~pipeline.learning.episode_loop.single_thread_torch`,
    or a process set up that way): batch-1 inference gains nothing from more.
    """
    results = []
    for seed in protocol.seeds:
        for step in protocol_steps(
            env, model, protocol, seed, frame_stack=frame_stack, num_actions=num_actions, should_stop=should_stop
        ):
            if step.result is not None:
                results.append(step.result)
        if should_stop is not None and should_stop():
            return None
    return results


def protocol_figures(results: list[EpisodeResult]) -> dict[str, Any]:
    """Mean and median x_pos, flag rate, ... of a protocol's episodes (:data:`FIGURE_KEYS`)."""
    summary = summarise(results)
    return {key: summary[key] for key in FIGURE_KEYS}
