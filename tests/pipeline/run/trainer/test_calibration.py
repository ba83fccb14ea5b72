"""Tests for pipeline.run.trainer.calibration: which replay states the trainer hands its learner
for precise BN, and when (before a publish, once per update count; to the update that
copies the target; for a copy that is saved), on a real replay memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from config import Config
from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import SAVED_STATISTICS_STATES, LearnerSettings
from pipeline.learning.replay import ReplayMemory
from pipeline.run.trainer.calibration import Calibration
from pipeline.run.trainer.checkpoints import checkpoint_payload
from pipeline.transport.records import FLAG_START, RECORD_DTYPE

NUM_ACTIONS = 3
SETTINGS = LearnerSettings(
    compile=False, amp=False, bn_calibration_states=64, calibration_chunk=32, target_sync_updates=3
)


def replay_with(records: int) -> ReplayMemory:
    """A one-stream replay memory holding ``records`` random steps of one episode."""
    replay = ReplayMemory(1024, 1, frame_stack=4, n_step=3, gamma=0.99, seed=0)
    if records:
        rng = np.random.default_rng(0)
        steps = np.zeros(records, dtype=RECORD_DTYPE)
        steps["frame"] = rng.integers(0, 256, steps["frame"].shape, dtype=np.uint8)
        steps["action"] = rng.integers(0, NUM_ACTIONS, records)
        steps["flags"][0] = FLAG_START
        replay.add(0, steps)
    return replay


def learner(**overrides: object) -> Learner:
    torch.manual_seed(0)
    return Learner(NUM_ACTIONS, replace(SETTINGS, **overrides))


def test_calibrate_hands_the_learner_replay_states_once_per_update_count() -> None:
    empty = Calibration(learner(), replay_with(0), seed=5, min_replay=32)
    assert not empty.calibrate()  # nothing to re-estimate from yet: the statistics stay
    assert empty.learner.calibrated_at == -1

    replay = replay_with(300)
    net = learner()
    calibration = Calibration(net, replay, seed=5, min_replay=32)
    generator_before = calibration.generator.get_state()
    assert calibration.calibrate()
    assert net.calibrated_at == net.updates == 0
    # The states came from the calibration's own generator: the same draw by hand gives
    # the same statistics, and the replay's training batches are not moved by it.
    by_hand = learner()
    generator = torch.Generator().set_state(generator_before)
    assert by_hand.calibrate(replay.sample_states(64, generator))
    for key, value in by_hand.online.state_dict().items():
        assert torch.equal(value, net.online.state_dict()[key]), key
    assert torch.equal(replay.sample(8).obs, replay_with(300).sample(8).obs)
    # Once per update count: no second calibration, and no draw for one.
    drawn = calibration.generator.get_state()
    assert not calibration.calibrate()
    assert torch.equal(calibration.generator.get_state(), drawn)


def test_the_update_that_copies_the_target_gets_states_and_calibrates_before_the_copy() -> None:
    replay = replay_with(300)
    net = learner()
    calibration = Calibration(net, replay, seed=5, min_replay=32)
    handed = []
    for _ in range(3):
        states = calibration.for_next_update()
        handed.append(states is not None)
        net.update(replay.sample(32), states)
    assert handed == [False, False, True]
    assert net.calibrated_at == net.updates == 3
    for key, value in net.target.state_dict().items():
        assert torch.equal(value, net.online.state_dict()[key]), key
    assert not calibration.calibrate()  # already at this update count


def test_a_saved_copy_gets_statistics_over_more_states_of_its_own_draw_and_training_keeps_its() -> None:
    """``for_saving``: inside, the statistics are those of SAVED_STATISTICS_STATES states
    drawn by the saving generator (the same draw by hand gives them); a checkpoint payload
    taken inside keeps them after the block, while the learner is back on training's
    statistics and training's generator has not moved."""
    replay = replay_with(300)
    net = learner()
    calibration = Calibration(net, replay, seed=5, min_replay=32)
    assert calibration.calibrate()
    live = {k: v.clone() for k, v in net.online.state_dict().items()}
    training_draws = calibration.generator.get_state()
    saving_draws = calibration.saved_generator.get_state()
    with calibration.for_saving():
        payload = checkpoint_payload(net, {}, Config(), NUM_ACTIONS)
    assert torch.equal(calibration.generator.get_state(), training_draws)
    assert not torch.equal(calibration.saved_generator.get_state(), saving_draws)
    by_hand = learner()
    states = replay.sample_states(SAVED_STATISTICS_STATES, torch.Generator().set_state(saving_draws))
    assert by_hand.calibrate(states)
    saved = payload["learner"]["online"]
    for key, value in by_hand.online.state_dict().items():
        assert torch.equal(saved[key], value), key
        assert torch.equal(net.online.state_dict()[key], live[key]), key
    assert not torch.equal(saved["features.1.running_var"], live["features.1.running_var"])
    assert payload["learner"]["calibrated_at"] == net.calibrated_at == net.updates == 0

    # Before the replay can give states, a saved copy keeps what the networks have.
    empty = Calibration(learner(), replay_with(0), seed=5, min_replay=32)
    before = {k: v.clone() for k, v in empty.learner.online.state_dict().items()}
    with empty.for_saving():
        for key, value in empty.learner.online.state_dict().items():
            assert torch.equal(value, before[key]), key
