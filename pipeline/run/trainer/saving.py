"""What the learner process saves while it trains, and when: periodic checkpoints, frame
marks and the replay.

- A **periodic checkpoint** every ``checkpoint_interval_s``, written by a worker thread
  while training goes on (:func:`~pipeline.run.trainer.checkpoints.write_periodic`); a
  failed write is retried an interval later, not every tick.
- A **mark** once the frames pass the next multiple of ``mark_interval_frames``: the
  online net there (a few frames past it), written by a worker thread; a failed write is
  reported once and that mark skipped (:func:`~pipeline.run.trainer.checkpoints.write_mark`).
- The **replay** every ``replay_save_interval_s`` (and with the final checkpoint), in the event loop
  itself: it must not change while it is written, and the rings hold collection meanwhile.

Checkpoints and marks are played as they are saved, so their BatchNorm statistics are
re-estimated for saving over more states than a publish uses
(:meth:`~pipeline.run.trainer.calibration.Calibration.for_saving`). The final checkpoint
is the shutdown's (:mod:`~pipeline.run.trainer.shutdown`), from :meth:`SaveSchedule.checkpoint_args`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from config import Config
from pipeline.run.monitor.keys import CounterKey
from pipeline.run.pacing import next_mark
from pipeline.run.trainer.checkpoints import (
    checkpoint_payload,
    mark_payload,
    rolling_return,
    write_mark,
    write_periodic,
)
from pipeline.run.trainer.pieces import save_replay
from pipeline.run.trainer.resources import RunResources
from pipeline.run.trainer.write_failures import WriteFailures

__all__ = ["SaveSchedule"]

Totals = dict[CounterKey, int]


class SaveSchedule:
    """The run's saves on their schedule; ``totals`` are the run's counters (resumed ones
    included) at the moment of each call."""

    def __init__(self, cfg: Config, write_failures: WriteFailures) -> None:
        self.cfg = cfg
        self.write_failures = write_failures
        self.next_mark = 0  # frames at which the next mark is kept (mark_interval_frames)
        self.last_checkpoint_t = time.monotonic()
        self.last_replay_save_t = time.monotonic()

    def start(self, resumed_frames: int) -> None:
        """A run (or a resumed one) goes on from the first mark after its frames."""
        if self.cfg.mark_interval_frames:
            self.next_mark = next_mark(resumed_frames, self.cfg.mark_interval_frames)

    def checkpoint_args(self, res: RunResources, totals: Totals) -> tuple[dict[str, Any], int, float | None]:
        """A checkpoint's payload (statistics re-estimated for saving: ``eval`` and ``play``
        load it), its frame count and the rolling training return best.pt is judged by."""
        with res.calibration.for_saving():
            payload = checkpoint_payload(res.learner, totals, self.cfg, res.num_actions)
        return payload, totals["frames"], rolling_return(res.consolidator.episodes)

    def checkpoint_due(self) -> bool:
        return time.monotonic() - self.last_checkpoint_t >= self.cfg.checkpoint_interval_s

    async def checkpoint(self, res: RunResources, totals: Totals) -> Path | None:
        """A periodic checkpoint, written by a worker thread while training goes on; None
        when it failed."""
        payload, frames, score = self.checkpoint_args(res, totals)
        self.last_checkpoint_t = time.monotonic()
        return await write_periodic(
            res.checkpoints, payload, frames, score, self.write_failures, self.cfg.checkpoint_interval_s
        )

    def mark_due(self, frames: int) -> bool:
        return bool(self.cfg.mark_interval_frames) and frames >= self.next_mark

    async def keep_due_mark(self, res: RunResources, totals: Totals) -> Path | None:
        """The mark the frames passed, if one is due (None if none is)."""
        if not self.mark_due(totals["frames"]):
            return None
        with res.calibration.for_saving():
            payload = mark_payload(res.learner, totals, self.cfg, res.num_actions)
        mark = self.next_mark
        self.next_mark = next_mark(totals["frames"], self.cfg.mark_interval_frames)
        return await write_mark(res.paths.checkpoints, payload, mark, self.write_failures)

    def save_replay_if_due(self, res: RunResources) -> None:
        """The replay, every ``replay_save_interval_s`` (> 0) of a training run."""
        cfg = self.cfg
        if cfg.replay_save_interval_s <= 0:
            return
        if time.monotonic() - self.last_replay_save_t >= cfg.replay_save_interval_s:
            save_replay(res.replay, res.paths.checkpoints)
            self.last_replay_save_t = time.monotonic()
