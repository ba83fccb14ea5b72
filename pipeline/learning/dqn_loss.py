"""The two pure tensor functions of a DQN update: Double-DQN targets and the masked Huber loss.

:class:`~pipeline.learning.learner.Learner` runs them (compiled or eager, through its
:class:`~pipeline.learning.learner_compile.CompiledStep`) on its own networks:

- :func:`double_dqn_targets`: ``ret + discount * Q_target(s', argmax_a Q_online(s', a))``
  with both networks as the caller left them (the learner puts the online one in eval
  mode, without gradients, around it: :func:`targets`).
- :func:`huber_loss`: ``sum(w * huber(Q_online(s, a), target)) / max(sum(w), 1)`` with the online
  net's forward under autocast when ``amp_dtype`` is set, and the statistics the learner
  accumulates for its monitor metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["double_dqn_targets", "huber_loss", "loss_autocast", "targets"]


def double_dqn_targets(
    online: nn.Module,
    target_net: nn.Module,
    next_obs: torch.Tensor,
    ret: torch.Tensor,
    discount: torch.Tensor,
) -> torch.Tensor:
    """Double-DQN bootstrap targets (float32); no autocast: in eval mode BatchNorm is an
    affine map with a large shift, and in bf16 it cancels to errors of ~0.35 in a Q of 66,
    as large as the action gaps (docs/learning-history.md). The frames of ``s'`` are
    converted once for both networks (:meth:`models.QNetwork.frames`).
    """
    next_frames = online.frames(next_obs)
    best_action = online(next_frames).argmax(dim=1, keepdim=True)
    bootstrap = target_net(next_frames).gather(1, best_action).squeeze(1)
    return ret + discount * bootstrap


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


def loss_autocast(obs: torch.Tensor, amp_dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """Autocast to ``amp_dtype`` on ``obs``'s device for a loss's online forward, or nothing."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=obs.device.type, dtype=amp_dtype)


def huber_loss(
    online: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    *,
    amp_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked Huber loss ``sum(weight * huber(Q(s, a) - target)) / max(sum(weight), 1)`` and the
    detached statistics ``[loss, sum w|td|, sum w*q, sum w]``.

    The online net's forward (train mode: batch statistics) runs under autocast to
    ``amp_dtype`` when one is given; the loss itself is computed in float32.
    """
    with loss_autocast(obs, amp_dtype):
        q_all = online(obs)
    q_taken = q_all.float().gather(1, action.unsqueeze(1)).squeeze(1)
    # smooth_l1 with beta=1 is the Huber loss with delta=1.
    per_sample = F.smooth_l1_loss(q_taken, target, reduction="none", beta=1.0)
    loss = (weight * per_sample).sum() / weight.sum().clamp(min=1.0)
    q_detached = q_taken.detach()
    td_abs = (target - q_detached).abs()
    stats = torch.stack([loss.detach(), (weight * td_abs).sum(), (weight * q_detached).sum(), weight.sum()])
    return loss, stats
