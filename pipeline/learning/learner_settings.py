"""The learner's settings: a plain dataclass the trainer fills from the run's Config.

:class:`LearnerSettings` holds every knob :class:`~pipeline.learning.learner.Learner`
reads, so the learner can be built in tests and benchmarks without a Config;
:meth:`LearnerSettings.from_config` is the one place a run's Config becomes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LearnerSettings"]


@dataclass
class LearnerSettings:
    """Plain learner settings, filled from the project Config by the caller."""

    learning_rate: float = 1e-4
    adam_eps: float = 1.5e-4
    grad_clip: float = 10.0
    grad_accum: int = 1
    target_sync_updates: int = 2000
    dueling: bool = True
    frame_stack: int = 4
    prev_action_input: bool = False  # the network also sees the previous action (QNetwork)
    batch_norm: bool = True  # BatchNorm after every conv (QNetwork)
    batch_renorm: bool = False  # Batch Renormalization's training forward in the online net
    augment_pad: int = 0  # random-shift augmentation of obs and next_obs (pixels; 0 = off)
    target_tau: float = 0.0  # moving-average target per update (0 = copy every target_sync_updates)
    advantage_learning: float = 0.0  # alpha of the advantage-learning target (0 = plain Double DQN)
    reset_interval: int = 0  # shrink-and-perturb the online net every this many updates (0 = never)
    reset_shrink: float = 0.8  # kept fraction of the weights at a reset; the rest is a fresh init
    bn_calibration_states: int = 0  # precise BN over this many replay states (0 = the running average)
    bn_momentum: float = 0.1  # the running average's momentum when bn_calibration_states is 0
    calibration_chunk: int = 32  # states per calibration forward: the training batch size
    acting_tau: float = 0.0  # publish a moving average of the online weights (ActingCopy; 0 = the online net)
    compile: bool = True
    amp: bool = True
    device: str = "cpu"
    compile_backend: str = "inductor"

    @classmethod
    def from_config(cls, cfg: Any, *, compile: bool, amp: bool, device: str) -> LearnerSettings:
        """The learner's part of a run's :class:`config.Config`; compile/amp as decided for the machine."""
        return cls(
            learning_rate=cfg.learning_rate,
            adam_eps=cfg.adam_eps,
            grad_clip=cfg.grad_clip,
            grad_accum=cfg.grad_accum,
            target_sync_updates=cfg.target_sync_updates,
            dueling=cfg.dueling,
            frame_stack=cfg.frame_stack,
            prev_action_input=cfg.prev_action_input,
            batch_norm=cfg.batch_norm,
            batch_renorm=cfg.batch_renorm,
            augment_pad=cfg.augment_shift,
            target_tau=cfg.target_tau,
            advantage_learning=cfg.advantage_learning,
            reset_interval=cfg.reset_interval_updates,
            reset_shrink=cfg.reset_shrink,
            bn_calibration_states=cfg.bn_calibration_states,
            bn_momentum=cfg.bn_momentum,
            calibration_chunk=cfg.batch_size // cfg.grad_accum,
            acting_tau=cfg.acting_tau,
            compile=compile,
            amp=amp,
            device=device,
        )
