"""Shrink-and-perturb resets and the moving-average target of the learner."""

from __future__ import annotations

import copy

import torch

from models import QNetwork
from tests.pipeline.learning.test_learner import NUM_ACTIONS, loss_of, make_batch, make_learner


def test_shrink_and_perturb_mixes_in_a_fresh_init_and_restarts_adam() -> None:
    learner = make_learner()
    batch = make_batch(size=8)
    for _ in range(3):
        learner.update(batch)
    assert learner.optimizer.state  # Adam moments exist
    before = [p.detach().clone() for p in learner.online.parameters()]
    buffers = {k: v.clone() for k, v in learner.online.named_buffers()}

    torch.manual_seed(11)
    learner.shrink_and_perturb()
    torch.manual_seed(11)
    fresh = QNetwork(NUM_ACTIONS, 4, True)
    for old, new, init in zip(before, learner.online.parameters(), fresh.parameters(), strict=True):
        torch.testing.assert_close(new.detach(), 0.8 * old + 0.2 * init)
    for name, value in learner.online.named_buffers():
        assert torch.equal(value, buffers[name]), name  # BatchNorm statistics kept
    assert learner.resets == 1 and not learner.optimizer.state  # moments of the old weights dropped

    # The optimizer goes on consistently: fresh moments at step 1, finite weights, and the
    # loss on a fixed batch still falls.
    losses = [float(loss_of(learner, batch).detach())]
    for _ in range(15):
        learner.update(batch)
    losses.append(float(loss_of(learner, batch).detach()))
    steps = {float(state["step"]) for state in learner.optimizer.state.values()}
    assert steps == {15.0} and len(learner.optimizer.state) == len(before)
    assert all(torch.isfinite(p).all() for p in learner.online.parameters())
    assert losses[1] < losses[0]


def test_resets_happen_every_interval() -> None:
    learner = make_learner(reset_interval=3)
    batch = make_batch(size=4)
    for _ in range(7):
        learner.update(batch)
    assert learner.resets == 2


def test_moving_average_target_follows_the_online_net_every_update() -> None:
    learner = make_learner(target_tau=0.1, target_sync_updates=1)  # tau wins over hard syncs
    batch = make_batch(size=8)
    learner.update(batch)  # online and target now differ
    target_before = copy.deepcopy(learner.target.state_dict())
    learner.update(batch)
    online = learner.online.state_dict()
    for name, value in learner.target.state_dict().items():
        if value.is_floating_point():  # parameters and BatchNorm running statistics
            expected = target_before[name] + 0.1 * (online[name] - target_before[name])
            torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
    # A hard sync every update (target_sync_updates=1) would have made them equal.
    assert not torch.equal(learner.target.state_dict()["fc.0.weight"], online["fc.0.weight"])
