"""The learner's weights handed to every collector (and the evaluator), once an epoch.

A publish re-estimates the BatchNorm statistics the acting copy will play with
(:mod:`~pipeline.run.trainer.calibration`), lets the steadiness probe read the weights
as published (:mod:`~pipeline.run.trainer.steadiness_watch`), then writes the acting
copy's flat state into the weights block the local collectors read, and hands it to the
collectors of other machines when the run has them (the Ray backend).
"""

from __future__ import annotations

import time

from pipeline.learning.flat_state import flatten_state
from pipeline.run.trainer.resources import RunResources


def publish_weights(res: RunResources, *, step: int, epsilon: float, frames: int, batch_size: int) -> int:
    """Publish the acting weights with the learner's ``step``, the collectors' ``epsilon``
    and the run's ``frames``; the nanoseconds the steadiness probe took (its own phase).

    Before the replay holds a batch there is nothing to calibrate or probe on: the weights
    go out as they are (the run's first publish)."""
    probe_ns = 0
    if res.replay.can_sample(batch_size):
        res.calibration.calibrate()
        t_probe = time.perf_counter_ns()
        res.steadiness.at_publish(step)
        probe_ns = time.perf_counter_ns() - t_probe
    flat = flatten_state(res.learner.publishable_state())
    version = res.weights.publish(flat, learner_step=step, epsilon=epsilon, frames=frames)
    if res.collection is not None:
        res.collection.publish(flat, version=version, epsilon=epsilon, learner_step=step)
    return probe_ns
