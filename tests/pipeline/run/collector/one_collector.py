"""One real, supervised collector process over fresh shared memory, for the collector tests.

:func:`one_collector` creates a ring with a slot per env of the collector and a weights
block holding a network at a given epsilon, builds the supervisor of one collector (its
home slot the ring's first), and unlinks everything on the way out, whatever happened.
The test starts the supervisor itself, when it is ready to drain the rings.
:func:`collect_random` runs such a collector at epsilon 1 until the test has the episodes
it needs, and returns what it wrote.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

from config import Config
from envs import num_actions
from pipeline.learning.flat_state import flatten_state, state_numel
from pipeline.learning.policy import network_of
from pipeline.run.collector import supervisor as S
from pipeline.run.collector.args import CollectorArgs
from pipeline.transport import episodes as episode_channel
from pipeline.transport import ring as R
from pipeline.transport import weights as W
from pipeline.transport.segments import create_segment, release, segment_name


@contextmanager
def one_collector(
    cfg: Config,
    net: torch.nn.Module,
    *,
    tag: str,
    log_path: str,
    epsilon: float,
    heartbeat_timeout_s: float = 60.0,
    episode_cells: int = 16,
    frontier_path: str = "",
    start_trajectory: str = "",
) -> Iterator[tuple[R.TransitionRing, W.WeightsBlock, S.Supervisor]]:
    """Yield ``(ring, weights, supervisor)`` for one collector stepping ``cfg.envs_per_collector`` envs."""
    layout = R.RingLayout(num_slots=cfg.envs_per_collector, capacity=cfg.ring_capacity, episode_cells=episode_cells)
    numel = state_numel(net.state_dict())
    ring_segment = create_segment(segment_name(tag, "ring"), layout.total_bytes)
    weights_segment = create_segment(segment_name(tag, "weights"), W.block_bytes(numel))
    ring = R.TransitionRing.initialise(ring_segment.buf, layout)
    weights = W.WeightsBlock.initialise(weights_segment.buf, numel)
    weights.publish(flatten_state(net.state_dict()), epsilon=epsilon)

    def make_args(index: int) -> CollectorArgs:
        return CollectorArgs(
            slot=0,
            config=cfg,
            ring_name=ring_segment.name,
            weights_name=weights_segment.name,
            parent_pid=os.getpid(),
            log_path=log_path,
            slots=tuple(range(cfg.envs_per_collector)),
            frontier_path=frontier_path,
            start_trajectory=start_trajectory,
        )

    supervisor = S.Supervisor(ring.slots[:1], make_args, heartbeat_timeout_s=heartbeat_timeout_s)
    try:
        yield ring, weights, supervisor
    finally:
        weights.request_stop()  # a collector waiting on a full ring sees it and leaves its wait
        supervisor.stop(timeout_s=20)
        supervisor.slots = []  # no view into the ring may outlive it
        ring.close()
        weights.close()
        release(ring_segment, unlink=True)
        release(weights_segment, unlink=True)


def collect_random(
    cfg: Config,
    *,
    tag: str,
    log_path: str,
    enough: Callable[[list[episode_channel.EpisodeSummary]], bool],
    frontier_path: str = "",
    start_trajectory: str = "",
) -> tuple[np.ndarray, list[episode_channel.EpisodeSummary], int]:
    """One collector acting at random (epsilon 1: varied trajectories) until ``enough`` of
    its finished episodes' summaries; its records, those summaries (and those of the
    episodes it finished while stopping) and its home slot's replayed frames."""
    net = network_of(cfg, num_actions(cfg.env_id, cfg.action_set)).eval()
    chunks: list[np.ndarray] = []
    summaries: list[episode_channel.EpisodeSummary] = []
    with one_collector(
        cfg,
        net,
        tag=tag,
        log_path=log_path,
        epsilon=1.0,
        heartbeat_timeout_s=120.0,
        frontier_path=frontier_path,
        start_trajectory=start_trajectory,
    ) as (ring, weights, supervisor):

        def drain() -> None:
            slot = ring.slots[0]
            count, views = slot.transitions.peek(None)
            chunks.extend(view.copy() for view in views)
            del views
            slot.transitions.release(count)
            summaries.extend(episode_channel.receive(slot.episodes)[0])

        supervisor.start_all()
        deadline = time.monotonic() + 900  # safety net only: a loaded machine is slow
        while not enough(summaries):
            assert time.monotonic() < deadline, f"{len(summaries)} episodes, not enough yet"
            drain()
            supervisor.check()
            time.sleep(0.02)
        weights.request_stop()
        supervisor.stop(timeout_s=20)
        drain()  # what it finished before it stopped: only the episode it was in is unknown
        replayed_frames = ring.slots[0].counters.replayed_frames
    return np.concatenate(chunks), summaries, replayed_frames
