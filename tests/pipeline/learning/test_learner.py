"""Tests for pipeline.learning.learner (and the update functions and compiled step it
runs): Double-DQN loss, masking, target sync with precise BN, warmup restore, metrics and
published weights (the compiled step and AMP: test_learner_compile.py)."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from torch import nn

from pipeline.learning.learner import Learner
from pipeline.learning.learner_device import batch_to_device
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.replay import Batch
from pipeline.learning.update import targets

NUM_ACTIONS = 4


def make_batch(size: int = 8, seed: int = 0, valid: int | None = None) -> Batch:
    gen = torch.Generator().manual_seed(seed)
    shape = (size, 4, 84, 84)
    weight = torch.ones(size)
    if valid is not None:
        weight[valid:] = 0.0
    return Batch(
        obs=torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        action=torch.randint(0, NUM_ACTIONS, (size,), generator=gen),
        ret=torch.randn(size, generator=gen),
        next_obs=torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        # Mix of bootstrapped (gamma**k) and terminal (0) transitions.
        discount=torch.where(torch.arange(size) % 3 == 0, 0.0, 0.99**3),
        weight=weight,
    )


def make_learner(**overrides: object) -> Learner:
    # The Q-value learner (Double DQN and the Huber loss) publishing its online weights:
    # the hand computations below are of it; QR-DQN and the acting copy have tests of their own.
    settings = LearnerSettings(
        compile=False, amp=False, learning_rate=1e-3, quantiles=0, acting_tau=0.0, bn_calibration_states=256
    )
    torch.manual_seed(0)
    return Learner(NUM_ACTIONS, replace(settings, **overrides))


def loss_of(learner: Learner, batch: Batch) -> torch.Tensor:
    """The full-batch masked Huber loss an update minimises, with its autograd graph, from
    the functions the learner's step runs (compiled once it compiled). Like an update, the
    train-mode forward advances the online net's BatchNorm running statistics."""
    obs, action, ret, next_obs, discount, weight = batch_to_device(batch, learner.device)
    target = targets(learner.online, learner.step.targets, next_obs, ret, discount)
    loss, _ = learner.step.loss(obs, action, target, weight)
    return loss


def state_equal(a: dict, b: dict) -> bool:
    """Deep equality for nested state dicts holding tensors."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(state_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(state_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


def snapshot(learner: Learner) -> dict:
    return copy.deepcopy(learner.state_dict())


def huber(x: torch.Tensor) -> torch.Tensor:
    """Huber with delta 1, written out independently of F.smooth_l1_loss."""
    return torch.where(x.abs() < 1.0, 0.5 * x * x, x.abs() - 0.5)


def reference_loss(online: nn.Module, target: nn.Module, batch: Batch) -> torch.Tensor:
    """Masked Double-DQN Huber loss computed by hand on copies of the networks."""
    y, q = reference_target_and_q(online, target, batch)
    w = batch.weight
    return (w * huber(y - q)).sum() / torch.clamp(w.sum(), min=1.0)


def reference_target_and_q(online: nn.Module, target: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Double-DQN targets and Q(s, a) (train-mode forward) computed by hand."""
    online.eval()
    with torch.no_grad():
        next_online = online(batch.next_obs)
        next_target = target.eval()(batch.next_obs)
        best = next_online.argmax(dim=1)
        bootstrap = next_target[torch.arange(len(best)), best]
        y = batch.ret + batch.discount * bootstrap
    online.train()
    q = online(batch.obs)[torch.arange(len(batch.action)), batch.action]
    return y, q


def perturb(module: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))


# ---------------------------------------------------------------------------- loss


def test_double_dqn_loss_matches_hand_computation() -> None:
    learner = make_learner()
    # Make the target differ from the online net so Double DQN != using either alone.
    perturb(learner.target, seed=1)
    batch = make_batch(size=6, valid=5)
    online_copy, target_copy = copy.deepcopy(learner.online), copy.deepcopy(learner.target)

    expected = reference_loss(online_copy, target_copy, batch)
    got = loss_of(learner, batch)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)

    # Sanity: the vanilla-DQN target (max over the target net) gives another value, so
    # the check above really distinguishes the Double-DQN action selection.
    with torch.no_grad():
        vanilla_y = batch.ret + batch.discount * target_copy(batch.next_obs).max(dim=1).values
    q = online_copy.train()(batch.obs)[torch.arange(6), batch.action]
    vanilla = (batch.weight * huber(vanilla_y - q)).sum() / batch.weight.sum()
    assert not torch.allclose(vanilla, expected)


def test_td_and_q_metrics_are_means_over_the_valid_samples_before_the_step() -> None:
    """What the monitor shows as td_abs and q_mean: |target - Q(s, a)| and Q(s, a) of the
    valid samples, as they were before the update's step."""
    learner = make_learner()
    perturb(learner.target, seed=2)
    batch = make_batch(size=8, valid=6)
    online_copy, target_copy = copy.deepcopy(learner.online), copy.deepcopy(learner.target)
    y, q = reference_target_and_q(online_copy, target_copy, batch)
    assert learner.update(batch) is None
    metrics = learner.pop_metrics()
    assert metrics["td_abs"] == pytest.approx((y - q)[:6].abs().mean().item(), rel=1e-5, abs=1e-5)
    assert metrics["q_mean"] == pytest.approx(q[:6].mean().item(), rel=1e-5, abs=1e-5)


def test_loss_decreases_when_overfitting_a_fixed_batch() -> None:
    learner = make_learner()
    batch = make_batch(size=8)
    first = loss_of(learner, batch).item()
    for _ in range(40):
        learner.update(batch)
    last = loss_of(learner, batch).item()
    assert last < 0.5 * first, (first, last)
    assert learner.updates == 40


def test_zero_weight_samples_do_not_affect_gradients() -> None:
    batch = make_batch(size=6, valid=4)
    garbage = copy.deepcopy(batch)
    # Change everything about the invalid rows except their obs (which, through
    # BatchNorm's batch statistics, legitimately influences the valid rows).
    garbage.ret[4:] = 1e4
    garbage.discount[4:] = 0.99
    garbage.action[4:] = (batch.action[4:] + 1) % NUM_ACTIONS
    garbage.next_obs[4:] = 255 - batch.next_obs[4:]

    grads = []
    for b in (batch, garbage):
        learner = make_learner()
        loss_of(learner, b).backward()
        grads.append([p.grad.clone() for p in learner.online.parameters()])
    for g_clean, g_garbage in zip(*grads):
        torch.testing.assert_close(g_clean, g_garbage, rtol=0, atol=0)


def test_all_invalid_batch_gives_zero_loss() -> None:
    learner = make_learner()
    batch = make_batch(size=4, valid=0)
    assert loss_of(learner, batch).item() == 0.0


# ---------------------------------------------------------------------------- target net


def test_target_sync_calibrates_then_copies_parameters_and_batchnorm_buffers() -> None:
    learner = make_learner(target_sync_updates=2, bn_calibration_states=64, calibration_chunk=32)
    states = make_batch(size=64, seed=7).obs
    batch = make_batch(size=4)
    initial_mean = learner.online.state_dict()["features.1.running_mean"].clone()
    learner.update(batch)
    online, target = learner.online.state_dict(), learner.target.state_dict()
    # Between calibrations the training forwards leave the running statistics alone.
    assert torch.equal(online["features.1.running_mean"], initial_mean)
    assert not torch.equal(online["features.0.weight"], target["features.0.weight"])  # no sync yet
    assert learner.copies_target_next
    learner.update(batch, states)  # the update that copies gets the calibration states
    online, target = learner.online.state_dict(), learner.target.state_dict()
    # The sync re-estimated the statistics on the 64 states (two chunks of 32), then copied.
    assert not torch.equal(online["features.1.running_mean"], initial_mean)
    assert int(online["features.1.num_batches_tracked"]) == 2
    assert online.keys() == target.keys()
    for key in online:
        assert torch.equal(online[key], target[key]), key
    assert learner.calibrated_at == 2
    assert not learner.target.training
    assert learner.online.training


def test_precise_bn_is_the_only_path() -> None:
    with pytest.raises(ValueError, match="bn_calibration_states"):
        make_learner(bn_calibration_states=0)
    learner = make_learner()
    assert all(layer.momentum == 0.0 for layer in learner.online.modules() if isinstance(layer, nn.BatchNorm2d))


# ---------------------------------------------------------------------------- warmup


def test_warmup_restores_state_exactly() -> None:
    learner = make_learner()
    learner.update(make_batch(size=4))  # non-trivial optimizer state to restore
    assert learner.pop_metrics()["updates"] == 1.0
    learner.update(make_batch(size=4, seed=3))  # one pending metrics entry
    before = snapshot(learner)
    rng_before = torch.get_rng_state()

    seconds = learner.warmup(batch_size=4)

    assert seconds > 0
    assert state_equal(snapshot(learner), before)
    assert torch.equal(torch.get_rng_state(), rng_before)
    # The real update's metrics survive; warmup's random updates are not counted.
    assert learner.pop_metrics()["updates"] == 1.0


# Inductor itself triggers torch.jit deprecation warnings while compiling; not ours.


# ---------------------------------------------------------------------------- metrics & I/O


def test_pop_metrics_returns_finite_floats_then_resets() -> None:
    learner = make_learner()
    assert learner.pop_metrics() == {}
    batch = make_batch(size=6, valid=4)
    for _ in range(3):
        learner.update(batch)
    metrics = learner.pop_metrics()
    assert set(metrics) >= {"loss", "td_abs", "q_mean", "grad_norm", "updates"}
    assert all(isinstance(v, float) for v in metrics.values())
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert metrics["updates"] == 3.0 and metrics["loss"] > 0 and metrics["td_abs"] > 0
    assert learner.pop_metrics() == {}


def test_publishable_state_equals_online_state_dict() -> None:
    learner = make_learner()
    learner.update(make_batch(size=4))
    published = learner.publishable_state()
    online = learner.online.state_dict()
    assert published.keys() == online.keys()
    assert "features.1.running_var" in published and "features.1.num_batches_tracked" in published
    for key, value in published.items():
        assert value.device.type == "cpu" and value.dtype == torch.float32, key
        assert torch.equal(value, online[key].float()), key
        # A copy, not a view of the live weights.
        assert value.data_ptr() != online[key].data_ptr()


def test_state_dict_round_trip_resumes_identically() -> None:
    batch = make_batch(size=4)
    a = make_learner()
    a.update(batch)
    b = make_learner(learning_rate=1e-3)
    perturb(b.online, seed=9)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.updates == 1
    a.update(batch)
    b.update(batch)
    assert state_equal(a.state_dict()["online"], b.state_dict()["online"])


# ---------------------------------------------------------------------------- the update's math


def scaled_frames_trunk(net: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The trunk as it was before the frames' scaling moved into the first convolution's
    weights: the frames divided by 255, then every layer."""
    x = obs.float() / 255.0
    if net.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return net.features(x)


def with_scaled_frames(learner: Learner) -> Learner:
    """``learner`` with every network it runs (online, target, acting copy) computing its
    trunk the old way; ``frames`` leaves the uint8 frames as they are for it."""
    nets = [learner.online, learner.target] + ([learner.acting.net] if learner.acting else [])
    for net in nets:
        net.trunk = scaled_frames_trunk.__get__(net)
        net.frames = lambda obs: obs
    return learner


@pytest.mark.parametrize("amp", [False, True], ids=["fp32", "bf16"])
def test_updates_equal_the_updates_with_the_frames_scaled_first(amp: bool) -> None:
    """Five QR-DQN updates with an acting copy and a calibration (the default learner) give
    the weights, statistics and acting copy of the same updates computed with the frames
    divided by 255 before the first convolution, within float rounding (bf16: within its
    rounding, which the folded scale makes no coarser)."""
    settings = dict(quantiles=8, acting_tau=0.005, amp=amp, learning_rate=1e-4)
    new, old = make_learner(**settings), with_scaled_frames(make_learner(**settings))
    old.load_state_dict(copy.deepcopy(new.state_dict()))
    calibration = make_batch(size=64, seed=9).obs
    for seed in range(5):
        batch = make_batch(size=16, seed=seed)
        new.update(batch)
        old.update(batch)
    new.calibrate(calibration)
    old.calibrate(calibration)
    tolerance = dict(rtol=2e-2, atol=2e-3) if amp else dict(rtol=1e-4, atol=1e-5)
    for part in ("online", "target", "acting"):
        for name, value in new.state_dict()[part].items():
            torch.testing.assert_close(value, old.state_dict()[part][name], **tolerance, msg=f"{part}.{name}")
    batch = make_batch(size=16, seed=7)
    q_new, q_old = new.published_net(batch.obs), old.published_net(batch.obs)
    torch.testing.assert_close(q_new, q_old, **(dict(rtol=0.0, atol=1e-3) if amp else dict(rtol=1e-4, atol=1e-5)))
