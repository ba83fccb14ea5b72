"""Tests for pipeline.run.trainer.steadiness_watch: when the probe measures and remembers.

A real training run's figures reaching metrics.csv are checked on the Catch learning
run (tests/pipeline/run/trainer/test_trainer.py), which measures at 600, 1,200 and 1,800 updates.
"""

from __future__ import annotations

import math

import torch

from pipeline.learning.learner import Learner
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.run.trainer.steadiness_watch import MIN_INTERVAL_UPDATES, SteadinessWatch, measurement_interval

NUM_ACTIONS = 3


class StatesOnly:
    """A replay stand-in that only serves uniform states (what the watch asks of it)."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.draws = 0

    def sample_states(self, count: int, generator: torch.Generator) -> torch.Tensor:
        self.draws += 1
        return torch.randint(0, 256, (count, 4, 84, 84), dtype=torch.uint8, generator=generator)


def test_the_watch_measures_at_each_interval_and_remembers_the_publish_before() -> None:
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False))
    replay = StatesOnly()
    watch = SteadinessWatch(learner, replay, interval=30, probe_states=16, publish_every=10, chunk=8, seed=1)
    remembered_at, measured_at = [], []
    for updates in range(10, 100, 10):  # a publish every 10 updates
        before = watch.probe._remembered if watch.probe is not None else None
        if watch.at_publish(updates):
            measured_at.append(updates)
        elif watch.probe is not None and watch.probe._remembered is not before:
            remembered_at.append(updates)
    assert measured_at == [30, 60, 90]
    assert remembered_at == [20, 50, 80]
    assert replay.draws == 3  # fresh states at each publish before a measurement
    assert watch.measurements == 3
    assert watch.figures.churn == 0.0  # the weights did not change between the publishes
    assert watch.figures.agreement <= 1.0 and not math.isnan(watch.figures.q_offset)


def test_the_watch_measures_with_its_batchings_drawn_from_its_own_generator() -> None:
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False))

    def watched() -> SteadinessWatch:
        watch = SteadinessWatch(
            learner, StatesOnly(), interval=20, probe_states=16, publish_every=10, chunk=8, seed=1, batchings=3
        )
        assert watch.at_publish(10) is False and watch.at_publish(20) is True
        return watch

    first, second = watched(), watched()
    assert first.probe is not None and second.probe is not None
    assert first.probe.batchings == 3
    assert all(torch.equal(a, b) for a, b in zip(first.probe.orders, second.probe.orders))  # seeded: repeatable
    assert 0.0 <= first.figures.expected_agreement <= 1.0
    assert 0.0 <= first.figures.train_agreement <= 1.0


def test_each_measurement_uses_the_states_drawn_at_the_publish_before_it() -> None:
    """A probe drawn once drifts out of the replay; the watch draws new states for each
    remember/measure pair and measures on exactly the states it remembered."""
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False))
    watch = SteadinessWatch(learner, StatesOnly(), interval=30, probe_states=16, publish_every=10, chunk=8, seed=1)
    probes_at_remember, probes_at_measure = [], []
    for updates in range(10, 100, 10):
        if watch.at_publish(updates):
            probes_at_measure.append(watch.probe)
        elif watch.probe is not None and (not probes_at_remember or watch.probe is not probes_at_remember[-1]):
            probes_at_remember.append(watch.probe)
    assert len(probes_at_remember) == 3
    assert all(m is r for m, r in zip(probes_at_measure, probes_at_remember, strict=True))
    first, second = (p.obs for p in probes_at_remember[:2])
    assert not torch.equal(first, second)  # new states, not the first set again


def test_measurements_with_no_publish_between_keep_their_states() -> None:
    """An interval no longer than the publish period: every publish measures, and churn
    still compares two consecutive publishes on the same states."""
    torch.manual_seed(0)
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False))
    replay = StatesOnly()
    watch = SteadinessWatch(learner, replay, interval=10, probe_states=16, publish_every=10, chunk=8, seed=1)
    assert not watch.at_publish(10)  # the first publish remembers
    assert all(watch.at_publish(u) for u in range(20, 60, 10))
    assert replay.draws == 1
    assert watch.figures.churn == 0.0  # the same weights, the same states


def test_a_run_measures_at_a_target_copy_at_most_every_min_interval() -> None:
    """By hand, with the floor at 400 updates: the default's copies every 2,000 updates
    are each measured; the tiny preset's every 200 at every 2nd (400); copies every 150
    at every 3rd (450, the first multiple past the floor); every 500, each."""
    assert MIN_INTERVAL_UPDATES == 400
    assert measurement_interval(2000) == 2000
    assert measurement_interval(200) == 400
    assert measurement_interval(150) == 450
    assert measurement_interval(500) == 500
    assert measurement_interval(1) == 400


def test_the_watch_is_off_at_interval_zero() -> None:
    learner = Learner(NUM_ACTIONS, LearnerSettings(compile=False, amp=False))
    watch = SteadinessWatch(learner, StatesOnly(), interval=0, probe_states=16, publish_every=10, chunk=8, seed=1)
    assert not any(watch.at_publish(u) for u in range(10, 200, 10))
    assert all(math.isnan(v) for v in watch.gauges().values())
