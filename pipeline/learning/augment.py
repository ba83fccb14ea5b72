"""Random-shift augmentation of stacked frames (DrQ): pad, then crop back at a random offset.

Each sample of a batch is padded by ``pad`` pixels on every side with its own edge pixels
(replicate padding, as DrQ does: a zero border would be a new feature for the network to
explain) and cropped back to its original size at an offset drawn uniformly in
``[0, 2 * pad]`` per axis, one offset per sample, the same for every frame of its stack
(a stack is one moment seen four times; shifting its frames apart would fake motion).

Everything is one ``gather`` on the learner's device: no loop over the batch, no
host sync, and uint8 in, uint8 out (the network converts to float itself). The learner
shifts ``obs`` and ``next_obs`` with independent offsets, as DrQ(epsilon) does.
"""

from __future__ import annotations

import torch


def random_shift(frames: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``frames`` [B, S, H, W] shifted by up to ``pad`` pixels per axis, per sample.

    ``pad`` 0 returns ``frames`` itself. The result has the input's shape, dtype and device.
    """
    if pad <= 0:
        return frames
    if frames.dim() != 4:
        raise ValueError(f"random_shift expects [batch, stack, height, width], got shape {tuple(frames.shape)}")
    batch, stack, height, width = frames.shape
    device = frames.device
    # Clamping the source index to the frame is replicate padding without building the
    # padded copy: a crop at offset o of the padded frame reads pixel clamp(o - pad + i).
    shifts = torch.randint(-pad, pad + 1, (2, batch), device=device, generator=generator)
    rows = (shifts[0].view(batch, 1) + torch.arange(height, device=device)).clamp_(0, height - 1)  # [B, H]
    cols = (shifts[1].view(batch, 1) + torch.arange(width, device=device)).clamp_(0, width - 1)  # [B, W]
    # One gather over each flattened frame (one index per output pixel, shared by the
    # frames of a stack) costs a third of gathering rows, then columns.
    source = (rows.view(batch, height, 1) * width + cols.view(batch, 1, width)).view(batch, 1, height * width)
    flat = frames.reshape(batch, stack, height * width)
    return flat.gather(2, source.expand(batch, stack, height * width)).view(batch, stack, height, width)
