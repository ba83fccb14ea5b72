"""The evaluation protocol on the real Catch env: distinct seeds, figures that come out the
same every time, episodes that do not depend on the episode count or order, and an
epsilon stream of its own beside the env's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from config import Config
from models import QNetwork
from pipeline.learning.episode_loop import build_env, single_thread_torch
from pipeline.learning.policy import network_of
from pipeline.run.evaluator.protocol import (
    FIGURE_KEYS,
    EvaluationProtocol,
    episode_seeds,
    epsilon_rng,
    play_protocol,
    protocol_figures,
)

CFG = Config(env_id="Catch-v0")


@pytest.fixture(scope="module")
def net() -> QNetwork:
    torch.manual_seed(3)
    return network_of(CFG, 3).eval()


def play(net: QNetwork, protocol: EvaluationProtocol, **kwargs):
    env = build_env(CFG, seed=0)
    try:
        with single_thread_torch():
            return play_protocol(env, net, protocol, frame_stack=CFG.frame_stack, num_actions=3, **kwargs)
    finally:
        env.close()


def test_seeds_are_distinct_and_named_by_the_key() -> None:
    protocol = EvaluationProtocol(episodes=20, epsilon=0.05, first_seed=5_000_000, max_steps=2000)
    assert protocol.seeds == list(range(5_000_000, 5_000_020)) and len(set(protocol.seeds)) == 20
    assert protocol.key() == "episodes=20,epsilon=0.05,seeds=5000000..5000019,max_steps=2000"
    assert EvaluationProtocol(episodes=20, epsilon=0.1, first_seed=5_000_000, max_steps=2000).key() != protocol.key()
    assert protocol.describe() == "20 episode(s) at epsilon 0.05 (seeds 5000000..5000019)"
    # Sticky actions name another protocol; without them the key is the one entries cached
    # before sticky actions existed carry.
    sticky = EvaluationProtocol(episodes=20, epsilon=0.05, first_seed=5_000_000, max_steps=2000, sticky=0.25)
    assert sticky.key() == protocol.key() + ",sticky=0.25"
    assert sticky.describe() == "20 episode(s) at epsilon 0.05, sticky actions 0.25 (seeds 5000000..5000019)"
    assert EvaluationProtocol(**sticky.to_dict()) == sticky and EvaluationProtocol(**protocol.to_dict()) == protocol
    assert sticky.sticky_actions == 0.25 and protocol.sticky_actions == 0.0  # None: as every run trains
    with pytest.raises(ValueError, match="sticky"):
        EvaluationProtocol(episodes=1, epsilon=0.0, first_seed=0, max_steps=0, sticky=1.0)
    with pytest.raises(ValueError, match="episodes"):
        episode_seeds(0, 0)
    with pytest.raises(ValueError, match="epsilon"):
        EvaluationProtocol(episodes=1, epsilon=1.5, first_seed=0, max_steps=0)


def test_the_epsilon_stream_is_not_the_envs() -> None:
    # gymnasium seeds an env's generator with default_rng(seed)'s stream; the random
    # actions must not replay those draws.
    assert not np.array_equal(epsilon_rng(7).random(8), np.random.default_rng(7).random(8))
    assert np.array_equal(epsilon_rng(7).random(8), epsilon_rng(7).random(8))


def test_episodes_use_distinct_seeds_and_figures_reproduce(net: QNetwork) -> None:
    protocol = EvaluationProtocol(episodes=6, epsilon=0.3, first_seed=100, max_steps=0)
    first = play(net, protocol)
    assert [r.seed for r in first] == protocol.seeds
    assert len({tuple(r.actions) for r in first}) == 6  # six different episodes
    again = play(net, protocol)
    assert [r.actions for r in again] == [r.actions for r in first]
    figures = protocol_figures(first)
    assert list(figures) == list(FIGURE_KEYS) and figures == protocol_figures(again)
    assert figures["episodes"] == 6 and figures["median_x_pos"] == float(np.median([r.x_pos for r in first]))
    # An episode depends on its seed alone: the fourth episode, played on its own.
    (alone,) = play(net, EvaluationProtocol(episodes=1, epsilon=0.3, first_seed=103, max_steps=0))
    assert alone.actions == first[3].actions and alone.ret == first[3].ret


def test_a_stop_request_ends_the_protocol(net: QNetwork) -> None:
    protocol = EvaluationProtocol(episodes=3, epsilon=0.0, first_seed=0, max_steps=0)
    assert play(net, protocol, should_stop=lambda: True) is None
