"""Learners of the acting-copy tests' shape: Catch's three actions (so a mark of one loads as
a policy), 32-state batches, an averaged acting copy with precise BN fed from replay-like
states. Built here so the session's shared compiled one (tests/pipeline/learning/conftest.py)
and the tests' own eager ones are the same learner."""

from __future__ import annotations

from dataclasses import replace

import torch

from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings
from tests.pipeline.learning.test_batchnorm_stats import states_like_replay

NUM_ACTIONS = 3
TAU = 0.1
BATCH = 32


def acting_learner(*, compile: bool = False, tau: float = TAU) -> Learner:
    """A fresh learner (seeded weights); see :func:`feed_calibration` for its replay states."""
    settings = LearnerSettings(compile=compile, amp=False, learning_rate=1e-3, target_sync_updates=1000)
    settings = replace(settings, bn_calibration_states=1024, calibration_chunk=BATCH, acting_tau=tau)
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, settings)
    feed_calibration(learner)
    return learner


def feed_calibration(learner: Learner) -> None:
    """Calibrations draw replay-like states, new ones each time, the same sequence for every learner."""
    draws = iter(range(50_000, 60_000))
    learner.calibration_source = lambda count: (states_like_replay(count, next(draws)), None)
