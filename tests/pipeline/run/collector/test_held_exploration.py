"""A real collector with ez-greedy (``explore_hold_steps`` > 1) takes exactly the held random
actions a replica of its generator draws, and starts every episode free of the last hold.

The collector (one Catch env, epsilon 1, so every action is exploration) writes its records
into real shared memory. Its generator is seeded from the run's seed, its number and its
start count (``pipeline.common.seeds.stream_seed``), and nothing else draws from it here, so
the test replays the same draws in its own :class:`HeldExploration`, ending the hold where
a FINAL record says an episode ended, and must find every recorded action.
"""

from __future__ import annotations

import time

import numpy as np

from config import Config
from envs import num_actions
from pipeline.common.seeds import stream_seed
from pipeline.learning.exploration import HeldExploration
from pipeline.learning.policy import network_of
from pipeline.transport.records import FLAG_FINAL
from tests.pipeline import producers as P
from tests.pipeline.run.collector.one_collector import one_collector

TAG = P.new_tag("held")
RECORDS = 600  # enough for dozens of holds and several Catch episodes


def test_the_collector_takes_the_held_actions_its_seed_draws(tmp_path) -> None:
    cfg = Config(env_id="Catch-v0", reward_scale=1.0, envs_per_collector=1, ring_capacity=256, seed=5)
    cfg.explore_hold_steps = 8
    actions_count = num_actions(cfg.env_id, cfg.action_set)
    net = network_of(cfg, actions_count).eval()
    chunks: list[np.ndarray] = []
    with one_collector(cfg, net, tag=TAG, log_path=str(tmp_path / "collector.log"), epsilon=1.0) as (
        ring,
        weights,
        supervisor,
    ):

        def drain() -> None:  # no view into the ring may outlive the context
            slot = ring.slots[0]
            count, views = slot.transitions.peek(None)
            chunks.extend(view.copy() for view in views)
            del views
            slot.transitions.release(count)
            slot.episodes.release(slot.episodes.peek(None)[0])

        supervisor.start_all()
        deadline = time.monotonic() + 180  # safety net only: importing torch on a loaded machine
        while sum(len(c) for c in chunks) < RECORDS:
            assert time.monotonic() < deadline, "the collector wrote too few records"
            drain()
            supervisor.check()
            time.sleep(0.02)
        assert supervisor.restarts == 0, supervisor.events
    records = np.concatenate(chunks)

    replica = HeldExploration(
        np.random.default_rng(stream_seed(cfg.seed, 0, 1)), 1, actions_count, cfg.explore_hold_steps
    )
    episode_ended = False
    expected: list[int] = []
    for record in records:
        if record["flags"] & FLAG_FINAL:
            episode_ended = True  # the FINAL record carries the last frame, no action
            continue
        if episode_ended:
            replica.end(0)
            episode_ended = False
        actions, greedy = replica.choose(1.0)
        assert not greedy[0]
        expected.append(int(actions[0]))
    recorded = [int(r["action"]) for r in records if not r["flags"] & FLAG_FINAL]
    assert recorded == expected
    assert (records["flags"] & FLAG_FINAL).sum() >= 3  # holds were cut by episode ends
    # Held actions show as runs: with uniform one-step draws over 3 actions, a run goes on
    # with probability 1/3; here most steps repeat the one before.
    repeats = np.mean(np.diff(np.asarray(recorded)) == 0)
    assert repeats > 0.5
