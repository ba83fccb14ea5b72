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
  second-best action, the margin ``q_offset`` has to stay below for the two modes to agree;
- ``expected_agreement``: as ``agreement``, against the train-mode Q-values averaged over
  ``batchings`` batchings of the probe (each state normalised with other companions in
  each): the function the loss shapes in expectation over its batches;
- ``train_agreement``: the share of states whose train-mode greedy action is the same in
  the first two batchings. A state's train-mode Q depends on the 31 others of its batch,
  so train mode does not agree with itself everywhere: this is the ceiling that batch
  noise sets on ``agreement``, which no eval-mode statistics can lift.

The last two are NaN with a single batching.

The train-mode forward runs in chunks of the training batch size, so every state is
normalised as a training batch would normalise it: batching 0 chunks the states in the
order they were drawn (uniformly, so its chunks are random batches), every further
batching in a fixed random permutation of them, and leaves the running statistics as
they were (:func:`~pipeline.learning.batchnorm_stats.preserved_statistics`). All forwards
are float32 and gradient-free; the figures cost one host sync per measurement. A network
without BatchNorm computes the same function in both modes: agreement 1, offset 0.

These figures move far less between measurements than the x_pos of evaluation episodes,
so one seed can screen a change to the learner (docs/learning-history.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

from pipeline.common.gauges import steadiness_gauge
from pipeline.learning.batchnorm_stats import preserved_statistics

__all__ = ["SteadinessFigures", "SteadinessProbe"]


@dataclass(frozen=True)
class SteadinessFigures:
    """One measurement on the probe set (see the module docstring); NaN = not measured.

    Its fields are the figures of :data:`~pipeline.common.gauges.STEADINESS_FIGURES`;
    their order here is the order of their columns in the monitor's CSV."""

    agreement: float = math.nan
    churn: float = math.nan
    q_offset: float = math.nan
    action_gap: float = math.nan
    expected_agreement: float = math.nan
    train_agreement: float = math.nan

    def gauges(self) -> dict[str, float]:
        """The monitor's gauges of these figures (:func:`~pipeline.common.gauges.steadiness_gauge`)."""
        return {steadiness_gauge(name): value for name, value in asdict(self).items()}


class SteadinessProbe:
    """The figures of one network on a fixed set of states.

    Args:
        obs: the probe states, uint8 ``[N, S, 84, 84]`` (or what the network takes), on the
            network's device.
        chunk: states per train-mode forward: the training batch size.
        batchings: train-mode forwards of the probe per measurement, each with the states
            chunked in another order (1 = only the drawn order).
        seed: the seed of the further batchings' permutations.
    """

    def __init__(
        self,
        obs: torch.Tensor,
        chunk: int,
        *,
        batchings: int = 1,
        seed: int = 0,
    ) -> None:
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        if batchings < 1:
            raise ValueError(f"batchings must be >= 1, got {batchings}")
        if obs.shape[0] < 2:
            raise ValueError(f"a probe needs at least 2 states, got {obs.shape[0]}")
        self.obs = obs
        self.chunk = chunk
        generator = torch.Generator().manual_seed(seed)
        count = int(obs.shape[0])
        # Batching k chunks the states in orders[k]; orders[0] is the drawn order.
        orders = [torch.arange(count)] + [torch.randperm(count, generator=generator) for _ in range(batchings - 1)]
        self.orders = [order.to(obs.device) for order in orders]
        self._remembered: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    @torch.no_grad()
    def eval_q(self, net: nn.Module) -> torch.Tensor:
        """Eval-mode float32 Q-values of the probe states ``[N, A]`` (one forward)."""
        was_training = net.training
        net.eval()
        try:
            return self._forward(net, self.obs)
        finally:
            net.train(was_training)

    @property
    def batchings(self) -> int:
        """Train-mode forwards per measurement, each in another order of the states."""
        return len(self.orders)

    @torch.no_grad()
    def train_q(self, net: nn.Module, batching: int = 0) -> torch.Tensor:
        """Train-mode float32 Q-values ``[N, A]`` in the probe's order, the states chunked
        in ``batching``'s order and each chunk normalised by its own statistics; the
        running statistics are left as they were."""
        order = self.orders[batching]
        obs = self.obs if batching == 0 else self.obs[order]
        was_training = net.training
        with preserved_statistics(net):
            net.train()
            try:
                parts = [self._forward(net, chunk) for chunk in obs.split(self.chunk)]
            finally:
                net.train(was_training)
        q = torch.cat(parts)
        if batching == 0:
            return q
        return torch.empty_like(q).index_copy_(0, order, q)  # back to the probe's order

    def remember(self, net: nn.Module) -> None:
        """Keep ``net``'s eval-mode greedy actions: the next :meth:`measure`'s churn is
        counted against them."""
        self._remembered = self.eval_q(net).argmax(dim=1)

    def measure(self, net: nn.Module) -> SteadinessFigures:
        """The figures of ``net`` now (churn against the last :meth:`remember`, NaN
        without one); ``net`` then becomes the remembered one."""
        q_eval = self.eval_q(net)
        q_trains = [self.train_q(net, batching) for batching in range(self.batchings)]
        q_train = q_trains[0]
        greedy_eval = q_eval.argmax(dim=1)
        agreement = (greedy_eval == q_train.argmax(dim=1)).float().mean()
        if len(q_trains) > 1:
            expected = torch.stack(q_trains).mean(dim=0).argmax(dim=1)
            expected_agreement = (greedy_eval == expected).float().mean()
            train_agreement = (q_trains[0].argmax(dim=1) == q_trains[1].argmax(dim=1)).float().mean()
        else:
            expected_agreement = train_agreement = torch.tensor(math.nan, device=q_eval.device)
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
        figures = torch.stack(
            [agreement, churn, offset, gap, expected_agreement, train_agreement]
        ).tolist()  # one host sync
        return SteadinessFigures(*figures)

    @staticmethod
    def _forward(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=obs.device.type, enabled=False):
            return net(obs).float()
