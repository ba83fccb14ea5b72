"""How far a Q-network's values are from the returns its own policy collects.

A DQN's values can drift far from what the agent achieves while its greedy actions stay
ordered by differences much smaller than that drift, and then the greedy policy flips
between neighbouring checkpoints. :func:`value_check` measures both on the evaluation
protocol's episodes: for every greedy step (random ones are skipped: the network was
not asked), the Q-value of the action taken beside the discounted return that actually
followed it (the run's gamma, rewards scaled as in training, nothing bootstrapped after
the episode's last step), and the gap between the best and second-best action.
``python main.py eval --values`` prints them.
"""

from __future__ import annotations

import statistics
from typing import Any

from pipeline.learning.episode_loop import EpisodeResult
from pipeline.run.evaluator.protocol import EvaluationProtocol, protocol_steps

__all__ = ["value_check"]


class _RecordingModel:
    """Calls the model and keeps the Q row of its latest call (None until it is asked)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.last: Any = None

    def __call__(self, obs: Any) -> Any:
        q = self.model(obs)
        self.last = q[0].float()
        return q


def discounted_returns(rewards: list[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma G_{t+1}`` for every step, 0 after the last."""
    returns = [0.0] * len(rewards)
    following = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        following = rewards[t] + gamma * following
        returns[t] = following
    return returns


def value_check(
    env: Any,
    model: Any,
    protocol: EvaluationProtocol,
    *,
    frame_stack: int,
    num_actions: int,
    gamma: float,
    reward_scale: float,
) -> tuple[list[EpisodeResult], dict[str, float]]:
    """Play ``protocol`` (the same episodes as :func:`~pipeline.run.evaluator.protocol.play_protocol`)
    and return the episodes' results and the value figures of their greedy steps.

    ``env`` gives rewards in game units (:func:`~pipeline.learning.episode_loop.build_env`);
    ``reward_scale`` turns them into the units the network learnt.
    """
    recorder = _RecordingModel(model)
    results: list[EpisodeResult] = []
    q_taken: list[float] = []
    followed: list[float] = []
    gaps: list[float] = []
    for seed in protocol.seeds:
        greedy: list[tuple[int, float, float]] = []  # (step, Q of the action, gap to the second)
        rewards: list[float] = []
        for step in protocol_steps(env, recorder, protocol, seed, frame_stack=frame_stack, num_actions=num_actions):
            if recorder.last is not None:
                top2 = recorder.last.topk(min(2, num_actions)).values
                gap = float(top2[0] - top2[-1])
                greedy.append((len(rewards), float(recorder.last[step.action]), gap))
                recorder.last = None
            rewards.append(step.reward * reward_scale)
            if step.result is not None:
                results.append(step.result)
        returns = discounted_returns(rewards, gamma)
        for t, q, gap in greedy:
            q_taken.append(q)
            followed.append(returns[t])
            gaps.append(gap)
    figures = {"greedy_steps": float(len(q_taken))}
    if q_taken:
        mean_q, mean_return = statistics.fmean(q_taken), statistics.fmean(followed)
        figures |= {
            "mean_q_taken": mean_q,
            "mean_return_followed": mean_return,
            "q_over_return": mean_q / mean_return if mean_return else float("nan"),
            "median_action_gap": statistics.median(gaps),
        }
    return results, figures
