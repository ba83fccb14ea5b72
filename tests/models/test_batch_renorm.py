"""Tests for models.batch_renorm: the training forward and its gradient against a hand
computation, the clipping, plain BatchNorm before a calibration and during one, the state
dict and eval mode of BatchNorm2d, and the network it builds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from models import build_qnetwork
from models.batch_renorm import D_MAX, R_MAX, BatchRenorm2d
from models.qnetwork import QNetwork
from pipeline.learning.batchnorm_stats import recalibrate

CHANNELS = 3


def calibrated_layer(mean: list[float], var: list[float], *, momentum: float = 0.0) -> BatchRenorm2d:
    """A layer whose running statistics are ``mean``/``var`` and whose limits a (tiny)
    calibration switched on, with a non-trivial affine part."""
    layer = BatchRenorm2d(CHANNELS).train()
    layer.momentum = None
    layer(torch.randn(4, CHANNELS, 5, 5))  # the calibration pass: switches the limits on
    layer.momentum = momentum
    with torch.no_grad():
        layer.running_mean.copy_(torch.tensor(mean))
        layer.running_var.copy_(torch.tensor(var))
        layer.weight.copy_(torch.tensor([1.5, 0.5, -1.0]))
        layer.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    return layer


def by_hand(layer: BatchRenorm2d, x: torch.Tensor) -> torch.Tensor:
    """Ioffe (2017), Algorithm 1, in float64 with r and d held constant for the gradient."""
    x64 = x.double()
    mean = x64.mean(dim=(0, 2, 3))
    std = torch.sqrt(x64.var(dim=(0, 2, 3), unbiased=False) + layer.eps)
    running_std = torch.sqrt(layer.running_var.double() + layer.eps)
    r = torch.clamp(std.detach() / running_std, 1 / R_MAX, R_MAX)
    d = torch.clamp((mean.detach() - layer.running_mean.double()) / running_std, -D_MAX, D_MAX)
    x_hat = (x64 - mean[None, :, None, None]) / std[None, :, None, None] * r[None, :, None, None]
    x_hat = x_hat + d[None, :, None, None]
    return layer.weight.double()[None, :, None, None] * x_hat + layer.bias.double()[None, :, None, None]


def test_training_forward_and_gradient_match_a_hand_computation() -> None:
    # Channel 0 within the limits, channel 1's r clipped (batch std 8x the running one),
    # channel 2's d clipped (batch mean 20 running stds away).
    layer = calibrated_layer([0.0, 0.0, -20.0], [1.0, 1.0, 1.0])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, CHANNELS, 4, 4, generator=gen) * torch.tensor([1.2, 8.0, 1.0])[None, :, None, None]
    x = x.requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y = layer(x)
    expected = by_hand(layer, x_ref)
    torch.testing.assert_close(y.double(), expected, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(y.shape, generator=gen)
    y.backward(upstream)
    expected.backward(upstream.double())
    assert x.grad is not None and x_ref.grad is not None
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)


def test_unclipped_training_output_is_the_eval_output_but_the_gradient_sees_the_batch() -> None:
    layer = calibrated_layer([0.3, -0.2, 0.5], [1.1, 0.9, 1.3])
    x = (torch.randn(8, CHANNELS, 4, 4) * 1.1 + 0.2).requires_grad_()
    y_train = layer(x)
    y_eval = layer.eval()(x)
    torch.testing.assert_close(y_train, y_eval, rtol=1e-5, atol=1e-5)
    # The eval forward's gradient is the constant weight / running std; the training one
    # goes through the batch statistics, so the two differ.
    (grad_train,) = torch.autograd.grad(y_train.square().sum(), x)
    (grad_eval,) = torch.autograd.grad(y_eval.square().sum(), x)
    assert not torch.allclose(grad_train, grad_eval, atol=1e-3)


def test_before_and_during_a_calibration_it_is_batchnorm() -> None:
    torch.manual_seed(0)
    renorm, plain = BatchRenorm2d(CHANNELS).train(), nn.BatchNorm2d(CHANNELS).train()
    assert not renorm.renormalising
    x = torch.randn(5, CHANNELS, 4, 4) * 3 + 1
    # Before any calibration the limits are 1 and 0: the batch's own statistics.
    torch.testing.assert_close(renorm(x), plain(x))
    torch.testing.assert_close(renorm.running_mean, plain.running_mean)
    torch.testing.assert_close(renorm.running_var, plain.running_var)
    # A calibration (momentum None) estimates as BatchNorm does, then switches them on.
    renorm.momentum = plain.momentum = None
    renorm.reset_running_stats()
    plain.reset_running_stats()
    for seed in range(3):
        chunk = torch.randn(5, CHANNELS, 4, 4, generator=torch.Generator().manual_seed(seed)) * 2
        torch.testing.assert_close(renorm(chunk), plain(chunk))
    torch.testing.assert_close(renorm.running_var, plain.running_var)
    assert renorm.renormalising


def test_a_positive_momentum_moves_the_statistics_as_batchnorm_does_and_zero_keeps_them() -> None:
    layer = calibrated_layer([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], momentum=0.1)
    plain = nn.BatchNorm2d(CHANNELS, momentum=0.1).train()
    plain.running_mean.zero_()
    plain.running_var.fill_(1.0)
    x = torch.randn(6, CHANNELS, 4, 4) * 2 + 0.5
    layer(x)
    plain(x)
    torch.testing.assert_close(layer.running_mean, plain.running_mean)
    torch.testing.assert_close(layer.running_var, plain.running_var)
    layer.momentum = 0.0
    kept = layer.running_var.clone()
    layer(x + 4)
    assert torch.equal(layer.running_var, kept)


def test_limits_must_allow_plain_batchnorm() -> None:
    with pytest.raises(ValueError, match="r_max"):
        BatchRenorm2d(CHANNELS, r_max=0.5)


def test_the_network_with_it_saves_and_acts_as_a_batchnorm_network() -> None:
    torch.manual_seed(0)
    renorm = QNetwork(4, batch_renorm=True)
    assert sum(isinstance(m, BatchRenorm2d) for m in renorm.modules()) == 3
    states = torch.randint(0, 256, (64, 4, 84, 84), dtype=torch.uint8)
    recalibrate(renorm, [(chunk, None) for chunk in states.split(32)])
    acting = build_qnetwork(4)
    assert set(acting.state_dict()) == set(renorm.state_dict())  # the limits are not saved
    acting.load_state_dict(renorm.state_dict())
    renorm.eval()
    with torch.no_grad():
        torch.testing.assert_close(acting(states[:8]), renorm(states[:8]))
        # Calibrated and frozen, the training forward computes the same Q-values.
        for layer in renorm.modules():
            if isinstance(layer, BatchRenorm2d):
                assert layer.renormalising
                layer.momentum = 0.0
        q_train = renorm.train()(states[:32])
        q_eval = renorm.eval()(states[:32])
    torch.testing.assert_close(q_train, q_eval, rtol=1e-4, atol=1e-4)
    assert not QNetwork(4, batch_norm=False, batch_renorm=True).batch_renorm
