"""Batch Renormalization: a BatchNorm whose training output is the eval-mode output.

BatchNorm trains with each batch's statistics and acts with running ones, so the function
the learner fits and the function the acting copies, the target and the evaluator compute
differ by the noise of a batch of 32. Precise BN (``pipeline/learning/batchnorm_stats.py``)
makes the running statistics the population's, but the training forward still sees its
batch's, and the two greedy actions then agree on about 92 % of replay states
(docs/learning.md, "Steadiness").

Batch Renormalization (Ioffe 2017, the normalisation CrossQ trains its critic with, Bhatt
et al. 2024) keeps the batch's statistics in the gradient and the running ones in the
value: with ``r = sigma_B / sigma`` and ``d = (mu_B - mu) / sigma``, both held constant
for the gradient,

    y = gamma * ((x - mu_B) / sigma_B * r + d) + beta

which in value is ``gamma * (x - mu) / sigma + beta``, the eval-mode output. r and d are
clipped to ``[1/r_max, r_max]`` and ``[-d_max, d_max]`` (the paper's final 3 and 5), so a
batch far from the running statistics still trains near its own.

How it fits precise BN:

- ``momentum=None`` is PyTorch's cumulative average, which a recalibration uses: the layer
  then normalises as BatchNorm does (the statistics being estimated must not feed back
  into the layers after it), and the clipping limits switch from 1 and 0 (plain
  BatchNorm) to r_max and d_max: the running statistics are now worth renormalising to.
- Any other momentum renormalises; 0 (the learner's frozen statistics) leaves them alone,
  a positive one moves them as BatchNorm does.

The limits are buffers, not Python attributes, so switching them does not recompile a
compiled forward, and they are not saved (``persistent=False``): the eval mode, the state
dict and so every acting copy are exactly BatchNorm2d's.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BatchRenorm2d", "D_MAX", "R_MAX"]

R_MAX: float = 3.0  # Ioffe 2017's final clipping limits
D_MAX: float = 5.0


class BatchRenorm2d(nn.BatchNorm2d):
    """``nn.BatchNorm2d`` with Batch Renormalization's train-mode forward (see the module docstring)."""

    def __init__(self, num_features: int, *, r_max: float = R_MAX, d_max: float = D_MAX, **kwargs: object) -> None:
        super().__init__(num_features, **kwargs)  # type: ignore[arg-type]
        if r_max < 1.0 or d_max < 0.0:
            raise ValueError(f"need r_max >= 1 and d_max >= 0, got r_max={r_max}, d_max={d_max}")
        self.r_max = r_max
        self.d_max = d_max
        # Plain BatchNorm (r = 1, d = 0) until a calibration has estimated the statistics.
        self.register_buffer("r_limit", torch.ones(()), persistent=False)
        self.register_buffer("d_limit", torch.zeros(()), persistent=False)

    @property
    def renormalising(self) -> bool:
        """Whether a calibration has switched the clipping limits to r_max and d_max."""
        return bool(self.d_limit.item() > 0 or self.r_limit.item() > 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        if self.momentum is None:  # a calibration: estimate as BatchNorm does, then renormalise
            with torch.no_grad():
                self.r_limit.fill_(self.r_max)
                self.d_limit.fill_(self.d_max)
            return super().forward(x)
        return self._renormalised(x)

    def _renormalised(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # statistics in fp32 under autocast, as BatchNorm's are
        mean = x32.mean(dim=(0, 2, 3))
        var = x32.var(dim=(0, 2, 3), unbiased=False)
        std = (var + self.eps).sqrt()
        running_std = (self.running_var + self.eps).sqrt()
        r = (std.detach() / running_std).clamp(min=1.0 / self.r_limit, max=self.r_limit)
        d = ((mean.detach() - self.running_mean) / running_std).clamp(min=-self.d_limit, max=self.d_limit)
        # y = weight * ((x - mean) / std * r + d) + bias, as one scale and one shift per channel.
        scale = self.weight * r / std
        shift = self.bias + self.weight * d - mean * scale
        y = x32 * scale[None, :, None, None] + shift[None, :, None, None]
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                if self.momentum:
                    count = x.numel() // x.shape[1]
                    self.running_mean.lerp_(mean, self.momentum)
                    self.running_var.lerp_(var * (count / max(count - 1, 1)), self.momentum)
        return y.to(x.dtype)
