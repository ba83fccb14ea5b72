"""Tests for pipeline.learning.batchnorm_stats and the learner's precise BN: the statistics
against a hand computation, eval mode against train mode on the same distribution, and
the statistics through a target copy and a publish."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from models import build_qnetwork
from pipeline.learning.batchnorm_stats import freeze_running_statistics, preserved_statistics, recalibrate
from pipeline.learning.flat_state import StateLoader, flatten_state
from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.replay import Batch

NUM_ACTIONS = 4


def small_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, bias=False),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.Conv2d(3, 2, 3, bias=False),
        nn.BatchNorm2d(2),
        nn.Flatten(),
        nn.Linear(2 * 4 * 4, 2),
    )


def test_recalibrate_averages_each_chunks_mean_and_unbiased_variance() -> None:
    net = small_net()
    gen = torch.Generator().manual_seed(1)
    chunks = [torch.randn(5, 1, 8, 8, generator=gen) * (1 + i) + i for i in range(3)]
    conv1, bn1, _, conv2, bn2 = (net[i] for i in range(5))
    expect1_mean, expect1_var, expect2_mean, expect2_var = [], [], [], []
    with torch.no_grad():
        for x in chunks:
            a = conv1(x)  # [N, C, H, W]: statistics over N, H, W
            per_channel = a.transpose(0, 1).reshape(3, -1)
            expect1_mean.append(per_channel.mean(1))
            expect1_var.append(per_channel.var(1, unbiased=True))
            # The second layer sees the first normalised by the chunk's own (biased) variance.
            normed = (a - per_channel.mean(1)[None, :, None, None]) / torch.sqrt(
                per_channel.var(1, unbiased=False)[None, :, None, None] + bn1.eps
            )
            b = conv2(torch.relu(normed * bn1.weight[None, :, None, None] + bn1.bias[None, :, None, None]))
            per_channel2 = b.transpose(0, 1).reshape(2, -1)
            expect2_mean.append(per_channel2.mean(1))
            expect2_var.append(per_channel2.var(1, unbiased=True))
    net.eval()
    seen = recalibrate(net, iter(chunks))
    assert seen == 15
    assert not net.training  # the mode is restored
    assert bn1.momentum == 0.1 and bn2.momentum == 0.1  # and the momenta
    torch.testing.assert_close(bn1.running_mean, torch.stack(expect1_mean).mean(0))
    torch.testing.assert_close(bn1.running_var, torch.stack(expect1_var).mean(0))
    torch.testing.assert_close(bn2.running_mean, torch.stack(expect2_mean).mean(0))
    torch.testing.assert_close(bn2.running_var, torch.stack(expect2_var).mean(0))


def test_recalibrate_without_states_leaves_the_statistics() -> None:
    net = small_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    assert recalibrate(net, iter(())) == 0
    for key, value in net.state_dict().items():
        assert torch.equal(value, before[key]), key


def test_frozen_statistics_and_preserved_statistics_leave_running_statistics_alone() -> None:
    net = small_net().train()
    x = torch.randn(6, 1, 8, 8)
    with preserved_statistics(net):
        before = {k: v.clone() for k, v in net.state_dict().items()}
        net(x + 3.0)
        assert not torch.equal(net[1].running_mean, before["1.running_mean"])  # it did move inside
    for key, value in net.state_dict().items():
        assert torch.equal(value, before[key]), key
    freeze_running_statistics(net)
    net(x + 3.0)
    assert torch.equal(net[1].running_mean, before["1.running_mean"])
    assert torch.equal(net[4].running_var, before["4.running_var"])


def states_like_replay(count: int, seed: int) -> torch.Tensor:
    """uint8 frame stacks from one fixed distribution: a shared scene, a per-state
    brightness and a moving bright block (so BatchNorm's statistics have real structure)."""
    gen = torch.Generator().manual_seed(seed)
    scene = torch.linspace(30, 120, 84).expand(84, 84)
    brightness = torch.rand(count, 1, 1, 1, generator=gen) * 60
    noise = torch.rand(count, 4, 84, 84, generator=gen) * 40
    frames = scene + brightness + noise
    cols = torch.randint(0, 70, (count,), generator=gen)
    for i, col in enumerate(cols.tolist()):  # test data only
        frames[i, :, 40:56, col : col + 14] = 250
    return frames.clamp(0, 255).to(torch.uint8)


def batch_of(obs: torch.Tensor, seed: int, num_actions: int = NUM_ACTIONS) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    size = obs.shape[0]
    return Batch(
        obs=obs,
        action=torch.randint(0, num_actions, (size,), generator=gen),
        ret=torch.rand(size, generator=gen),
        next_obs=states_like_replay(size, seed + 1000),
        discount=torch.full((size,), 0.99**3),
        weight=torch.ones(size),
    )


def make_learner(calibration_states: int) -> Learner:
    settings = LearnerSettings(compile=False, amp=False, learning_rate=1e-3, target_sync_updates=4)
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, replace(settings, bn_calibration_states=calibration_states, calibration_chunk=32))
    draws = iter(range(10_000, 20_000))
    learner.calibration_source = lambda count: states_like_replay(count, next(draws))
    return learner


def mean_offset(learner: Learner, obs: torch.Tensor) -> float:
    """Mean |Q_eval - Q_train| on ``obs`` in batches of 32 (the training batch size)."""
    with torch.no_grad(), preserved_statistics(learner.online):
        q_train = torch.cat([learner.online.train()(chunk) for chunk in obs.split(32)])
    q_eval = learner.q_values(obs)
    return float((q_eval - q_train).abs().mean())


# The tolerance the calibrated eval-mode forward keeps to the train-mode one on fresh states
# of the calibration's distribution, as a share of the Q-values' spread: 512 calibration
# states leave an estimation error of a few percent of each channel's spread.
TOLERANCE_OF_SPREAD = 0.05


def test_calibrated_eval_mode_matches_train_mode_and_survives_a_target_copy_and_a_publish() -> None:
    learner = make_learner(512)
    for step in range(3):  # updates move the weights away from the initial statistics
        learner.update(batch_of(states_like_replay(32, step), step))
    stats_before = learner.online.features[1].running_mean.clone()
    fresh = states_like_replay(256, 99)
    uncalibrated = mean_offset(learner, fresh)
    assert learner.calibrate()
    assert not learner.calibrate()  # once per update count
    calibrated = mean_offset(learner, fresh)
    spread = float(learner.q_values(fresh).std())
    assert calibrated < TOLERANCE_OF_SPREAD * spread, (calibrated, spread)
    assert calibrated < uncalibrated / 5, (calibrated, uncalibrated)
    assert not torch.equal(learner.online.features[1].running_mean, stats_before)

    # Frozen between calibrations: an update leaves the statistics where they are.
    calibrated_stats = {k: v.clone() for k, v in learner.online.state_dict().items() if "running" in k}
    learner.update(batch_of(states_like_replay(32, 7), 7))  # update 4: the target copy, after a calibration
    assert learner.calibrated_at == learner.updates == 4
    for key, value in learner.target.state_dict().items():
        assert torch.equal(value, learner.online.state_dict()[key]), key
    assert not torch.equal(learner.target.features[1].running_mean, calibrated_stats["features.1.running_mean"])
    learner.update(batch_of(states_like_replay(32, 8), 8))
    for key, value in learner.online.state_dict().items():
        if "running" in key:
            assert torch.equal(value, learner.target.state_dict()[key]), key

    # A publish carries them to the acting copy: its eval-mode Q-values are the learner's.
    learner.calibrate()
    acting = build_qnetwork(NUM_ACTIONS)
    StateLoader(acting).load(flatten_state(learner.publishable_state()))
    with torch.no_grad():
        torch.testing.assert_close(acting(fresh), learner.q_values(fresh), rtol=1e-4, atol=1e-4)
    assert mean_offset(learner, fresh) < TOLERANCE_OF_SPREAD * spread
