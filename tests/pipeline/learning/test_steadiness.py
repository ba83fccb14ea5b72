"""Tests for pipeline.learning.steadiness: every figure against a hand computation on a
small BatchNorm network."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch
from torch import nn

from pipeline.common.gauges import STEADINESS_FIGURES, STEADINESS_GAUGES
from pipeline.learning.steadiness import SteadinessFigures, SteadinessProbe

FEATURES, ACTIONS, CHUNK = 3, 4, 4


def small_net(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(FEATURES, 5, bias=False), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, ACTIONS))
    with torch.no_grad():  # running statistics far from any batch's: the two modes differ
        net[1].running_mean.copy_(torch.linspace(-0.5, 0.5, 5))
        net[1].running_var.copy_(torch.linspace(0.5, 2.0, 5))
        net[1].weight.copy_(torch.linspace(0.5, 1.5, 5))
        net[1].bias.copy_(torch.linspace(-0.2, 0.2, 5))
    return net


def by_hand(net: nn.Sequential, x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """The network's output with BatchNorm normalising by ``mean`` and ``var``."""
    linear, bn, _, head = net
    h = linear(x)
    h = (h - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias
    return head(torch.relu(h))


def hand_figures(net: nn.Sequential, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q_eval, Q_train) by hand: running statistics, and each chunk's biased statistics."""
    bn = net[1]
    with torch.no_grad():
        q_eval = by_hand(net, x, bn.running_mean, bn.running_var)
        parts = []
        for chunk in x.split(CHUNK):
            h = net[0](chunk)
            parts.append(by_hand(net, chunk, h.mean(0), h.var(0, unbiased=False)))
    return q_eval, torch.cat(parts)


def hand_train_q_in_order(net: nn.Sequential, x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Train-mode Q by hand with the states chunked in ``order``, row i for state i."""
    q = torch.empty(len(x), ACTIONS)
    with torch.no_grad():
        for indices in order.split(CHUNK):
            h = net[0](x[indices])
            q[indices] = by_hand(net, x[indices], h.mean(0), h.var(0, unbiased=False))
    return q


def test_each_figure_matches_a_hand_computation() -> None:
    net = small_net()
    x = torch.randn(12, FEATURES, generator=torch.Generator().manual_seed(3)) * 2 + 0.5
    probe = SteadinessProbe(x, CHUNK)
    q_eval, q_train = hand_figures(net, x)
    before = {k: v.clone() for k, v in net.state_dict().items()}

    figures = probe.measure(net)

    agreement = float((q_eval.argmax(1) == q_train.argmax(1)).float().mean())
    assert 0 < agreement < 1  # the case is not trivial
    assert figures.agreement == pytest.approx(agreement)
    assert figures.q_offset == pytest.approx(float((q_eval - q_train).abs().mean()), rel=1e-5)
    top = torch.sort(q_eval, dim=1, descending=True).values
    gaps = sorted((top[:, 0] - top[:, 1]).tolist())
    assert figures.action_gap == pytest.approx(gaps[(len(gaps) - 1) // 2], rel=1e-5)  # the lower median
    assert math.isnan(figures.churn)  # nothing remembered yet
    for key, value in net.state_dict().items():  # the train-mode forward left no trace
        assert torch.equal(value, before[key]), key
    assert net.training  # the mode is put back

    # Churn: against the network the probe last saw (measured or remembered).
    other = small_net(seed=1)
    q_other, _ = hand_figures(other, x)
    churn = float((q_other.argmax(1) != q_eval.argmax(1)).float().mean())
    assert 0 < churn < 1
    assert probe.measure(other).churn == pytest.approx(churn)
    probe.remember(net)
    assert probe.measure(other).churn == pytest.approx(churn)
    assert probe.measure(other).churn == 0.0


def test_further_batchings_match_a_hand_computation() -> None:
    net = small_net()
    x = torch.randn(16, FEATURES, generator=torch.Generator().manual_seed(5)) * 2 + 0.5
    probe = SteadinessProbe(x, CHUNK, batchings=3, seed=11)
    assert probe.batchings == 3
    assert torch.equal(probe.orders[0], torch.arange(16))
    for order in probe.orders[1:]:  # permutations of the states, each another batching
        assert sorted(order.tolist()) == list(range(16))
        assert not torch.equal(order, probe.orders[0])
    q_eval, _ = hand_figures(net, x)
    q_trains = [hand_train_q_in_order(net, x, order) for order in probe.orders]
    for batching, q_train in enumerate(q_trains):
        assert torch.allclose(probe.train_q(net, batching), q_train, atol=1e-5)

    figures = probe.measure(net)

    greedy_eval = q_eval.argmax(1)
    mean_greedy = torch.stack(q_trains).mean(0).argmax(1)
    assert figures.agreement == pytest.approx(float((greedy_eval == q_trains[0].argmax(1)).float().mean()))
    assert figures.expected_agreement == pytest.approx(float((greedy_eval == mean_greedy).float().mean()))
    train_agreement = float((q_trains[0].argmax(1) == q_trains[1].argmax(1)).float().mean())
    assert 0 < train_agreement < 1  # batch noise flips some states' greedy action
    assert figures.train_agreement == pytest.approx(train_agreement)
    # The same seed gives the same batchings; one batching measures neither new figure.
    assert all(torch.equal(a, b) for a, b in zip(SteadinessProbe(x, CHUNK, batchings=3, seed=11).orders, probe.orders))
    single = SteadinessProbe(x, CHUNK).measure(net)
    assert math.isnan(single.expected_agreement) and math.isnan(single.train_agreement)
    assert single.agreement == figures.agreement


def test_a_network_without_batchnorm_agrees_with_itself() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(FEATURES, 6), nn.ReLU(), nn.Linear(6, ACTIONS))
    x = torch.randn(10, FEATURES)
    figures = SteadinessProbe(x, CHUNK, batchings=2).measure(net)
    assert figures.agreement == figures.expected_agreement == figures.train_agreement == 1.0
    # Eval and train mode run the same layers, but over chunks of other sizes: the BLAS
    # kernel a batch size picks may round differently (6e-9 on an AVX-512 Xeon).
    assert figures.q_offset == pytest.approx(0.0, abs=1e-6)
    assert figures.action_gap > 0


def test_gauges_and_bad_arguments() -> None:
    gauges = SteadinessFigures().gauges()
    assert tuple(gauges) == (
        "steady_agreement",
        "steady_churn",
        "steady_q_offset",
        "steady_action_gap",
        "steady_expected_agreement",
        "steady_train_agreement",
    )
    # Every figure the probe measures is a named one, and every named one is measured.
    assert {f.name for f in fields(SteadinessFigures)} == set(STEADINESS_FIGURES)
    assert set(gauges) == set(STEADINESS_GAUGES)
    assert all(math.isnan(v) for v in gauges.values())
    with pytest.raises(ValueError, match="at least 2 states"):
        SteadinessProbe(torch.zeros(1, FEATURES), CHUNK)
    with pytest.raises(ValueError, match="chunk"):
        SteadinessProbe(torch.zeros(4, FEATURES), 0)
    with pytest.raises(ValueError, match="batchings"):
        SteadinessProbe(torch.zeros(4, FEATURES), CHUNK, batchings=0)
