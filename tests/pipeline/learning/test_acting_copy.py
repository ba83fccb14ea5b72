"""Tests for pipeline.learning.acting_copy and the learner's averaged acting weights: the
average against a hand computation (eager and compiled), its own calibrated statistics,
what is published, checkpointed and loaded to play."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from config import Config
from pipeline.learning.checkpoint import save_checkpoint
from pipeline.learning.learner import Learner
from pipeline.learning.policy import load_policy
from pipeline.run.trainer.checkpoints import mark_payload
from tests.pipeline.learning.acting_learners import NUM_ACTIONS, TAU
from tests.pipeline.learning.acting_learners import acting_learner as make_learner
from tests.pipeline.learning.test_batchnorm_stats import Draws, batch_of, mean_offset, states_like_replay


def run_updates(learner: Learner, count: int) -> list[torch.Tensor]:
    """``count`` updates; returns the hand-computed average of the online parameters."""
    average = [p.detach().clone() for p in learner.online.parameters()]
    for step in range(count):
        learner.update(batch_of(states_like_replay(32, step), step, NUM_ACTIONS))
        for kept, online in zip(average, learner.online.parameters(), strict=True):
            kept += TAU * (online.detach() - kept)
    return average


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_the_acting_weights_are_the_moving_average_of_the_online_ones(compile: bool, request) -> None:
    learner = request.getfixturevalue("compiled_learner") if compile else make_learner()
    assert learner.compiled is compile
    average = run_updates(learner, 5)
    assert learner.acting is not None
    for kept, acting in zip(average, learner.acting.net.parameters(), strict=True):
        torch.testing.assert_close(acting, kept, rtol=1e-5, atol=1e-6)
    assert not torch.equal(learner.acting.net.fc[0].weight, learner.online.fc[0].weight)


def test_compiled_and_eager_learners_average_alike(compiled_learner: Learner) -> None:
    compiled, eager = compiled_learner, make_learner()  # compiled and warmed up
    assert compiled.compiled
    run_updates(compiled, 2)
    eager.load_state_dict(copy.deepcopy(compiled.state_dict()))
    batch = batch_of(states_like_replay(32, 11), 11, NUM_ACTIONS)
    compiled.update(batch)
    eager.update(batch)
    assert eager.acting is not None and compiled.acting is not None
    for a, b in zip(eager.acting.net.parameters(), compiled.acting.net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_acting_copy_has_statistics_of_its_own_weights_and_is_what_is_published(tmp_path: Path) -> None:
    learner = make_learner()
    run_updates(learner, 6)
    assert learner.calibrate(Draws(50_000)(learner))
    assert learner.acting is not None
    acting = learner.acting.net
    # Its statistics are its own: they differ from the online net's, and its eval mode
    # matches its train mode on fresh states of the same distribution.
    assert not torch.equal(acting.features[1].running_mean, learner.online.features[1].running_mean)
    fresh = states_like_replay(256, 7)
    with torch.no_grad():
        spread = float(acting(fresh).std())
    acting_offset = mean_offset_of(acting, fresh)
    # The averaged weights with the online net's statistics instead: what publishing the
    # average without a calibration of its own would give.
    borrowed = copy.deepcopy(acting)
    for name, value in learner.online.state_dict().items():
        if "running" in name:
            borrowed.state_dict()[name].copy_(value)
    assert acting_offset < 0.1 * spread, (acting_offset, spread)
    assert acting_offset < mean_offset_of(borrowed, fresh) / 5
    assert mean_offset(learner, fresh) < 0.1 * spread
    # The published state is the acting copy's.
    for name, value in learner.publishable_state().items():
        assert torch.equal(value, acting.state_dict()[name].float()), name
    # A mark (and so eval, play and the bench) plays the acting weights.
    cfg = Config(env_id="Catch-v0", quantiles=learner.settings.quantiles)  # the learner's shape
    payload = mark_payload(learner, {"frames": 100}, cfg, NUM_ACTIONS)
    save_checkpoint(tmp_path / "mark.pt", payload)
    policy = load_policy(tmp_path / "mark.pt")
    for name, value in policy.model.state_dict().items():
        assert torch.equal(value, acting.state_dict()[name]), name


def mean_offset_of(net: torch.nn.Module, obs: torch.Tensor) -> float:
    from pipeline.learning.batchnorm_stats import preserved_statistics

    with torch.no_grad(), preserved_statistics(net):
        net.train()
        q_train = torch.cat([net(chunk) for chunk in obs.split(32)])
        net.eval()
        q_eval = net(obs)
    return float((q_eval - q_train).abs().mean())


def test_checkpoints_and_the_warm_up_keep_the_average() -> None:
    learner = make_learner()
    run_updates(learner, 3)
    assert learner.acting is not None
    state = {k: v.clone() for k, v in learner.acting.state_dict().items()}
    learner.warmup(8)  # updates on random data, then everything put back
    for name, value in learner.acting.state_dict().items():
        assert torch.equal(value, state[name]), name
    saved = learner.state_dict()
    other = make_learner()
    other.load_state_dict(saved)
    assert other.acting is not None
    for name, value in other.acting.state_dict().items():
        assert torch.equal(value, state[name]), name
    # A checkpoint made without an acting copy starts the average at the online net.
    del saved["acting"]
    other.load_state_dict(saved)
    for name, value in other.acting.state_dict().items():
        assert torch.equal(value, learner.online.state_dict()[name]), name


def test_bad_tau_is_refused() -> None:
    with pytest.raises(ValueError, match="tau"):
        make_learner(tau=1.5)
