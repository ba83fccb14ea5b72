"""The previous-action input means the same thing in a real collector, the replay and ``play``.

The network here ignores the picture and picks ``(previous action + 1) % 3`` (action 0
after "none"), so a greedy episode's actions spell out which previous action each step
was given: the collector's records show what it fed its network, and the replay's
``prev_action`` must name the same action for every sampled state, across episode
boundaries and after its rings wrapped; ``play_episode`` (the evaluator, ``eval``,
``play``) must give the same chain.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from config import Config
from pipeline.learning.policy import build_env, network_of, run_episode
from pipeline.learning.replay import ReplayMemory
from pipeline.transport.records import FLAG_FINAL, FLAG_START
from tests.pipeline import producers as P
from tests.pipeline.run.one_collector import one_collector

TAG = P.new_tag("prevaction")
NUM_ACTIONS = 3  # Catch-v0: left, stay, right
NONE = NUM_ACTIONS


def chain_network(cfg: Config) -> torch.nn.Module:
    """A network whose greedy action is (previous + 1) % 3, and 0 after none."""
    net = network_of(cfg, NUM_ACTIONS).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        embedding = net.prev_action.weight  # row p: a unit in hidden feature p; row NONE stays 0
        for prev in range(NUM_ACTIONS):
            embedding[prev, prev] = 1.0
            net.advantage.weight[(prev + 1) % NUM_ACTIONS, prev] = 1.0
    return net


def follows(prev: np.ndarray) -> np.ndarray:
    return np.where(prev == NONE, 0, (prev + 1) % NUM_ACTIONS)


def test_collector_replay_and_play_agree_on_the_previous_action(tmp_path) -> None:
    cfg = Config(
        env_id="Catch-v0", reward_scale=1.0, envs_per_collector=2, ring_capacity=64, seed=5, prev_action_input=True
    )
    net = chain_network(cfg)
    # 48 records per stream: the 400 collected below wrap every ring of the memory many times.
    replay = ReplayMemory(96, 2, frame_stack=4, n_step=3, num_actions=NUM_ACTIONS, seed=0)
    collected: list[list[np.ndarray]] = [[], []]
    # Greedy (epsilon 0): every action is the network's.
    with one_collector(cfg, net, tag=TAG, log_path=str(tmp_path / "collector.log"), epsilon=0.0) as (
        ring,
        _,
        supervisor,
    ):

        def drain() -> None:  # in a function of its own: no view into the ring outlives it
            for stream, slot in enumerate(ring.slots):
                count, views = slot.transitions.peek(None)
                for view in views:
                    records = view.copy()
                    collected[stream].append(records)
                    replay.add(stream, records)
                slot.transitions.release(count)
                slot.episodes.release(slot.episodes.peek(None)[0])

        supervisor.start_all()
        deadline = time.monotonic() + 300  # safety net: importing torch on a loaded machine
        while min(sum(map(len, c)) for c in collected) < 400:
            assert time.monotonic() < deadline, "the collector did not write 400 records per env"
            drain()
            supervisor.check()
            time.sleep(0.02)

    # What the collector fed: each step record's action follows the previous step's action
    # of the same episode, and 0 at a START.
    episodes_seen = 0
    for chunks in collected:
        records = np.concatenate(chunks)
        steps = (records["flags"] & FLAG_FINAL) == 0
        step_records = records[steps]
        starts = (step_records["flags"] & FLAG_START) != 0
        previous = np.concatenate([[NONE], step_records["action"][:-1].astype(np.int64)])
        previous[starts] = NONE
        np.testing.assert_array_equal(step_records["action"], follows(previous))
        episodes_seen += int(starts.sum())
    assert episodes_seen >= 10  # many episode boundaries crossed

    # The replay names the same previous action for every valid sampled state, its rings
    # having wrapped (400 records per stream into 48 slots).
    assert replay.inserted > 2 * replay.capacity_per_stream * 8
    batch = replay.sample(512)
    valid = batch.weight > 0
    assert int(valid.sum()) > 300
    np.testing.assert_array_equal(batch.action[valid].numpy(), follows(batch.prev_action[valid].numpy()))
    assert (batch.prev_action[valid] == NONE).any() and (batch.prev_action[valid] != NONE).any()
    # next_obs's previous action is the transition's last action: the chain gives it too.
    one_step = valid & (batch.discount > 0)
    assert bool(one_step.any())

    # play_episode (evaluator, eval, play) feeds the same chain: 0, 1, 2, 0, 1, ...
    env = build_env(cfg, seed=0)
    try:
        result = run_episode(env, net, frame_stack=cfg.frame_stack, num_actions=NUM_ACTIONS, seed=0)
    finally:
        env.close()
    assert result.actions == [i % NUM_ACTIONS for i in range(result.length)]
