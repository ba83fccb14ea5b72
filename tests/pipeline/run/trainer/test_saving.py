"""Tests for pipeline.run.trainer.saving: when the saves fall due. What they write (marks,
periodic and final checkpoints, the replay) is tested on whole runs in test_trainer.py
and test_run_faults.py."""

from __future__ import annotations

import time

from config import Config
from pipeline.run.trainer.saving import SaveSchedule
from pipeline.run.trainer.write_failures import WriteFailures


def test_a_run_goes_on_from_the_first_mark_after_its_frames() -> None:
    saves = SaveSchedule(Config(mark_interval_frames=100_000), WriteFailures())
    saves.start(0)
    assert saves.next_mark == 100_000
    saves.start(250_123)  # a resumed run: the marks it passed are not kept again
    assert saves.next_mark == 300_000
    unmarked = SaveSchedule(Config(mark_interval_frames=0), WriteFailures())
    unmarked.start(250_123)
    assert unmarked.next_mark == 0


def test_a_checkpoint_falls_due_an_interval_after_the_last() -> None:
    saves = SaveSchedule(Config(checkpoint_interval_s=60.0), WriteFailures())
    assert not saves.checkpoint_due()
    saves.last_checkpoint_t = time.monotonic() - 61.0
    assert saves.checkpoint_due()
