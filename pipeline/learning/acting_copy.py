"""The acting copy: a moving average of the online weights that the collectors play.

Between two publishes (100 updates) the online network's greedy action changed on 30-60 %
of replay states on World 1-1 (docs/learning-history.md, the steadiness figures): every publish
hands the collectors and the evaluator a different policy, and the evaluations of
neighbouring marks swing by hundreds of x_pos. BBF (Schwarzer et al. 2023) acts with a
Polyak average of the online weights for the same reason. :class:`ActingCopy` keeps one:
after every update ``acting += tau * (online - acting)`` over the parameters (one fused
lerp), so the acting weights average the online ones over about ``1 / tau`` updates.

An average of weights has no BatchNorm statistics of its own: the online network's
describe other weights. The copy's statistics are therefore re-estimated with its own
weights before every publish (the learner's calibration, on the states it re-estimates
the online network's over: :func:`~pipeline.learning.batchnorm_stats.recalibrate`),
which is why the option needs ``bn_calibration_states`` with a BatchNorm network.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from pipeline.learning.update import follow

__all__ = ["ActingCopy"]


class ActingCopy:
    """A Polyak average of ``online``'s parameters, with statistics of its own."""

    def __init__(self, online: nn.Module, tau: float) -> None:
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        self.tau = tau
        self.net: nn.Module = copy.deepcopy(online).eval()
        self.net.requires_grad_(False)
        self._online_params = list(online.parameters())
        self._params = list(self.net.parameters())

    def follow(self) -> None:
        """One step of the average (after every update): :func:`~pipeline.learning.update.follow`."""
        follow(self._params, self._online_params, self.tau)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.net.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.net.load_state_dict(state)
