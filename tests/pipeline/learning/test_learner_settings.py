"""Tests for pipeline.learning.learner_settings: no learning default of its own."""

from __future__ import annotations

from dataclasses import fields

from config import Config
from pipeline.learning.learner_settings import LearnerSettings


def test_the_defaults_are_what_a_default_config_gives() -> None:
    assert LearnerSettings() == LearnerSettings.from_config(Config(), compile=True, amp=True, device="cpu")


def test_every_setting_but_the_machines_choices_comes_from_the_config() -> None:
    cfg = Config(learning_rate=3e-4, quantiles=0, acting_tau=0.0, bn_calibration_states=64, batch_size=16)
    settings = LearnerSettings.from_config(cfg, compile=False, amp=False, device="cpu")
    changed = {
        f.name for f in fields(LearnerSettings) if getattr(settings, f.name) != getattr(LearnerSettings(), f.name)
    }
    assert changed == {
        "learning_rate",
        "quantiles",
        "acting_tau",
        "bn_calibration_states",
        "calibration_chunk",
        "compile",
        "amp",
    }
