"""Training that waits for its evaluator: where the hold goes, and the learner's handle on it.

With ``eval_max_lag_frames`` > 0 the evaluator keeps the weights block's ``hold_frames``
word at the frames where the evaluation it has not started yet is that much overdue;
collectors pause while the published frames are at or past it
(:attr:`~pipeline.transport.weights.WeightsBlock.held`), and the learner, held to the
replay ratio, pauses with them. Why: a niced evaluator sharing a busy core gets a few
percent of it, and without a hold it evaluates whichever multiples of the interval it
happens to reach (two in a 40k-frame run on one busy core); with one, it evaluates at
every multiple however slow the machine, and the run waits for it instead.

Where the hold goes is :func:`hold_frames`, for both of its writers: the process sets
the hold as it goes (:mod:`~pipeline.run.evaluator.evaluator_main`); the learner sets the first
one before the process starts (so its start-up, importing torch at nice 10, counts as
overdue too) and lifts it when the process stops or dies, so a dead evaluator never
stalls a run: :class:`TrainingHold`.
"""

from __future__ import annotations

from typing import Any

from pipeline.run.pacing import next_mark


def hold_frames(frames: int, interval_frames: int, max_lag_frames: int) -> int:
    """Where training waits: ``max_lag_frames`` past the first evaluation due after ``frames``
    (0, no hold, without a lag)."""
    if max_lag_frames <= 0:
        return 0
    return next_mark(frames, interval_frames) + max_lag_frames


class TrainingHold:
    """The learner's handle on the weights block's hold: set it, and lift it when closed."""

    def __init__(self, weights_name: str) -> None:
        from pipeline.transport.segments import attach_segment
        from pipeline.transport.weights import WeightsBlock

        self.segment = attach_segment(weights_name)
        self.block: Any = WeightsBlock(self.segment.buf)

    def set(self, frames: int) -> None:
        self.block.hold_frames = frames

    def close(self) -> None:
        """Lift the hold (collectors go on at once) and detach; safe to call twice."""
        from pipeline.transport.segments import release

        if self.block is None:
            return
        self.block.hold_frames = 0
        self.block.close()
        self.block = None
        release(self.segment, unlink=False)
