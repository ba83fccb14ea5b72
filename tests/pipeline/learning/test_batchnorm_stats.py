"""Tests for pipeline.learning.batchnorm_stats and the learner's precise BN: the statistics
against a hand computation (the module's and the learner's on the states handed to it),
eval mode against train mode on the same distribution, and the statistics through a
target copy and a publish."""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from torch import nn

from models import QNetwork, build_qnetwork
from pipeline.learning.batchnorm_stats import (
    batch_norm_layers,
    freeze_running_statistics,
    preserved_statistics,
    recalibrate,
)
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
    seen = recalibrate([net], iter(chunks))
    assert seen == 15
    assert not net.training  # the mode is restored
    assert bn1.momentum == 0.1 and bn2.momentum == 0.1  # and the momenta
    torch.testing.assert_close(bn1.running_mean, torch.stack(expect1_mean).mean(0))
    torch.testing.assert_close(bn1.running_var, torch.stack(expect1_var).mean(0))
    torch.testing.assert_close(bn2.running_mean, torch.stack(expect2_mean).mean(0))
    torch.testing.assert_close(bn2.running_var, torch.stack(expect2_var).mean(0))


def test_networks_recalibrated_together_get_the_statistics_each_gets_alone() -> None:
    """The learner re-estimates its online net and its acting copy over the same chunks in
    one pass, each chunk converted once (QNetwork.frames): each network's statistics are
    those a pass of its own gives: bit for bit in the same layout, within rounding in the
    other (its convolutions then read the first network's layout)."""
    from models import QNetwork

    torch.manual_seed(0)
    first, second = QNetwork(5, channels_last=True), QNetwork(5, channels_last=True)
    other_layout = QNetwork(5)
    other_layout.load_state_dict(second.state_dict())
    alone = [copy.deepcopy(net) for net in (first, second, other_layout)]
    states = torch.randint(0, 256, (96, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    assert recalibrate([first, second, other_layout], states.split(32)) == 96
    for net in alone:
        assert recalibrate([net], states.split(32)) == 96
    for together, by_itself in zip((first, second), alone):
        for name, value in together.state_dict().items():
            if "running" in name:
                assert torch.equal(value, by_itself.state_dict()[name]), name
    for name, value in other_layout.state_dict().items():
        torch.testing.assert_close(value, alone[2].state_dict()[name], msg=name)
    # Different weights, different statistics: the pass did run each network on its own weights.
    assert not torch.equal(first.features[1].running_mean, second.features[1].running_mean)


def test_recalibrate_without_states_leaves_the_statistics() -> None:
    net = small_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    assert recalibrate([net], iter(())) == 0
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


class Draws:
    """Calibration states from one fixed distribution, a fresh draw each call: what the
    trainer hands the learner (uniform replay states)."""

    def __init__(self, first_seed: int) -> None:
        self.seeds = iter(range(first_seed, first_seed + 10_000))

    def __call__(self, learner: Learner) -> torch.Tensor:
        return states_like_replay(learner.calibration_count, next(self.seeds))


def make_learner(calibration_states: int) -> Learner:
    settings = LearnerSettings(
        compile=False, amp=False, learning_rate=1e-3, target_sync_updates=4, quantiles=0, acting_tau=0.0
    )
    torch.manual_seed(0)
    return Learner(NUM_ACTIONS, replace(settings, bn_calibration_states=calibration_states, calibration_chunk=32))


def eval_q(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """Eval-mode float32 Q-values of ``net`` (left in the mode it was in)."""
    was_training = net.training
    try:
        with torch.no_grad():
            return net.eval()(obs).float()
    finally:
        net.train(was_training)


def mean_offset(learner: Learner, obs: torch.Tensor) -> float:
    """Mean |Q_eval - Q_train| on ``obs`` in batches of 32 (the training batch size)."""
    with torch.no_grad(), preserved_statistics(learner.online):
        q_train = torch.cat([learner.online.train()(chunk) for chunk in obs.split(32)])
    q_eval = eval_q(learner.online, obs)
    return float((q_eval - q_train).abs().mean())


def test_calibrate_sets_the_statistics_to_those_of_the_handed_states_activations() -> None:
    """By hand: the first BatchNorm layer's running mean and variance become the averages
    over the chunks of the first conv's per-channel batch mean and unbiased variance on
    the handed states; the acting copy's, those of its own weights' activations."""
    settings = LearnerSettings(compile=False, amp=False, bn_calibration_states=64, calibration_chunk=32)
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, replace(settings, acting_tau=0.5))
    assert learner.acting is not None
    learner.update(batch_of(states_like_replay(32, 1), 1))  # the acting copy's weights differ now
    obs = states_like_replay(64, 5)
    assert learner.calibrate(obs)
    assert learner.calibrated_at == learner.updates == 1
    for net in (learner.online, learner.acting.net):
        with torch.no_grad():
            activations = [net.features[0](chunk.float() / 255.0) for chunk in obs.split(32)]
        mean = torch.stack([a.mean(dim=(0, 2, 3)) for a in activations]).mean(0)
        var = torch.stack([a.var(dim=(0, 2, 3), unbiased=True) for a in activations]).mean(0)
        torch.testing.assert_close(net.features[1].running_mean, mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(net.features[1].running_var, var, rtol=1e-4, atol=1e-5)
        assert net.features[1].momentum == 0.0  # frozen again after the calibration
    assert not torch.equal(learner.acting.net.features[1].running_mean, learner.online.features[1].running_mean)


def test_statistics_for_saving_calibrate_both_networks_inside_and_put_training_s_back() -> None:
    """Inside, the online net and the acting copy hold exactly what ``calibrate`` on the
    same states gives (a second learner, by hand), at this update; on the way out every
    running statistic and ``calibrated_at`` are the live ones again, bit for bit, and the
    weights were never touched."""
    settings = LearnerSettings(compile=False, amp=False, bn_calibration_states=64, calibration_chunk=32)
    learners = []
    for _ in range(2):
        torch.manual_seed(0)
        learner = Learner(NUM_ACTIONS, replace(settings, acting_tau=0.5))
        learner.update(batch_of(states_like_replay(32, 1), 1))
        assert learner.calibrate(states_like_replay(64, 2))  # training's statistics
        learners.append(learner)
    saving, by_hand = learners

    def nets(learner: Learner) -> tuple[torch.nn.Module, torch.nn.Module]:
        assert learner.acting is not None
        return learner.online, learner.acting.net

    live = [{k: v.clone() for k, v in net.state_dict().items()} for net in nets(saving)]
    many = states_like_replay(256, 3)
    assert by_hand.calibrate(many)
    with saving.statistics_for_saving(many):
        assert saving.calibrated_at == saving.updates
        for net, expected in zip(nets(saving), nets(by_hand)):
            for key, value in expected.state_dict().items():
                assert torch.equal(net.state_dict()[key], value), key
        saving.calibrated_at = -5  # whatever happens inside, the live record comes back
    assert saving.calibrated_at == saving.updates == 1
    for net, before in zip(nets(saving), live):
        for key, value in net.state_dict().items():
            assert torch.equal(value, before[key]), key
    assert not torch.equal(live[0]["features.1.running_mean"], by_hand.online.features[1].running_mean)


# The tolerance the calibrated eval-mode forward keeps to the train-mode one on fresh states
# of the calibration's distribution, as a share of the Q-values' spread: 512 calibration
# states leave an estimation error of a few percent of each channel's spread.
TOLERANCE_OF_SPREAD = 0.05


def test_calibrated_eval_mode_matches_train_mode_and_survives_a_target_copy_and_a_publish() -> None:
    learner, draws = make_learner(512), Draws(10_000)
    for step in range(3):  # updates move the weights away from the initial statistics
        assert not learner.copies_target_next
        learner.update(batch_of(states_like_replay(32, step), step))
    stats_before = learner.online.features[1].running_mean.clone()
    fresh = states_like_replay(256, 99)
    uncalibrated = mean_offset(learner, fresh)
    assert learner.calibrate(draws(learner))
    calibrated = mean_offset(learner, fresh)
    spread = float(eval_q(learner.online, fresh).std())
    assert calibrated < TOLERANCE_OF_SPREAD * spread, (calibrated, spread)
    assert calibrated < uncalibrated / 5, (calibrated, uncalibrated)
    assert not torch.equal(learner.online.features[1].running_mean, stats_before)

    # Frozen between calibrations: an update leaves the statistics where they are.
    calibrated_stats = {k: v.clone() for k, v in learner.online.state_dict().items() if "running" in k}
    assert learner.copies_target_next
    # Update 4: the target copy, after a calibration on the states handed to it.
    learner.update(batch_of(states_like_replay(32, 7), 7), draws(learner))
    assert learner.calibrated_at == learner.updates == 4
    for key, value in learner.target.state_dict().items():
        assert torch.equal(value, learner.online.state_dict()[key]), key
    assert not torch.equal(learner.target.features[1].running_mean, calibrated_stats["features.1.running_mean"])
    learner.update(batch_of(states_like_replay(32, 8), 8))
    for key, value in learner.online.state_dict().items():
        if "running" in key:
            assert torch.equal(value, learner.target.state_dict()[key]), key

    # A publish carries them to the acting copy: its eval-mode Q-values are the learner's.
    learner.calibrate(draws(learner))
    acting = build_qnetwork(NUM_ACTIONS)
    StateLoader(acting).load(flatten_state(learner.publishable_state()))
    with torch.no_grad():
        torch.testing.assert_close(acting(fresh), eval_q(learner.online, fresh), rtol=1e-4, atol=1e-4)
    assert mean_offset(learner, fresh) < TOLERANCE_OF_SPREAD * spread


def test_a_target_copy_without_states_copies_the_statistics_as_they_are() -> None:
    learner = make_learner(512)
    learner.calibrate(Draws(10_000)(learner))
    for step in range(4):  # the fourth copies the target, with no states handed to it
        learner.update(batch_of(states_like_replay(32, step), step))
    assert learner.calibrated_at == 0 and learner.updates == 4
    for key, value in learner.target.state_dict().items():
        assert torch.equal(value, learner.online.state_dict()[key]), key


def test_a_qnetwork_is_recalibrated_through_its_trunk_to_the_statistics_of_whole_forwards() -> None:
    """QNetwork.trunk runs every BatchNorm layer and nothing after the last one: the
    re-estimate through it equals the one by whole-network forwards (the old computation),
    for the training layout (channels_last) and the acting one."""
    gen = torch.Generator().manual_seed(3)
    states = torch.randint(0, 256, (96, 4, 84, 84), dtype=torch.uint8, generator=gen)
    for channels_last in (True, False):
        torch.manual_seed(0)
        net = QNetwork(NUM_ACTIONS, 4, quantiles=8, channels_last=channels_last)
        whole = QNetwork(NUM_ACTIONS, 4, quantiles=8, channels_last=channels_last)
        whole.load_state_dict(net.state_dict())
        layers = batch_norm_layers(whole)
        with torch.no_grad():  # the old way: momentum None, train-mode forwards of the whole net
            for layer in layers:
                layer.reset_running_stats()
                layer.momentum = None
            whole.train()
            for chunk in states.split(32):
                whole(chunk)
        assert recalibrate([net], states.split(32)) == 96
        for got, expected in zip(batch_norm_layers(net), layers):
            torch.testing.assert_close(got.running_mean, expected.running_mean, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(got.running_var, expected.running_var, rtol=1e-5, atol=1e-6)
            assert int(got.num_batches_tracked) == int(expected.num_batches_tracked) == 3
