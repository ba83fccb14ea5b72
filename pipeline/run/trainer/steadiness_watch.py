"""When the trainer measures the learner's steadiness, and what the monitor shows of it.

:class:`SteadinessWatch` runs the :class:`~pipeline.learning.steadiness.SteadinessProbe`
on the weights the trainer is about to publish, at the first publish at or after every
target copy (``target_sync_updates``), but no more often than every
``MIN_INTERVAL_UPDATES`` (every k-th copy then), and has the probe remember the greedy actions of
the publish just before it, so the churn it reports is the change between two consecutive
publishes (what a collector sees when it picks up new weights).

The probe's states are drawn afresh at that publish before each measurement, uniformly
from the replay, with a generator of the watch's own (the training batches are the same
with the probe on or off), and the measurement uses the same states. A set drawn once
would drift out of the replay as the agent gets further into the level: normalised in
chunks of states the learner no longer trains on, its train-mode forward is no longer
what the loss shaped, and agreement falls with the set's age while the network does not
change (docs/learning-history.md, "A probe drawn once grows stale"). Only when no publish comes
between two measurements (an interval no longer than the publish period) does a
measurement reuse the previous one's states, so that churn still compares two
consecutive publishes.

A measurement is a draw of ``PROBE_STATES`` states and 2 + ``BATCHINGS`` float32
forwards of them (one at the publish before, an eval-mode one and a train-mode one per
batching at the measurement): about two seconds on one core of a 2-core box for 1,024
states and 4 batchings every 2,000 updates, under the learner's ``probe`` phase in the
monitor.
Between measurements the gauges keep the last figures (NaN before the first).
"""

from __future__ import annotations

from typing import Any

import torch

from pipeline.learning.learner import Learner
from pipeline.learning.replay import ReplayMemory
from pipeline.learning.steadiness import SteadinessFigures, SteadinessProbe

__all__ = ["MIN_INTERVAL_UPDATES", "SteadinessWatch", "make_steadiness_watch", "measurement_interval"]

# Added to the run's seed for the generator of the probe's states.
_PROBE_SEED_OFFSET = 7_000_000
# Replay states per measurement: the agreement and churn figures are shares of them, so
# 1,024 puts a share's standard error near 1.5 % (at a share of a half), below the
# differences the learning benchmark reads off them, for about two seconds per measurement.
PROBE_STATES = 1024
# Train-mode forwards per measurement, each chunking the states in another order: the first
# gives the agreement, a second train mode's agreement with itself (the ceiling batch noise
# sets), and their mean Q the agreement with what the loss shapes in expectation; 4 is what
# every measurement in docs/learning-history.md used.
BATCHINGS = 4
# A measurement costs about as much as 40 updates of batch 32 (2 + BATCHINGS forwards of
# PROBE_STATES states against an update's ~5 forwards' worth of 32): every 2,000 updates (the
# default's target copies) that is ~2 % of the learner's time. The tiny preset copies its
# target every 200 updates, where a measurement at every copy took 35 % of the learner's
# time in the Catch learning test; at most one per 400 updates keeps it near 9 %, and the
# test's run (~630 updates) still measures once.
MIN_INTERVAL_UPDATES = 400


def measurement_interval(target_sync_updates: int) -> int:
    """Updates between measurements: the smallest multiple of ``target_sync_updates``
    (validated >= 1) that is at least ``MIN_INTERVAL_UPDATES``, so that each measurement
    still comes at a target copy."""
    copies = -(-MIN_INTERVAL_UPDATES // target_sync_updates)  # ceil
    return copies * target_sync_updates


def make_steadiness_watch(learner: Learner, replay: ReplayMemory, cfg: Any) -> SteadinessWatch:
    """The run's watch, from ``cfg`` (the run's :class:`config.Config`)."""
    return SteadinessWatch(
        learner,
        replay,
        # Between two target copies the values move by a whole sync: the cadence to measure at.
        interval=measurement_interval(cfg.target_sync_updates),
        probe_states=PROBE_STATES,
        publish_every=cfg.updates_per_epoch,
        chunk=cfg.batch_size,
        batchings=BATCHINGS,
        seed=cfg.seed + _PROBE_SEED_OFFSET,
    )


class SteadinessWatch:
    """Steadiness figures of the published weights every ``interval`` updates.

    Args:
        learner: the learner whose online network is published.
        replay: where the probe states come from.
        interval: updates between measurements (0 = never).
        probe_states: states in the probe set.
        publish_every: updates between two publishes.
        chunk: the training batch size (states per train-mode forward).
        batchings: train-mode forwards per measurement, each in another order of the states.
        seed: the seed of the probe's own generator.
    """

    def __init__(
        self,
        learner: Learner,
        replay: ReplayMemory,
        *,
        interval: int,
        probe_states: int,
        publish_every: int,
        chunk: int,
        seed: int,
        batchings: int = 1,
    ) -> None:
        self.learner = learner
        self.replay = replay
        self.interval = interval
        self.probe_states = probe_states
        self.publish_every = max(1, publish_every)
        self.chunk = chunk
        self.batchings = batchings
        self.generator = torch.Generator(device=replay.device).manual_seed(seed)
        self.probe: SteadinessProbe | None = None
        self.figures = SteadinessFigures()
        self.measurements = 0
        self._next_due: int | None = None

    def at_publish(self, updates: int) -> bool:
        """Called right before each publish of a training run, with the updates done so
        far; measures or remembers when due. Returns whether it measured."""
        if self.interval <= 0 or updates <= 0:
            return False
        if self._next_due is None:  # the first due point after this run's first update
            self._next_due = (updates // self.interval + 1) * self.interval
        if updates >= self._next_due:
            self.figures = self._probe().measure(self.learner.published_net)
            self.measurements += 1
            self._next_due = (updates // self.interval + 1) * self.interval
            return True
        if updates + self.publish_every >= self._next_due:
            self.probe = self._draw_probe()
            self.probe.remember(self.learner.published_net)
        return False

    def gauges(self) -> dict[str, float]:
        """The monitor's steadiness gauges: the last figures, NaN before the first."""
        return self.figures.gauges()

    def _probe(self) -> SteadinessProbe:
        """The states drawn at the publish before (or the last measurement's, or new ones
        when there are none yet)."""
        if self.probe is None:
            self.probe = self._draw_probe()
        return self.probe

    def _draw_probe(self) -> SteadinessProbe:
        obs = self.replay.sample_states(self.probe_states, self.generator).to(self.learner.device)
        # The further batchings' permutations come from the same generator, so a run's
        # probes are the same on every machine.
        permutation_seed = int(torch.randint(2**62, (1,), generator=self.generator, device=self.generator.device))
        return SteadinessProbe(obs, self.chunk, batchings=self.batchings, seed=permutation_seed)
