"""Random-shift augmentation: a true per-sample translation with replicate edges, one
offset per stack, dtype and shape kept, and obs / next obs shifted independently."""

from __future__ import annotations

import pytest
import torch

from pipeline.learning.augment import random_shift
from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings

SIZE = 84


def coordinate_frames(batch: int) -> torch.Tensor:
    """Frame 0 holds each pixel's row, frame 1 its column (0..83 fit in uint8); frames 2-3
    repeat them, so a crop's offsets can be read back from its pixels."""
    rows = torch.arange(SIZE, dtype=torch.uint8).view(SIZE, 1).expand(SIZE, SIZE)
    cols = torch.arange(SIZE, dtype=torch.uint8).view(1, SIZE).expand(SIZE, SIZE)
    stack = torch.stack([rows, cols, rows, cols])
    return stack.unsqueeze(0).expand(batch, 4, SIZE, SIZE).contiguous()


def read_shifts(shifted: torch.Tensor) -> torch.Tensor:
    """[B, 2] (row, column) shift of each sample, read at the frame's centre."""
    centre = SIZE // 2
    return torch.stack([shifted[:, 0, centre, centre], shifted[:, 1, centre, centre]], dim=1).long() - centre


def reference_shift(frames: torch.Tensor, shifts: torch.Tensor, pad: int) -> torch.Tensor:
    """Brute force: pad each sample with its edge pixels, crop at its offset."""
    padded = torch.nn.functional.pad(frames.float(), (pad, pad, pad, pad), mode="replicate")
    out = torch.empty_like(frames)
    for b, (dy, dx) in enumerate(shifts.tolist()):
        top, left = pad + dy, pad + dx
        out[b] = padded[b, :, top : top + SIZE, left : left + SIZE].to(frames.dtype)
    return out


def test_shift_keeps_shape_dtype_and_device() -> None:
    frames = torch.randint(0, 256, (8, 4, SIZE, SIZE), dtype=torch.uint8)
    shifted = random_shift(frames, 4)
    assert shifted.shape == frames.shape and shifted.dtype == torch.uint8 and shifted.device == frames.device
    assert random_shift(frames, 0) is frames  # off means untouched


def test_shift_is_a_translation_with_replicated_edges() -> None:
    gen = torch.Generator().manual_seed(3)
    frames = torch.randint(0, 256, (64, 4, SIZE, SIZE), dtype=torch.uint8, generator=gen)
    shifted = random_shift(frames, 4, generator=torch.Generator().manual_seed(5))
    shifts = read_shifts(random_shift(coordinate_frames(64), 4, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(shifted, reference_shift(frames, shifts, 4))
    assert shifts.abs().max() <= 4
    # Every offset of the 9 x 9 grid is drawn, and the draws differ between samples.
    many = read_shifts(random_shift(coordinate_frames(4096), 4, generator=torch.Generator().manual_seed(7)))
    assert len({tuple(s) for s in many.tolist()}) == 81


def test_one_offset_per_stack() -> None:
    shifted = random_shift(coordinate_frames(32), 4)
    assert torch.equal(shifted[:, 0], shifted[:, 2]) and torch.equal(shifted[:, 1], shifted[:, 3])


def test_rejects_frames_without_a_stack_axis() -> None:
    with pytest.raises(ValueError, match="batch, stack, height, width"):
        random_shift(torch.zeros(4, SIZE, SIZE, dtype=torch.uint8), 4)


def test_learner_shifts_obs_and_next_obs_independently() -> None:
    torch.manual_seed(0)
    learner = Learner(3, LearnerSettings(compile=False, amp=False, augment_pad=4))
    batch = 256
    frames = coordinate_frames(batch)
    tensors = (
        frames,
        torch.zeros(batch, dtype=torch.long),
        torch.zeros(batch),
        frames.clone(),
        torch.ones(batch),
        torch.ones(batch),
    )
    obs, action, ret, next_obs, discount, weight = learner.augmented(tensors)
    assert obs.shape == next_obs.shape == frames.shape and obs.dtype == next_obs.dtype == torch.uint8
    obs_shifts, next_shifts = read_shifts(obs), read_shifts(next_obs)
    # Independent 9 x 9 offsets agree by chance for 1/81 of samples; the same offsets would agree for all.
    assert (obs_shifts != next_shifts).any(dim=1).float().mean() > 0.8
    assert (obs_shifts != 0).any(dim=1).float().mean() > 0.8  # and both are actually shifted
    assert action is tensors[1] and ret is tensors[2] and discount is tensors[4] and weight is tensors[5]

    plain = Learner(3, LearnerSettings(compile=False, amp=False, augment_pad=0))
    assert plain.augmented(tensors) is tensors
