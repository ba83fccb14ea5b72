"""Steadiness figures: how far the acting copy's greedy policy can be trusted.

The learner trains the Q-network in train mode (BatchNorm normalises by each batch) and
publishes it for eval-mode use (BatchNorm uses its running statistics). On a probe set of
replay states, the same from a :meth:`~SteadinessProbe.remember` to the measurement after
it (its owner draws a fresh set from the replay for each such pair, so that the states
stand for what the learner trains on now), :class:`SteadinessProbe` measures:

- ``agreement``: the share of states where the train-mode greedy action (what the loss
  shaped) equals the eval-mode one (what the acting copy plays);
- ``churn``: the share of states whose eval-mode greedy action changed since the weights
  :meth:`SteadinessProbe.remember` saw last (the trainer calls it at the publish before
  a measurement, so this is the change between two consecutive publishes);
- ``q_offset``: the mean over states and actions of ``|Q_eval - Q_train|``;
- ``action_gap``: the median over states of the eval-mode gap between the best and the
  second-best action, the margin ``q_offset`` has to stay below for the two modes to agree.

The train-mode forward runs in chunks of the training batch size, so every state is
normalised as a training batch would normalise it, and leaves the running statistics as
they were (:func:`~pipeline.learning.batchnorm_stats.preserved_statistics`). All forwards
are float32 and gradient-free; the figures cost one host sync per measurement. A network
without BatchNorm computes the same function in both modes: agreement 1, offset 0.

These figures move far less between measurements than the x_pos of evaluation episodes,
so one seed can screen a change to the learner (docs/learning.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from pipeline.learning.batchnorm_stats import preserved_statistics

__all__ = ["STEADINESS_GAUGES", "SteadinessFigures", "SteadinessProbe"]


@dataclass(frozen=True)
class SteadinessFigures:
    """One measurement on the probe set (see the module docstring); NaN = not measured."""

    agreement: float = math.nan
    churn: float = math.nan
    q_offset: float = math.nan
    action_gap: float = math.nan

    def gauges(self) -> dict[str, float]:
        """The monitor's gauges of these figures (:data:`STEADINESS_GAUGES`)."""
        return {f"steady_{name}": value for name, value in asdict(self).items()}


STEADINESS_GAUGES: tuple[str, ...] = tuple(SteadinessFigures().gauges())


class SteadinessProbe:
    """The figures of one network on a fixed set of states.

    Args:
        obs: the probe states, uint8 ``[N, S, 84, 84]`` (or what the network takes), on the
            network's device.
        prev_action: their previous actions (int64 ``[N]``), or None for a network without
            that input.
        chunk: states per train-mode forward: the training batch size.
    """

    def __init__(self, obs: torch.Tensor, prev_action: torch.Tensor | None, chunk: int) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if obs.shape[0] < 2:
            raise ValueError(f"a probe needs at least 2 states, got {obs.shape[0]}")
        self.obs = obs
        self.prev_action = prev_action
        self.chunk = chunk
        self._remembered: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    @torch.no_grad()
    def eval_q(self, net: nn.Module) -> torch.Tensor:
        """Eval-mode float32 Q-values of the probe states ``[N, A]`` (one forward)."""
        was_training = net.training
        net.eval()
        try:
            return self._forward(net, self.obs, self.prev_action)
        finally:
            net.train(was_training)

    @torch.no_grad()
    def train_q(self, net: nn.Module) -> torch.Tensor:
        """Train-mode float32 Q-values ``[N, A]``, each chunk normalised by its own
        statistics; the running statistics are left as they were."""
        was_training = net.training
        prev = self.prev_action
        with preserved_statistics(net):
            net.train()
            try:
                parts = [
                    self._forward(net, obs, None if prev is None else prev[start : start + self.chunk])
                    for start, obs in zip(range(0, len(self), self.chunk), self.obs.split(self.chunk))
                ]
            finally:
                net.train(was_training)
        return torch.cat(parts)

    def remember(self, net: nn.Module) -> None:
        """Keep ``net``'s eval-mode greedy actions: the next :meth:`measure`'s churn is
        counted against them."""
        self._remembered = self.eval_q(net).argmax(dim=1)

    def measure(self, net: nn.Module) -> SteadinessFigures:
        """The figures of ``net`` now (churn against the last :meth:`remember`, NaN
        without one); ``net`` then becomes the remembered one."""
        q_eval = self.eval_q(net)
        q_train = self.train_q(net)
        greedy_eval = q_eval.argmax(dim=1)
        agreement = (greedy_eval == q_train.argmax(dim=1)).float().mean()
        if self._remembered is not None:
            churn = (greedy_eval != self._remembered).float().mean()
        else:
            churn = torch.tensor(math.nan, device=q_eval.device)
        offset = (q_eval - q_train).abs().mean()
        if q_eval.shape[1] > 1:
            top2 = q_eval.topk(2, dim=1).values
            gap = (top2[:, 0] - top2[:, 1]).median()
        else:
            gap = torch.tensor(math.nan, device=q_eval.device)
        self._remembered = greedy_eval
        figures = torch.stack([agreement, churn, offset, gap]).tolist()  # the one host sync
        return SteadinessFigures(*figures)

    @staticmethod
    def _forward(net: nn.Module, obs: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        with torch.autocast(device_type=obs.device.type, enabled=False):
            q = net(obs) if prev is None else net(obs, prev)
        return q.float()
