"""Tests for pipeline.learning.update and the learner that runs it (``quantiles`` > 0):
the quantile Huber loss by hand and by what it converges to, the Double-DQN quantile
targets, QR-DQN updates on the real Q-network (compiled: test_learner_compile.py),
the clipped step and the acting copy's average."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from torch import nn

from models import QNetwork
from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.update import (
    GRAD_CLIP,
    follow,
    optimizer_step,
    quantile_huber_loss,
    quantile_midpoints,
    quantile_targets,
)
from tests.pipeline.learning.test_learner import NUM_ACTIONS, loss_of, make_batch, perturb

QUANTILES = 8


class FreeQuantiles(nn.Module):
    """Quantiles that are free parameters, the same for every state: ``[A, N]``."""

    def __init__(self, actions: int, quantiles: int) -> None:
        super().__init__()
        self.theta = nn.Parameter(torch.zeros(actions, quantiles))

    def frames(self, obs: torch.Tensor) -> torch.Tensor:
        return obs

    def quantile_values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.theta.unsqueeze(0).expand(obs.shape[0], -1, -1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.quantile_values(obs).mean(dim=2)


def make_qr_learner(**overrides: object) -> Learner:
    settings = LearnerSettings(compile=False, amp=False, learning_rate=1e-3, quantiles=QUANTILES)
    torch.manual_seed(0)
    return Learner(NUM_ACTIONS, replace(settings, **overrides))


def test_midpoints_are_the_centres_of_n_equal_slices() -> None:
    torch.testing.assert_close(quantile_midpoints(4), torch.tensor([0.125, 0.375, 0.625, 0.875]))


def test_loss_matches_hand_computation() -> None:
    """Two quantiles at 0 against the target samples 1 and -1: each pair costs
    |tau - 1{u < 0}| * huber(u) with huber(+-1) = 0.5, so quantile 0.25 pays 0.25 * 0.5
    toward +1 and 0.75 * 0.5 toward -1, quantile 0.75 the mirror: 0.25 each, 0.5 in all."""
    net = FreeQuantiles(actions=2, quantiles=2)
    obs = torch.zeros(1, 4, 84, 84, dtype=torch.uint8)
    target = torch.tensor([[1.0, -1.0]])
    loss, stats = quantile_huber_loss(net, obs, torch.tensor([1]), target, torch.ones(1))
    torch.testing.assert_close(loss, torch.tensor(0.5))
    # The statistics read as Q-values: the taken action's mean quantile (0) and the gap
    # to the targets' mean (0).
    torch.testing.assert_close(stats, torch.tensor([0.5, 0.0, 0.0, 1.0]))


def test_minimising_the_loss_finds_the_quantiles_of_the_targets() -> None:
    """Trained on samples of a skewed two-headed return (0 with probability 0.75, else 10:
    a jump missed or made), the N quantiles settle on the distribution's quantiles at
    their midpoints, which the mean alone could not tell apart from a sure 2.5."""
    quantiles = 4
    net = FreeQuantiles(actions=1, quantiles=quantiles)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(0)
    obs = torch.zeros(64, 4, 84, 84, dtype=torch.uint8)
    action = torch.zeros(64, dtype=torch.long)
    for _ in range(600):
        samples = 10.0 * (torch.rand(64, 16, generator=gen) < 0.25).float()
        loss, _ = quantile_huber_loss(net, obs, action, samples, torch.ones(64))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # Midpoints 0.125, 0.375, 0.625 lie in the mass at 0; 0.875 in the mass at 10.
    torch.testing.assert_close(net.theta.detach()[0], torch.tensor([0.0, 0.0, 0.0, 10.0]), atol=0.6, rtol=0)


def test_zero_weight_samples_add_nothing_to_the_loss() -> None:
    net = FreeQuantiles(actions=2, quantiles=3)
    obs = torch.zeros(2, 4, 84, 84, dtype=torch.uint8)
    target = torch.tensor([[1.0, 2.0, 3.0], [1e4, 1e4, 1e4]])
    both, _ = quantile_huber_loss(net, obs, torch.tensor([0, 1]), target, torch.tensor([1.0, 0.0]))
    first, _ = quantile_huber_loss(net, obs[:1], torch.tensor([0]), target[:1], torch.ones(1))
    torch.testing.assert_close(both, first)


def test_targets_take_the_target_nets_quantiles_at_the_online_nets_best_mean() -> None:
    torch.manual_seed(0)
    online = QNetwork(NUM_ACTIONS, quantiles=QUANTILES).eval()
    target_net = copy.deepcopy(online)
    perturb(target_net, seed=1)
    batch = make_batch(size=6)
    with torch.no_grad():
        best = online(batch.next_obs).argmax(dim=1)
        # The target net is made to prefer, everywhere, the action the online net picks
        # least often, so selecting by the target net's own means would pick other
        # actions: the check tells Double DQN's selection apart on any machine.
        rival = int(torch.bincount(best, minlength=NUM_ACTIONS).argmin())
        target_net.advantage.bias.view(NUM_ACTIONS, QUANTILES)[rival] += 100.0
        assert not torch.equal(target_net(batch.next_obs).argmax(dim=1), best)
        got = quantile_targets(online, target_net, batch.next_obs, batch.ret, batch.discount)
        chosen = target_net.quantile_values(batch.next_obs)[torch.arange(6), best]
    expected = batch.ret.unsqueeze(1) + batch.discount.unsqueeze(1) * chosen
    assert got.shape == (6, QUANTILES)
    torch.testing.assert_close(got, expected)
    terminal = batch.discount == 0
    torch.testing.assert_close(got[terminal], batch.ret[terminal].unsqueeze(1).expand(-1, QUANTILES))


def test_qr_learner_overfits_a_fixed_batch() -> None:
    learner = make_qr_learner()
    assert learner.online.quantiles == QUANTILES
    batch = make_batch(size=8)
    first = loss_of(learner, batch).item()
    for _ in range(40):
        learner.update(batch)
    last = loss_of(learner, batch).item()
    assert last < 0.5 * first, (first, last)
    metrics = learner.pop_metrics()
    assert metrics["updates"] == 40 and all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    # What the collectors play is a Q-network like any other: [B, actions].
    assert learner.published_net(batch.obs).shape == (8, NUM_ACTIONS)


# ---------------------------------------------------------------------------- the step and the average


def test_the_step_clips_the_gradient_to_its_norm_and_returns_the_norm_before() -> None:
    """A loss whose gradient is (30, 40) (norm 50): one SGD step of rate 1 moves the
    parameter by the gradient scaled to norm GRAD_CLIP, and the step returns 50."""
    weight = nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    weight.grad = torch.full((2,), 123.0)  # a stale gradient: the step must not add to it
    loss = (weight * torch.tensor([30.0, 40.0])).sum()
    norm = optimizer_step(loss, optimizer, [weight])
    assert norm.item() == 50.0
    scale = GRAD_CLIP / 50.0
    torch.testing.assert_close(weight.detach(), torch.tensor([-30.0 * scale, -40.0 * scale]))


def test_the_step_leaves_a_gradient_under_the_clip_as_it_is() -> None:
    weight = nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([weight], lr=0.5)
    norm = optimizer_step((weight * torch.tensor([3.0, 4.0])).sum(), optimizer, [weight])
    assert norm.item() == 5.0
    torch.testing.assert_close(weight.detach(), torch.tensor([-1.5, -2.0]))


def test_follow_moves_each_acting_tensor_tau_of_the_way() -> None:
    acting = [torch.tensor([0.0, 10.0]), torch.tensor([[4.0]])]
    online = [torch.tensor([1.0, 0.0]), torch.tensor([[-4.0]])]
    follow(acting, online, 0.25)
    torch.testing.assert_close(acting[0], torch.tensor([0.25, 7.5]))
    torch.testing.assert_close(acting[1], torch.tensor([[2.0]]))
    assert torch.equal(online[0], torch.tensor([1.0, 0.0]))  # the online weights stay
