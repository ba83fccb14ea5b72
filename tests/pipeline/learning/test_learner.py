"""Tests for pipeline.learning.learner (and the dqn_loss functions and compiled step it
runs): Double-DQN loss, masking, grad accumulation, target sync, warmup restore, compile
(and its fallback), AMP, metrics and published weights."""

from __future__ import annotations

import copy
import warnings
from dataclasses import replace

import pytest
import torch
from torch import nn

from pipeline.learning.dqn_loss import targets
from pipeline.learning.learner import Learner
from pipeline.learning.learner_compile import CompiledStep, CompileFallbackWarning
from pipeline.learning.learner_device import batch_to_device
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.replay import Batch

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
        # NUM_ACTIONS is "none" (an episode's first step).
        prev_action=torch.randint(0, NUM_ACTIONS + 1, (size,), generator=gen),
        next_prev_action=torch.randint(0, NUM_ACTIONS + 1, (size,), generator=gen),
    )


def make_learner(**overrides: object) -> Learner:
    settings = LearnerSettings(compile=False, amp=False, learning_rate=1e-3)
    torch.manual_seed(0)
    return Learner(NUM_ACTIONS, replace(settings, **overrides))


def loss_of(learner: Learner, batch: Batch) -> torch.Tensor:
    """The full-batch masked Huber loss an update minimises, with its autograd graph, from
    the functions the learner's step runs (compiled once it compiled). Like an update, the
    train-mode forward advances the online net's BatchNorm running statistics."""
    obs, action, ret, next_obs, discount, weight, prev, next_prev = batch_to_device(
        batch, learner.device, learner.num_actions
    )
    target = targets(learner.online, learner.step.targets, next_obs, next_prev, ret, discount, obs, prev, action)
    loss, _, _ = learner.step.loss(obs, prev, action, target, weight, weight.sum().clamp(min=1.0))
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
        next_online = online(batch.next_obs, batch.next_prev_action)
        next_target = target.eval()(batch.next_obs, batch.next_prev_action)
        best = next_online.argmax(dim=1)
        bootstrap = next_target[torch.arange(len(best)), best]
        y = batch.ret + batch.discount * bootstrap
    online.train()
    q = online(batch.obs, batch.prev_action)[torch.arange(len(batch.action)), batch.action]
    return y, q


def perturb(module: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))


# ---------------------------------------------------------------------------- loss


@pytest.mark.parametrize(("prev_action_input", "batch_norm"), [(False, True), (True, True), (False, False)])
def test_double_dqn_loss_matches_hand_computation(prev_action_input: bool, batch_norm: bool) -> None:
    learner = make_learner(prev_action_input=prev_action_input, batch_norm=batch_norm)
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
        vanilla_y = batch.ret + batch.discount * target_copy(batch.next_obs, batch.next_prev_action).max(dim=1).values
    q = online_copy.train()(batch.obs, batch.prev_action)[torch.arange(6), batch.action]
    vanilla = (batch.weight * huber(vanilla_y - q)).sum() / batch.weight.sum()
    assert not torch.allclose(vanilla, expected)


def test_advantage_learning_lowers_each_action_by_alpha_times_its_gap() -> None:
    alpha = 0.9
    learner = make_learner(advantage_learning=alpha)
    perturb(learner.target, seed=1)
    batch = make_batch(size=6, valid=5)
    online_copy, target_copy = copy.deepcopy(learner.online), copy.deepcopy(learner.target)
    with torch.no_grad():
        q_state = target_copy.eval()(batch.obs, batch.prev_action)
    best = q_state.argmax(dim=1)
    # The first sample takes the target net's best action, the others another one.
    batch.action = torch.cat((best[:1], (best[1:] + 1) % NUM_ACTIONS))
    gap = q_state.max(dim=1).values - q_state[torch.arange(6), batch.action]
    assert gap[0] == 0 and (gap[1:] > 0).all()

    y, q = reference_target_and_q(online_copy, target_copy, batch)
    expected = (batch.weight * huber(y - alpha * gap - q)).sum() / batch.weight.sum()
    torch.testing.assert_close(loss_of(learner, batch), expected, rtol=1e-5, atol=1e-6)
    # Without the term the loss differs: the check above sees the gaps.
    plain = (batch.weight * huber(y - q)).sum() / batch.weight.sum()
    assert not torch.allclose(plain, expected)


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_update_returns_each_samples_td_error(grad_accum: int) -> None:
    """The priorities a prioritized replay gets: |target - Q(s, a)| per sample, before the step."""
    learner = make_learner(grad_accum=grad_accum)
    perturb(learner.target, seed=2)
    batch = make_batch(size=8, valid=6)
    online_copy, target_copy = copy.deepcopy(learner.online), copy.deepcopy(learner.target)
    y, q = reference_target_and_q(online_copy, target_copy, batch)
    if grad_accum == 2:  # BatchNorm normalises each micro-batch with its own statistics
        halves = (slice(0, 4), slice(4, 8))
        q = torch.cat([online_copy.train()(batch.obs[h])[torch.arange(4), batch.action[h]] for h in halves])
    td = learner.update(batch)
    assert td.shape == (8,) and td.dtype == torch.float32 and not td.requires_grad
    torch.testing.assert_close(td, (y - q).detach().abs(), rtol=1e-5, atol=1e-5)


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


def test_grad_accum_matches_manual_two_micro_batch_step() -> None:
    batch = make_batch(size=8, valid=7)
    accum = make_learner(grad_accum=2)
    reference = make_learner()
    reference.load_state_dict(copy.deepcopy(accum.state_dict()))
    perturb(accum.target, seed=2)
    reference.target.load_state_dict(accum.target.state_dict())

    accum.update(batch)

    # Manual: all targets first (eval mode), then two train-mode micro-batches of 4,
    # each normalised by the full batch's weight sum, gradients summed, then one step.
    net, tgt, opt = reference.online, reference.target, reference.optimizer
    net.eval()
    with torch.no_grad():
        best = net(batch.next_obs).argmax(dim=1)
        y = batch.ret + batch.discount * tgt(batch.next_obs)[torch.arange(8), best]
    net.train()
    opt.zero_grad()
    denom = batch.weight.sum()
    for half in (slice(0, 4), slice(4, 8)):
        q = net(batch.obs[half])[torch.arange(4), batch.action[half]]
        ((batch.weight[half] * huber(y[half] - q)).sum() / denom).backward()
    nn.utils.clip_grad_norm_(net.parameters(), reference.settings.grad_clip)
    opt.step()

    for (name, p_acc), p_ref in zip(accum.online.named_parameters(), net.parameters()):
        torch.testing.assert_close(p_acc, p_ref, rtol=1e-5, atol=1e-6, msg=name)
    # BatchNorm statistics advance once per micro-batch in both.
    for (name, b_acc), b_ref in zip(accum.online.named_buffers(), net.buffers()):
        torch.testing.assert_close(b_acc, b_ref, rtol=1e-5, atol=1e-6, msg=name)


def test_grad_accum_equals_full_batch_for_duplicated_halves() -> None:
    # With identical halves, BatchNorm batch statistics of a micro-batch equal those of
    # the full batch, so accumulation must reproduce the single full-batch step.
    half = make_batch(size=4)
    batch = Batch(*(torch.cat([getattr(half, f)] * 2) for f in Batch.__dataclass_fields__))
    full, accum = make_learner(), make_learner(grad_accum=2)
    full.update(batch)
    accum.update(batch)
    # Summation order differs with the thread count (3e-6 apart on one thread, 1e-6 on two);
    # Adam's step here is 1e-3, so 1e-5 still tells a right accumulation from a wrong one.
    for (name, p_full), p_acc in zip(full.online.named_parameters(), accum.online.parameters()):
        torch.testing.assert_close(p_full, p_acc, rtol=1e-4, atol=1e-5, msg=name)


# ---------------------------------------------------------------------------- target net


def test_target_sync_copies_parameters_and_batchnorm_buffers() -> None:
    learner = make_learner(target_sync_updates=2)
    batch = make_batch(size=4)
    learner.update(batch)
    online, target = learner.online.state_dict(), learner.target.state_dict()
    # After one update the running statistics differ: no sync yet.
    assert not torch.equal(online["features.1.running_mean"], target["features.1.running_mean"])
    learner.update(batch)
    online, target = learner.online.state_dict(), learner.target.state_dict()
    assert online.keys() == target.keys()
    for key in online:
        assert torch.equal(online[key], target[key]), key
    assert int(target["features.1.num_batches_tracked"]) == 2
    assert not learner.target.training
    assert learner.online.training


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


# ---------------------------------------------------------------------------- compile


def test_compile_failure_falls_back_to_eager_with_one_warning() -> None:
    learner = make_learner(compile=True, compile_backend="no_such_backend_for_tests")
    batch = make_batch(size=4)
    before = snapshot(learner)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learner.warmup(batch_size=4)
        learner.update(batch)
        learner.update(batch)
    fallback = [w for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert len(fallback) == 1, [str(w.message) for w in caught]
    assert "no_such_backend_for_tests" in str(fallback[0].message)
    assert learner.compiled is False
    assert learner.updates == 2
    assert not state_equal(snapshot(learner)["online"], before["online"])
    metrics = learner.pop_metrics()
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())


def test_compiled_step_puts_the_state_back_and_runs_eager_after_a_failed_compile() -> None:
    calls: list[str] = []
    step = CompiledStep(lambda x: x + 1, lambda x: x * 2, compile=True, backend="no_such_backend_for_tests")

    def update() -> torch.Tensor:
        calls.append("update")
        return step.loss(step.targets(torch.ones(2)))

    def save() -> str:
        calls.append("save")
        return "saved"

    with pytest.warns(CompileFallbackWarning, match="no_such_backend_for_tests"):
        out = step.run(update, save=save, restore=lambda saved: calls.append(f"restore {saved}"))
    assert torch.equal(out, torch.full((2,), 4.0))  # the eager functions
    assert calls[0] == "save" and calls.count("restore saved") == 1 and calls[-1] == "update"
    assert not step.compiled and not step.pending
    calls.clear()
    step.run(update, save=save, restore=lambda saved: calls.append("restore"))
    assert calls == ["update"]  # compiling is tried once

    eager = CompiledStep(lambda x: x, lambda x: x, compile=False, backend="inductor")
    calls.clear()
    eager.run(lambda: calls.append("update"), save=save, restore=lambda saved: calls.append("restore"))
    assert calls == ["update"] and not eager.compiled


# Inductor itself triggers torch.jit deprecation warnings while compiling; not ours.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    ("prev_action_input", "advantage_learning", "batch_norm"),
    [(False, 0.0, True), (True, 0.0, True), (False, 0.9, True), (False, 0.0, False)],
)
def test_compiled_loss_matches_eager(prev_action_input: bool, advantage_learning: float, batch_norm: bool) -> None:
    options = dict(prev_action_input=prev_action_input, advantage_learning=advantage_learning, batch_norm=batch_norm)
    compiled = make_learner(compile=True, **options)
    eager = make_learner(**options)
    compiled.warmup(batch_size=4)
    assert compiled.compiled is True
    eager.load_state_dict(copy.deepcopy(compiled.state_dict()))
    batch = make_batch(size=4, seed=5)
    torch.testing.assert_close(loss_of(compiled, batch), loss_of(eager, batch), rtol=1e-4, atol=1e-5)
    compiled.update(batch)
    eager.update(batch)
    for (name, p_c), p_e in zip(compiled.online.named_parameters(), eager.online.parameters()):
        torch.testing.assert_close(p_c, p_e, rtol=1e-4, atol=1e-5, msg=name)


# ---------------------------------------------------------------------------- AMP


def test_amp_on_cpu_uses_bf16_and_trains() -> None:
    learner = make_learner(amp=True)
    assert learner.amp_dtype == torch.bfloat16
    assert learner.scaler is None  # bf16 needs no loss scaling
    batch = make_batch(size=4)
    learner.update(batch)
    learner.update(batch)
    metrics = learner.pop_metrics()
    assert metrics["updates"] == 2.0
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    # Master weights stay float32.
    assert all(p.dtype == torch.float32 for p in learner.online.parameters())


def test_amp_targets_are_computed_in_float32() -> None:
    """Under AMP the no-grad target forwards run without autocast: the targets equal the
    fp32 learner's exactly, while the loss's forward does run in bf16."""
    batch = make_batch(size=8)
    fp32, amp = make_learner(amp=False), make_learner(amp=True)
    amp.online.load_state_dict(fp32.online.state_dict())
    perturb(amp.target, seed=3)
    fp32.target.load_state_dict(amp.target.state_dict())
    obs, action, ret, next_obs, discount, weight, prev, next_prev = batch_to_device(batch, amp.device, NUM_ACTIONS)
    expected = targets(fp32.online, fp32.step.targets, next_obs, next_prev, ret, discount, obs, prev, action)
    got = targets(amp.online, amp.step.targets, next_obs, next_prev, ret, discount, obs, prev, action)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)
    loss_amp, _, _ = amp.step.loss(obs, prev, action, got, weight, weight.sum())
    loss_fp32, _, _ = fp32.step.loss(obs, prev, action, got, weight, weight.sum())
    assert loss_amp.item() != loss_fp32.item()  # the loss's forward is the part in bf16


def test_amp_disabled() -> None:
    assert make_learner(amp=False).amp_dtype is None


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


def test_previous_actions_reach_the_loss_and_a_batch_without_them_means_none() -> None:
    learner = make_learner(prev_action_input=True)
    batch = make_batch(size=6)
    with_prev = loss_of(learner, batch)
    none = torch.full((6,), NUM_ACTIONS)
    stripped = Batch(batch.obs, batch.action, batch.ret, batch.next_obs, batch.discount, batch.weight)
    explicit_none = Batch(
        batch.obs, batch.action, batch.ret, batch.next_obs, batch.discount, batch.weight, none, none.clone()
    )
    # BatchNorm's running statistics move with every train-mode forward: compare fresh copies.
    a, b = make_learner(prev_action_input=True), make_learner(prev_action_input=True)
    torch.testing.assert_close(loss_of(a, stripped), loss_of(b, explicit_none))
    assert not torch.allclose(with_prev, loss_of(make_learner(prev_action_input=True), explicit_none))
    before = learner.online.prev_action.weight.detach().clone()
    learner.update(batch)
    assert not torch.equal(before[:NUM_ACTIONS], learner.online.prev_action.weight[:NUM_ACTIONS])
    assert torch.equal(learner.online.prev_action.weight[NUM_ACTIONS], torch.zeros(512))  # none stays zero
