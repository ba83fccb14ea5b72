"""Where training waits for an overdue evaluation, worked out by hand, and the learner's
handle on that hold in a real weights block (set, seen by the collectors, lifted once)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.run.evaluator.hold import TrainingHold, hold_frames
from pipeline.transport import weights as W
from pipeline.transport.segments import create_segment, release, segment_name
from tests.pipeline import producers as P

TAG = P.new_tag("hold")


@pytest.mark.parametrize(
    ("frames", "interval", "lag", "expected"),
    [
        (0, 1000, 200, 1200),  # a new run: first due at 1,000, held from 1,200
        (999, 1000, 200, 1200),
        (1000, 1000, 200, 2200),  # evaluated at the multiple itself: the next is due at 2,000
        (1300, 1000, 200, 2200),  # started late, at 1,300: still the next multiple, 2,000
        (250_112, 250_000, 50_000, 550_000),  # a run resumed just past a multiple
        (1300, 1000, 0, 0),  # no lag: never held
    ],
)
def test_the_hold_is_the_lag_past_the_next_evaluation_due(frames, interval, lag, expected):
    assert hold_frames(frames, interval, lag) == expected


def test_the_learners_hold_is_seen_by_collectors_and_lifted_when_closed():
    segment = create_segment(segment_name(TAG, "weights"), W.block_bytes(4))
    block = W.WeightsBlock.initialise(segment.buf, 4)
    try:
        hold = TrainingHold(segment.name)
        hold.set(hold_frames(0, 1000, 200))
        block.publish(np.zeros(4, dtype=np.float32), learner_step=1, frames=1199)
        assert block.hold_frames == 1200 and not block.held
        block.publish(np.zeros(4, dtype=np.float32), learner_step=2, frames=1200)
        assert block.held  # collectors wait here
        hold.close()
        assert block.hold_frames == 0 and not block.held
        hold.close()  # twice is safe
    finally:
        block.close()
        release(segment, unlink=True)
