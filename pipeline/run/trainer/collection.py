"""Where a run's records come from when the collectors are not this machine's processes.

The trainer runs its own collectors by default: a ring block in this machine's shared
memory, a :class:`~pipeline.run.collector.supervisor.Supervisor` and a
:class:`~pipeline.run.trainer.consolidator.Consolidator`. A :class:`CollectionBackend` handed to
the :class:`~pipeline.run.trainer.trainer.Trainer` replaces those three (the Ray backend of
:mod:`pipeline.cluster` is one), so the trainer's tasks, pacing, monitor and checkpoints
stay the same whichever backend feeds them; this layer never imports the backends.

What :meth:`CollectionBackend.open` returns stands in for the local objects, duck-typed:

- a *ring*: ``slots[i].counters`` (a :class:`~pipeline.transport.ring.SlotCounters` per
  replay stream, as the collectors last reported them) and ``close()``;
- a *supervisor*: ``start_all()``, ``check()``, ``stop()``, ``fatal``, ``restarts``,
  ``alive()``, ``states[i].process`` (None where the process is not on this machine) and
  ``states[i].restarts``, one state per collector;
- a *consolidator*: ``poll(budget)`` (non-blocking: it inserts what has arrived, at most
  ``budget`` records, and asks for more), ``records`` (consumed per stream), ``episodes``,
  ``episodes_total``, ``bad_episode_records`` and ``reset_gap()``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.transport.weights import WeightsBlock


class CollectionBackend(Protocol):
    """Collectors somewhere else, feeding this learner (see the module docstring)."""

    def prepare(self, cfg: Any) -> int:
        """Connect and find the collectors' machines; return how many collector processes
        the run has (one replay stream per env of each). Raises the trainer's
        ``TrainingError`` (any exception with one clear message) when it cannot."""
        ...

    def open(
        self,
        *,
        run_tag: str,
        num_floats: int,
        log_dir: Path,
        weights: WeightsBlock,
        insert: Callable[[int, np.ndarray], None],
    ) -> tuple[Any, Any, Any]:
        """Create the remote collectors' shared memory; return (ring, supervisor,
        consolidator) stand-ins. ``weights`` is the learner's own block (its epsilon is
        forwarded), ``insert(stream, records)`` puts records into the replay."""
        ...

    def publish(self, flat: np.ndarray, *, version: int, epsilon: float, learner_step: int) -> None:
        """Send newly published weights (one flat float32 array) on to the collectors."""
        ...

    def gauges(self) -> dict[str, float]:
        """The backend's own figures for the monitor (fixed keys from the first call on)."""
        ...

    def summary(self) -> dict[str, Any]:
        """The backend's delivery accounting for summary.json."""
        ...

    def close(self) -> None:
        """Stop what it started and remove its shared memory everywhere (repeatable)."""
        ...
