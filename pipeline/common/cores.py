"""How many cores a run has, and how many intra-op threads its learner runs with.

One place for the rule the run's start-up, the thread hand-over
(:mod:`pipeline.run.trainer.thread_handover`) and the learner benchmark share: the learner runs at
least with ``learner_threads`` (0: the cores the collectors leave, at least one) and at
most with ``learner_threads_max`` (0: every core) while the collectors wait for it.
"""

from __future__ import annotations

import os

__all__ = ["learner_thread_range", "usable_cores"]


def usable_cores() -> int:
    """The cores this process may run on (its affinity, e.g. under ``taskset``), else the CPU count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def learner_thread_range(
    learner_threads: int, learner_threads_max: int, num_processes: int, cores: int | None = None
) -> tuple[int, int]:
    """The fewest and the most threads the learner runs with on ``cores`` (default: this
    process's): never more than the cores, never fewer than one or than the least."""
    cores = usable_cores() if cores is None else cores
    least = learner_threads or max(1, cores - num_processes)
    most = min(learner_threads_max or cores, cores)
    return least, max(least, most)
