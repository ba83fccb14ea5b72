"""Where the learner runs: its device, its autocast dtype, and batches moved onto it.

:func:`batch_to_device` moves a replay batch (:class:`BatchLike`) to the learner's device
once per update: pinned and non-blocking when the learner is on CUDA and the batch on the
CPU, no copy at all when both are on the CPU.
"""

from __future__ import annotations

from typing import Protocol

import torch

from pipeline.common.errors import UserError

__all__ = ["BATCH_FIELDS", "BatchLike", "batch_to_device", "pick_amp_dtype", "resolve_device", "to_device"]

BATCH_FIELDS: tuple[str, ...] = ("obs", "action", "ret", "next_obs", "discount", "weight")


class BatchLike(Protocol):
    """What ``Learner.update`` reads from a replay batch (see ``pipeline/learning/replay.py``)."""

    obs: torch.Tensor  # uint8 [B, S, 84, 84]
    action: torch.Tensor  # int64 [B]
    ret: torch.Tensor  # float32 [B], n-step discounted reward sum
    next_obs: torch.Tensor  # uint8 [B, S, 84, 84]
    discount: torch.Tensor  # float32 [B], gamma**k or 0 when terminated
    weight: torch.Tensor  # float32 [B], 1 valid / 0 invalid


def resolve_device(name: str) -> torch.device:
    """The torch device a ``device`` setting names, with CUDA's index pinned: ``auto`` is
    CUDA when there is a GPU, else the CPU. ``cuda`` without a GPU is a ``UserError``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    elif name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name!r} but no CUDA GPU is available; use --device cpu or --device auto")
    device = torch.device(name)
    # Tensors report "cuda:0", never "cuda": pin the index so device comparisons work.
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def pick_amp_dtype(device: torch.device, enabled: bool) -> torch.dtype | None:
    """The autocast dtype of a learner on ``device`` (None: no autocast)."""
    if not enabled:
        return None
    if device.type == "cpu":
        return torch.bfloat16
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return None  # other backends: no autocast rather than an untested one


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` (the same tensor when it is there already)."""
    if not isinstance(tensor, torch.Tensor):
        tensor = torch.as_tensor(tensor)
    if tensor.device == device:
        return tensor  # CPU learner on a CPU batch: no copy
    if device.type == "cuda" and tensor.device.type == "cpu":
        # Pinned memory makes the copy asynchronous; the caching host allocator keeps
        # the pinned block alive until the copy has finished.
        if not tensor.is_pinned():
            tensor = tensor.pin_memory()
        return tensor.to(device, non_blocking=True)
    return tensor.to(device)


def batch_to_device(batch: BatchLike, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The batch's fields (:data:`BATCH_FIELDS`, in order) on ``device``; actions int64."""
    obs, action, ret, next_obs, discount, weight = (to_device(getattr(batch, name), device) for name in BATCH_FIELDS)
    # gather() needs int64 indices; .long() is a no-op for the replay's int64 actions.
    return obs, action.long(), ret, next_obs, discount, weight
