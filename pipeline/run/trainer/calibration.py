"""The states a training run hands its learner to re-estimate the BatchNorm statistics on.

Precise BN (:mod:`~pipeline.learning.batchnorm_stats`, ``bn_calibration_states``): the
learner re-estimates its statistics for the weights as they are over uniform replay
states, before every target copy, every publish, and every copy of the weights that is
saved: a frame mark and every checkpoint (``eval`` and ``play`` load those). Between
publishes the weights move on while the statistics stay those of the last calibration,
and a copy saved with them does not play what the collectors play: a 1-1 mark saved
between two publishes played a mean x_pos of 769, the same weights with their statistics
re-estimated 1,769-1,874 (docs/learning-history.md).

:class:`Calibration` draws those states from the replay with a generator of its own (the
training batches are the same with calibration on or off) and hands them to the learner:
:meth:`~Calibration.calibrate` before a publish, mark or checkpoint,
:meth:`~Calibration.for_next_update` to the update that copies the target. It draws only
when the learner will use them (a calibration runs at most once per update count), so a
run's draws, and with them its statistics, are the same whatever else it measures.

A copy that is saved (a mark, a checkpoint) gets statistics of its own over
``SAVED_STATISTICS_STATES`` states (:meth:`~Calibration.for_saving`), drawn by a second
generator and put back afterwards: it is played as saved for as long as anyone plays it,
and 256 states leave a lottery in it. One 1-1 mark (action_set=right_only, seed 0, 2M
frames) saved over 256 states played a mean x_pos of 1,007, 11 of its 20 protocol episodes
stuck at the first pipe; the same weights over another 256 states 2,150 and 2,277, over
1,024 or 4,096 states 2,187 (docs/learning.md, "What a mark's statistics cost").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from pipeline.learning.learner import CalibrationStates, Learner
from pipeline.learning.learner_settings import SAVED_STATISTICS_STATES
from pipeline.learning.replay import ReplayMemory

__all__ = ["Calibration"]

# Added to the run's seed for the generators of the calibration states: those of training,
# and those of the copies saved.
_CALIBRATION_SEED_OFFSET = 8_000_000
_SAVED_SEED_OFFSET = 9_000_000


class Calibration:
    """Replay states for ``learner``'s precise-BN calibrations.

    Args:
        learner: the learner to calibrate (its ``calibration_count`` states a time).
        replay: where the states come from.
        seed: the run's seed (the generator's is offset from it).
        min_replay: the replay must hold enough for a batch of this size first: a new
            run's first publish, or a resumed run's whose replay was not restored, has no
            states to re-estimate from and keeps what it has.
    """

    def __init__(self, learner: Learner, replay: ReplayMemory, *, seed: int, min_replay: int) -> None:
        self.learner = learner
        self.replay = replay
        self.min_replay = min_replay
        self.generator = torch.Generator(device=replay.device).manual_seed(seed + _CALIBRATION_SEED_OFFSET)
        self.saved_generator = torch.Generator(device=replay.device).manual_seed(seed + _SAVED_SEED_OFFSET)

    def calibrate(self) -> bool:
        """Re-estimate the statistics for the weights as they are now, unless they already
        were at this update count or the replay cannot give the states yet. Returns whether
        it did."""
        learner = self.learner
        if learner.calibrated_at == learner.updates:
            return False
        if not self.replay.can_sample(self.min_replay):
            return False
        return learner.calibrate(self._draw())

    @contextlib.contextmanager
    def for_saving(self) -> Iterator[None]:
        """Inside, the learner's networks hold statistics for their weights as they are
        over ``SAVED_STATISTICS_STATES`` states, for a copy to be saved; training's are
        put back on the way out. Before the replay can give states, the networks keep
        what they have."""
        if not self.replay.can_sample(self.min_replay):
            yield
            return
        states = self.replay.sample_states(SAVED_STATISTICS_STATES, self.saved_generator)
        with self.learner.statistics_for_saving(states):
            yield

    def for_next_update(self) -> CalibrationStates | None:
        """The states for the next update when it copies the target, else None."""
        if self.learner.copies_target_next:
            return self._draw()
        return None

    def _draw(self) -> CalibrationStates:
        return self.replay.sample_states(self.learner.calibration_count, self.generator)
