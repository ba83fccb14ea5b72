"""Tests for the learner's compiled step (pipeline.learning.learner_compile) and its precision
(pipeline.learning.learner_device's autocast dtype): a failed compile falls back to eager
with one warning and the state put back, the compiled loss equals the eager one, AMP on
the CPU trains in bf16 with float32 targets."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from pipeline.learning.learner_compile import CompiledStep, CompileFallbackWarning
from pipeline.learning.learner_device import batch_to_device
from pipeline.learning.update import targets
from tests.pipeline.learning.test_learner import (
    loss_of,
    make_batch,
    make_learner,
    perturb,
    snapshot,
    state_equal,
)


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


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("quantiles", [0, 8], ids=["q-values", "qr-dqn"])
def test_compiled_loss_matches_eager(quantiles: int) -> None:
    compiled = make_learner(compile=True, quantiles=quantiles)
    eager = make_learner(quantiles=quantiles)
    compiled.warmup(batch_size=4)
    assert compiled.compiled is True
    eager.load_state_dict(copy.deepcopy(compiled.state_dict()))
    batch = make_batch(size=4, seed=5)
    torch.testing.assert_close(loss_of(compiled, batch), loss_of(eager, batch), rtol=1e-4, atol=1e-5)
    compiled.update(batch)
    eager.update(batch)
    for (name, p_c), p_e in zip(compiled.online.named_parameters(), eager.online.parameters()):
        torch.testing.assert_close(p_c, p_e, rtol=1e-4, atol=1e-5, msg=name)


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
    obs, action, ret, next_obs, discount, weight = batch_to_device(batch, amp.device)
    expected = targets(fp32.online, fp32.step.targets, next_obs, ret, discount)
    got = targets(amp.online, amp.step.targets, next_obs, ret, discount)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)
    loss_amp, _ = amp.step.loss(obs, action, got, weight)
    loss_fp32, _ = fp32.step.loss(obs, action, got, weight)
    assert loss_amp.item() != loss_fp32.item()  # the loss's forward is the part in bf16


def test_amp_disabled() -> None:
    assert make_learner(amp=False).amp_dtype is None
