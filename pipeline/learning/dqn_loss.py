"""The two pure tensor functions of a DQN update: Double-DQN targets and the masked Huber loss.

:class:`~pipeline.learning.learner.Learner` runs them (compiled or eager, through its
:class:`~pipeline.learning.learner_compile.CompiledStep`) on its own networks:

- :func:`double_dqn_targets`: ``ret + discount * Q_target(s', argmax_a Q_online(s', a))``
  with both networks as the caller left them (the learner puts the online one in eval
  mode, without gradients, around it: :func:`targets`), minus ``alpha`` times each
  action's gap to the best under advantage learning.
- :func:`huber_loss`: ``sum(w * huber(Q_online(s, a), target)) / denom`` with the online
  net's forward under autocast when ``amp_dtype`` is set, and the statistics the learner
  accumulates.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["double_dqn_targets", "huber_loss", "targets"]


def double_dqn_targets(
    online: nn.Module,
    target_net: nn.Module,
    next_obs: torch.Tensor,
    next_prev: torch.Tensor,
    ret: torch.Tensor,
    discount: torch.Tensor,
    obs: torch.Tensor,
    prev: torch.Tensor,
    action: torch.Tensor,
    *,
    advantage_learning: float = 0.0,
) -> torch.Tensor:
    """Double-DQN bootstrap targets (float32), with the advantage-learning term when
    ``advantage_learning`` > 0; no autocast: in eval mode BatchNorm is an affine map with a
    large shift, and in bf16 it cancels to errors of ~0.35 in a Q of 66, as large as the
    action gaps (docs/learning.md)."""
    alpha = advantage_learning
    q_next_online = online(next_obs, next_prev)
    if alpha > 0:  # a Python constant: a compiled graph has one branch
        both = target_net(torch.cat((next_obs, obs)), torch.cat((next_prev, prev)))
        q_next_target, q_target = both.tensor_split(2)
    else:
        q_next_target = target_net(next_obs, next_prev)
    best_action = q_next_online.argmax(dim=1, keepdim=True)
    bootstrap = q_next_target.gather(1, best_action).squeeze(1)
    target = ret + discount * bootstrap
    if alpha > 0:
        gap = q_target.max(dim=1).values - q_target.gather(1, action.unsqueeze(1)).squeeze(1)
        target = target - alpha * gap
    return target


def targets(online: nn.Module, targets_fn: Callable[..., torch.Tensor], *batch: torch.Tensor) -> torch.Tensor:
    """``targets_fn(*batch)`` (:func:`double_dqn_targets` on the learner's nets, compiled or
    not) with the online net in eval mode and no gradients, then back in train mode.

    The mode switches stay outside a compiled function: its graphs are specialised
    (guarded) on them, so each graph always sees one fixed mode. Eval mode makes the
    argmax the action the acting copy (also in eval mode) would choose, independent of
    the batch, without advancing the running statistics with next-state data.
    """
    online.eval()
    try:
        with torch.no_grad():
            return targets_fn(*batch)
    finally:
        online.train()


def huber_loss(
    online: nn.Module,
    obs: torch.Tensor,
    prev_action: torch.Tensor,
    action: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    denom: torch.Tensor,
    *,
    amp_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The masked Huber loss ``sum(weight * huber(Q(s, a) - target)) / denom``, the detached
    statistics ``[loss, sum w|td|, sum w*q, sum w]``, and each sample's |td| (detached).

    The online net's forward (train mode: batch statistics) runs under autocast to
    ``amp_dtype`` when one is given; the loss itself is computed in float32.
    """
    autocast: contextlib.AbstractContextManager[Any] = (
        torch.autocast(device_type=obs.device.type, dtype=amp_dtype)
        if amp_dtype is not None
        else contextlib.nullcontext()
    )
    with autocast:
        q_all = online(obs, prev_action)
    q_taken = q_all.float().gather(1, action.unsqueeze(1)).squeeze(1)
    # smooth_l1 with beta=1 is the Huber loss with delta=1.
    per_sample = F.smooth_l1_loss(q_taken, target, reduction="none", beta=1.0)
    loss = (weight * per_sample).sum() / denom
    q_detached = q_taken.detach()
    td_abs = (target - q_detached).abs()
    stats = torch.stack([loss.detach(), (weight * td_abs).sum(), (weight * q_detached).sum(), weight.sum()])
    return loss, stats, td_abs
