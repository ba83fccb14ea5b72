"""Learners of the acting-copy tests' shape: Catch's three actions (so a mark of one loads as
a policy), 32-state batches, an averaged acting copy with precise BN over replay-like states
handed to it. Built here so the session's shared compiled one (tests/pipeline/learning/conftest.py)
and the tests' own eager ones are the same learner."""

from __future__ import annotations

from dataclasses import replace

import torch

from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings

NUM_ACTIONS = 3
TAU = 0.1
BATCH = 32


def acting_learner(*, compile: bool = False, tau: float = TAU) -> Learner:
    """A fresh learner (seeded weights); its calibrations take the states handed to them."""
    settings = LearnerSettings(compile=compile, amp=False, learning_rate=1e-3, target_sync_updates=1000)
    settings = replace(settings, bn_calibration_states=1024, calibration_chunk=BATCH, acting_tau=tau)
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, settings)
    return learner
