"""What a training run holds from its startup to its shutdown: one object, :class:`RunResources`.

:func:`~pipeline.run.trainer.startup.open_run` builds it, in the order that lets a failure
leave nothing behind, and registers how each piece is released on the run's release
stack (a ``contextlib.ExitStack`` the :class:`~pipeline.run.trainer.trainer.Trainer` closes at
its very end, whatever failed). The trainer's tasks use it while the run goes;
:mod:`~pipeline.run.trainer.shutdown` writes what the run leaves (final checkpoint, replay,
``summary.json``) from it before the stack releases it.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import torch

from pipeline.learning.learner import Learner
from pipeline.learning.replay import ReplayMemory
from pipeline.run.machine.preflight import RunLock
from pipeline.run.monitor.keys import CounterKey
from pipeline.run.monitor.monitor import Monitor
from pipeline.run.pacing import RateLimiter
from pipeline.run.trainer.calibration import Calibration
from pipeline.run.trainer.checkpoints import RunCheckpoints
from pipeline.run.trainer.collection import CollectionBackend
from pipeline.run.trainer.pieces import RunPaths
from pipeline.run.trainer.steadiness_watch import SteadinessWatch
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock

__all__ = ["RunResources", "slots_of"]


def slots_of(collector: int, envs_per_collector: int) -> tuple[int, ...]:
    """The ring slots (replay streams) of one collector: one per environment it runs."""
    return tuple(range(collector * envs_per_collector, (collector + 1) * envs_per_collector))


@dataclass
class RunResources:
    """A training run's learner, replay, shared memory, processes, monitor and files.

    ``ring``, ``supervisor`` and ``consolidator`` are this machine's
    (:class:`~pipeline.transport.ring.TransitionRing`, :class:`~pipeline.run.collector.supervisor.Supervisor`,
    :class:`~pipeline.run.trainer.consolidator.Consolidator`), or a ``collection`` backend's
    stand-ins for them (:mod:`~pipeline.run.trainer.collection`); ``ring_segment`` is then None.
    """

    paths: RunPaths
    lock: RunLock
    checkpoints: RunCheckpoints
    resume_path: Path | None  # the checkpoint this run resumed from
    resumed: dict[CounterKey, int]  # that checkpoint's counters (zeros for a fresh run)
    num_actions: int
    device: torch.device
    learner: Learner
    replay: ReplayMemory
    limiter: RateLimiter
    calibration: Calibration
    steadiness: SteadinessWatch
    monitor: Monitor
    warmup_s: float | None  # the learner's compile and warm-up (None: not trained)
    num_collectors: int
    envs_per_collector: int
    collection: CollectionBackend | None
    ring_segment: shared_memory.SharedMemory | None
    weights_segment: shared_memory.SharedMemory
    ring: Any
    weights: WeightsBlock
    consolidator: Any
    supervisor: Any

    def slots_of(self, collector: int) -> tuple[int, ...]:
        return slots_of(collector, self.envs_per_collector)

    def collector_counts(self) -> dict[CounterKey, int]:
        """Frames, steps, episodes and replayed frames, summed over the collectors' slots
        as they last reported them."""
        counts: dict[CounterKey, int] = dict.fromkeys(("frames", "steps", "episodes", "replayed_frames"), 0)
        for slot in self.ring.slots:
            counters = slot.counters
            counts["frames"] += counters.frames
            counts["steps"] += counters.steps
            counts["episodes"] += counters.episodes
            counts["replayed_frames"] += counters.replayed_frames
        return counts

    def release_shared_memory(self) -> None:
        """Drop the views, close and unlink every segment (and the backend's); repeatable.

        The release stack does this at the end of the run; a second Ctrl-C calls it
        directly before leaving at once.
        """
        self.ring.close()
        self.weights.close()
        self.supervisor.slots = []
        if self.collection is not None:
            self.collection.close()
        segments.release(self.ring_segment, unlink=True)
        segments.release(self.weights_segment, unlink=True)
