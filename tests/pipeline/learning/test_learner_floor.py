"""Tests for pipeline.learning.learner_floor: the FLOPs of one update against a hand
computation of the network's layers, the count leaving the learner as it was, and the
GEMM peak as a rate."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.learning.learner import Learner
from pipeline.learning.learner_compile import random_batch
from pipeline.learning.learner_floor import gemm_peak_flops, update_flops
from pipeline.learning.learner_settings import LearnerSettings

NUM_ACTIONS = 7


def forward_flops(batch: int, frame_stack: int, num_actions: int, per_action: int) -> dict[str, int]:
    """2 x multiply-adds of each layer of the Nature trunk and the dueling head, for one forward."""
    return {
        "conv1": 2 * batch * 32 * 20 * 20 * (frame_stack * 8 * 8),
        "conv2": 2 * batch * 64 * 9 * 9 * (32 * 4 * 4),
        "conv3": 2 * batch * 64 * 7 * 7 * (64 * 3 * 3),
        "fc": 2 * batch * 3136 * 512,
        "value": 2 * batch * 512 * per_action,
        "advantage": 2 * batch * 512 * num_actions * per_action,
    }


@pytest.mark.parametrize("quantiles", [0, 32])
def test_one_update_costs_three_forwards_and_a_backward_without_the_input_gradient(quantiles: int) -> None:
    """Two no-grad forwards of the next states (the online argmax and the target), the loss
    forward, then its backward: every layer's weight gradient (a forward's worth) and every
    layer's input gradient but the first's (the frames need none)."""
    batch = 32
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False, quantiles=quantiles))
    layers = forward_flops(batch, 4, NUM_ACTIONS, max(quantiles, 1))
    forward = sum(layers.values())
    expected = 3 * forward + forward + (forward - layers["conv1"])
    before = {k: v.clone() for k, v in learner.online.state_dict().items()}
    assert update_flops(learner, random_batch(NUM_ACTIONS, 4, batch)) == expected
    # Counting trains nothing: the weights and the update count are as they were.
    assert learner.updates == 0
    for name, value in learner.online.state_dict().items():
        assert torch.equal(value, before[name]), name
    # The cpu preset's learner: 2.82 GFLOP an update.
    if quantiles == 32:
        assert round(expected / 1e9, 2) == 2.82


def test_the_gemm_peak_is_a_rate_of_the_product_at_this_precision() -> None:
    fp32 = gemm_peak_flops(torch.float32, size=256, repeats=2, seconds=0.05)
    assert math.isfinite(fp32) and fp32 > 0
    bf16 = gemm_peak_flops(torch.bfloat16, size=256, repeats=2, seconds=0.05)
    assert math.isfinite(bf16) and bf16 > 0
