"""The learner's settings: a plain dataclass the trainer fills from the run's Config.

:class:`LearnerSettings` holds every knob :class:`~pipeline.learning.learner.Learner`
reads, so the learner can be built in tests and benchmarks without a Config;
:meth:`LearnerSettings.from_config` is the one place a run's Config becomes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import Config

__all__ = ["SAVED_STATISTICS_STATES", "LearnerSettings"]

# Replay states the BatchNorm statistics of a saved copy (a mark, a checkpoint) are
# estimated over, against ``bn_calibration_states`` for a publish: a saved copy is played
# as it is for as long as anyone plays it (pipeline.run.trainer.calibration). 128 chunks of 32, two
# seconds of one core per mark for both networks (one 1-1 mark played the same 20
# episodes over 1,024).
SAVED_STATISTICS_STATES = 4096


# Every learning default below is Config's (one place, no copy to drift); a test or a
# benchmark that builds a learner without a Config gets the learner a default run trains.
_DEFAULTS = Config()


@dataclass
class LearnerSettings:
    """Plain learner settings, filled from the project Config by the caller."""

    learning_rate: float = _DEFAULTS.learning_rate
    target_sync_updates: int = _DEFAULTS.target_sync_updates
    frame_stack: int = _DEFAULTS.frame_stack
    bn_calibration_states: int = _DEFAULTS.bn_calibration_states  # precise BN over this many replay states (>= 1)
    calibration_chunk: int = _DEFAULTS.batch_size  # states per calibration forward: the training batch size
    quantiles: int = _DEFAULTS.quantiles  # QR-DQN with this many quantiles per action (0 = Q-values, Huber loss)
    acting_tau: float = _DEFAULTS.acting_tau  # publish a moving average of the online weights (0 = the online net)
    compile: bool = True  # the machine's choice (pipeline.learning.learner_choice), not a Config value
    amp: bool = True
    device: str = "cpu"
    compile_backend: str = "inductor"

    @classmethod
    def from_config(cls, cfg: Any, *, compile: bool, amp: bool, device: str) -> LearnerSettings:
        """The learner's part of a run's :class:`config.Config`; compile/amp as decided for the machine."""
        return cls(
            learning_rate=cfg.learning_rate,
            target_sync_updates=cfg.target_sync_updates,
            frame_stack=cfg.frame_stack,
            bn_calibration_states=cfg.bn_calibration_states,
            calibration_chunk=cfg.batch_size,
            quantiles=cfg.quantiles,
            acting_tau=cfg.acting_tau,
            compile=compile,
            amp=amp,
            device=device,
        )
