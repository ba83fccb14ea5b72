"""The math of one DQN update, top to bottom: targets, loss, step, average.

:class:`~pipeline.learning.learner.Learner` runs these in this order on its networks, one
replay batch ``(s, a, ret, s', discount, weight)`` at a time; where they run (device),
in what precision (autocast) and whether compiled is the learner's plumbing
(:mod:`~pipeline.learning.learner_compile`, :mod:`~pipeline.learning.learner_device`),
never part of the math here.

1. **Targets**, without gradients, the online net in eval mode (:func:`targets`):
   Double DQN's selection ``a* = argmax_a Q_online(s', a)`` and the target net's value of
   it. With QR-DQN (``quantiles`` N > 0, the default, Dabney et al. 2018) the target net
   gives N quantiles of the return at ``a*`` (:func:`quantile_targets`); with Q-values one
   number (:func:`double_dqn_targets`). Either way ``ret + discount * bootstrap``:
   ``discount`` is ``gamma**k`` from the replay, 0 after a terminal.
2. **Loss**, the online net in train mode (batch statistics), its forward under autocast
   when the learner has a low precision: each of the taken action's N quantiles pulled
   toward every target sample by the asymmetric Huber loss
   ``|tau_i - 1{u < 0}| huber(u)``, ``u = target_j - theta_i``, summed over ``i`` and
   averaged over ``j`` (:func:`quantile_huber_loss`); with Q-values the Huber loss of
   ``Q(s, a) - target`` (:func:`huber_loss`). Per sample weighted by ``weight`` (0 for a
   candidate the replay could not complete) and normalised by the weights' sum.
3. **Step** (:func:`optimizer_step`): backward, the gradients clipped to norm
   :data:`GRAD_CLIP`, one Adam step.
4. **Average** (:func:`follow`): the acting copy moves ``tau`` of the way to the online
   weights, ``acting += tau * (online - acting)``.

Every ``target_sync_updates`` the target becomes a copy of the online net, BatchNorm
statistics too (re-estimated first: :mod:`~pipeline.learning.batchnorm_stats`); that and
the bookkeeping are the learner's.

Why QR-DQN is the default: the return that follows a state on 1-1 is two-headed (Mario
clears the jump or falls into the pit) and its mean hides how close the pit is; learning
the whole distribution gives the trunk more to shape its features on. On the learning
benchmark it finished 1-1 in 0.50 of the 2M marks' episodes on two seeds against the
Q-value learner's 0.40 and 0.30 (docs/learning.md).

Why the targets run in float32 under any autocast: in eval mode BatchNorm is an affine map
with a large shift, and in bf16 it cancels to errors of ~0.35 in a Q of 66, as large as
the gaps between actions that decide every argmax (docs/learning-history.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "ADAM_EPS",
    "GRAD_CLIP",
    "double_dqn_targets",
    "follow",
    "huber_loss",
    "loss_autocast",
    "optimizer_step",
    "quantile_huber_loss",
    "quantile_midpoints",
    "quantile_targets",
    "targets",
    "weighted_mean",
]

# Adam's epsilon: Rainbow's (Hessel et al. 2018), which bounds a step where a gradient's second
# moment is tiny; every run of this project used it, and no other value was ever measured.
ADAM_EPS: float = 1.5e-4
# The gradient norm an update clips to: every run of this project used 10, never another value.
GRAD_CLIP: float = 10.0


# ---------------------------------------------------------------------------- 1. targets


def targets(online: nn.Module, targets_fn: Callable[..., torch.Tensor], *batch: torch.Tensor) -> torch.Tensor:
    """``targets_fn(*batch)`` (:func:`quantile_targets` or :func:`double_dqn_targets` on the
    learner's nets, compiled or not) with the online net in eval mode and no gradients,
    then back in train mode.

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


def quantile_targets(
    online: nn.Module,
    target_net: nn.Module,
    next_obs: torch.Tensor,
    ret: torch.Tensor,
    discount: torch.Tensor,
) -> torch.Tensor:
    """Target samples ``[B, N]`` (float32): the target net's quantiles of the action the
    online net's mean Q-values pick at ``s'``, discounted, plus the n-step return.

    The frames of ``s'`` are converted once for both networks
    (:meth:`models.QNetwork.frames`).
    """
    next_frames = online.frames(next_obs)
    best_action = online(next_frames).argmax(dim=1)
    next_quantiles = target_net.quantile_values(next_frames)  # [B, A, N]
    chosen = next_quantiles[torch.arange(next_quantiles.shape[0], device=next_obs.device), best_action]
    return ret.unsqueeze(1) + discount.unsqueeze(1) * chosen


def double_dqn_targets(
    online: nn.Module,
    target_net: nn.Module,
    next_obs: torch.Tensor,
    ret: torch.Tensor,
    discount: torch.Tensor,
) -> torch.Tensor:
    """Double-DQN bootstrap targets ``[B]`` (float32) of the Q-value learner."""
    next_frames = online.frames(next_obs)
    best_action = online(next_frames).argmax(dim=1, keepdim=True)
    bootstrap = target_net(next_frames).gather(1, best_action).squeeze(1)
    return ret + discount * bootstrap


# ---------------------------------------------------------------------------- 2. loss


def loss_autocast(obs: torch.Tensor, amp_dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """Autocast to ``amp_dtype`` on ``obs``'s device for a loss's online forward, or nothing."""
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=obs.device.type, dtype=amp_dtype)


def weighted_mean(
    per_sample: torch.Tensor, weight: torch.Tensor, *, q: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sum(weight * per_sample) / max(sum(weight), 1)`` (a candidate the replay could not
    complete weighs 0) and the detached statistics ``[loss, sum w|td|, sum w*q, sum w]`` of
    the taken actions' Q-values ``q`` against the targets' values ``target``."""
    loss = (weight * per_sample).sum() / weight.sum().clamp(min=1.0)
    td_abs = (target - q).abs()
    stats = torch.stack([loss.detach(), (weight * td_abs).sum(), (weight * q).sum(), weight.sum()])
    return loss, stats


def quantile_midpoints(quantiles: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The quantile fractions the heads estimate: ``(2i - 1) / 2N`` for i = 1..N, float32 ``[N]``."""
    return (torch.arange(quantiles, dtype=torch.float32, device=device) + 0.5) / quantiles


def quantile_huber_loss(
    online: nn.Module,
    obs: torch.Tensor,
    action: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    *,
    amp_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The weighted quantile Huber loss and the detached statistics ``[loss, sum w|td|, sum w*q,
    sum w]`` for a target ``[B, N]``.

    The statistics read as the Huber loss's do: ``q`` is the taken action's Q-value (the
    mean of its quantiles) and ``td`` the gap between the means of the target samples and
    of those quantiles, so the monitor's figures mean the same whichever loss trains. The
    loss is computed in float32.
    """
    with loss_autocast(obs, amp_dtype):
        quantiles_all = online.quantile_values(obs)  # [B, A, N]
    rows = torch.arange(quantiles_all.shape[0], device=obs.device)
    theta = quantiles_all.float()[rows, action]  # [B, N]
    taus = quantile_midpoints(theta.shape[1], obs.device)
    # u[b, i, j] = target_j - theta_i: every target sample against every quantile.
    u = target.unsqueeze(1) - theta.unsqueeze(2)
    huber = F.smooth_l1_loss(u, torch.zeros_like(u), reduction="none")  # Huber with delta 1, of u itself
    asymmetry = (taus.view(1, -1, 1) - (u.detach() < 0).float()).abs()
    per_sample = (asymmetry * huber).mean(dim=2).sum(dim=1)
    return weighted_mean(per_sample, weight, q=theta.detach().mean(dim=1), target=target.mean(dim=1))


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
    detached statistics ``[loss, sum w|td|, sum w*q, sum w]`` (the Q-value learner's)."""
    with loss_autocast(obs, amp_dtype):
        q_all = online(obs)
    q_taken = q_all.float().gather(1, action.unsqueeze(1)).squeeze(1)
    # smooth_l1 with beta=1 is the Huber loss with delta=1.
    per_sample = F.smooth_l1_loss(q_taken, target, reduction="none", beta=1.0)
    return weighted_mean(per_sample, weight, q=q_taken.detach(), target=target)


# ---------------------------------------------------------------------------- 3. step


def optimizer_step(
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    params: Sequence[nn.Parameter],
    scaler: torch.amp.GradScaler | None = None,
) -> torch.Tensor:
    """Backward, the gradients clipped to norm :data:`GRAD_CLIP`, one optimizer step;
    returns the gradient norm before clipping (a device tensor, no host sync).

    ``scaler`` is fp16's loss scaling on CUDA (bf16 needs none): the loss is scaled for the
    backward and the gradients unscaled before the clip, so the clip sees the true ones.
    """
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(params, GRAD_CLIP)
        optimizer.step()
        return grad_norm
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = nn.utils.clip_grad_norm_(params, GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    return grad_norm


# ---------------------------------------------------------------------------- 4. average


@torch.no_grad()
def follow(acting: list[torch.Tensor], online: list[torch.Tensor], tau: float) -> None:
    """One step of the acting copy's average: ``acting += tau * (online - acting)`` for
    every parameter, in one fused lerp (:class:`~pipeline.learning.acting_copy.ActingCopy`)."""
    torch._foreach_lerp_(acting, online, tau)
