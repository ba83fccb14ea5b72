"""One real, supervised collector process over fresh shared memory, for the collector tests.

:func:`one_collector` creates a ring with a slot per env of the collector and a weights
block holding a network at a given epsilon, builds the supervisor of one collector (its
home slot the ring's first), and unlinks everything on the way out, whatever happened.
The test starts the supervisor itself, when it is ready to drain the rings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from config import Config
from pipeline.learning.flat_state import flatten_state, state_numel
from pipeline.run.collector import supervisor as S
from pipeline.run.collector.args import CollectorArgs
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
