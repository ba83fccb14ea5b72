"""CPU priority of the collectors: below the learner, so the learner gets a core the moment it wants one.

On a machine where every core is busy the learner is the run's bottleneck whenever the
collectors wait for it (a full ring, the replay ratio's gate), yet at equal priority the
kernel shares each core evenly between the learner and the collectors that will only wait
anyway. On a 2-core Xeon (Sapphire Rapids) beside two busy processes at the learner's own
priority, one learner update (compiled bf16, batch 32) took 40-48 ms against 30 ms on the
quiet machine, and with two threads 230-970 ms (a thread pool waits for its slowest
thread); with those processes at nice 15, 30 ms with one thread and 19.5 ms with two, as
quiet (docs/benchmarks.md). So the collectors run ``collector_niceness`` (config.py, 15)
levels below the learner: they take every cycle the learner leaves and give the core back as soon as it
wants it, which is what lets the learner take more threads when the collectors stall
(:mod:`pipeline.run.trainer.thread_handover`).

The evaluator keeps its nice 10 (:mod:`pipeline.run.evaluator.evaluator_main`), above the
collectors: its work per evaluation interval is fixed, so its priority only decides when
it runs, and above the collectors an evaluation ends soon after its mark.
"""

from __future__ import annotations

import os

__all__ = ["yield_to_learner"]


def yield_to_learner(levels: int) -> None:
    """Lower this process (a collector) ``levels`` below the priority it inherited from the
    learner (capped at the lowest, 19; 0 leaves it equal)."""
    if levels <= 0:
        return
    try:
        os.nice(levels)
    except OSError:  # a platform without priorities: equal shares, as before
        pass
