"""Driving the Ray backend in the cluster tests as the trainer's loop does: a sink for what
the learner would insert, a backend over the test cluster's two collector nodes, the
loop that polls and checks it, what a node's weights block holds, and the records the
same collectors deliver when they run locally (the reference the node collectors are
held to).

Every wait is bounded by a safety net (SAFETY_S), never by the machine's speed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from pathlib import Path

import numpy as np

from config import Config
from pipeline.cluster.node_link import NodeLink
from pipeline.cluster.ray_backend import RayBackend
from pipeline.transport.segments import PREFIX, attach_segment, project_segments, release
from pipeline.transport.weights import WeightsBlock
from tests.conftest import wait_until
from tests.pipeline import producers as P
from tests.pipeline.cluster.numbered import numbered_collector

SAFETY_S = 300.0


RECORDS = 300  # per stream: a few dozen Catch episodes, greedy and random steps both


@dataclass
class Sink:
    """What the learner would insert into replay, per stream, in arrival order."""

    streams: dict[int, list[np.ndarray]] = field(default_factory=lambda: defaultdict(list))

    def __call__(self, stream: int, records: np.ndarray) -> None:
        self.streams[stream].append(records.copy())

    def records(self, stream: int) -> np.ndarray:
        chunks = self.streams.get(stream, [])
        return np.concatenate(chunks) if chunks else np.zeros(0, P.RECORD_DTYPE)


class Epsilon:
    """The learner's weights block as the backend reads it: only its epsilon."""

    def __init__(self, epsilon: float = 0.5) -> None:
        self.epsilon = epsilon


def make_backend(tmp_path: Path, records_per_ring: int, *, capacity: int = 64) -> tuple[RayBackend, Sink]:
    cfg = Config(
        env_id="Catch-v0",
        num_processes=1,
        envs_per_collector=2,
        ring_capacity=capacity,
        total_frames=records_per_ring,
        heartbeat_timeout_s=60.0,
    )
    backend = RayBackend(cfg, target=numbered_collector)
    assert backend.prepare(cfg) == 2  # two nodes x one collector
    sink = Sink()
    backend.open(run_tag="raytest", num_floats=16, log_dir=tmp_path, weights=Epsilon(), insert=sink)
    return backend, sink


def drive(backend: RayBackend, done, budget=lambda: None, timeout_s: float = SAFETY_S) -> None:
    """Run the backend as the trainer's loop does (poll with a budget, check twice a second) until ``done()``."""

    async def main() -> None:
        backend.start_all()
        last_check = 0.0
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"safety net: the cluster made no progress: {describe(backend)}"
            consumed = backend.poll(budget())
            if time.monotonic() - last_check >= 0.5:
                backend.check()
                last_check = time.monotonic()
            await asyncio.sleep(0 if consumed else 0.001)

    asyncio.run(main())


def describe(backend: RayBackend) -> str:
    """Each place's state, calls in flight and ledger, for a failure message."""
    return "; ".join(
        f"place {link.position}: {link.state}, {len(link.inflight)} pulls in flight, {link.buffered()} buffered, "
        f"ledger {link.ledger.as_dict() if link.ledger else None}"
        for link in backend.links
    )


def tag_of(backend: RayBackend, ledger) -> str:
    return f"{backend.run_tag}n{ledger.node_id[:8]}i{ledger.incarnation:012x}"


def check_stream(records: np.ndarray, producer: int, first_seq: int = 0) -> None:
    P.check_records(producer, first_seq, records)


def node_weights(backend: RayBackend, link: NodeLink) -> tuple[int, np.ndarray]:
    """The weights block of the node at ``link`` as its collectors see it (read from /dev/shm here)."""
    name = next(
        n
        for n in project_segments()
        if n.startswith(f"{PREFIX}{tag_of(backend, link.ledger)}_") and n.endswith("_weights")
    )
    segment = attach_segment(name)
    resource_tracker.unregister(segment._name, "shared_memory")  # the agent owns it, not this process
    block = WeightsBlock(segment.buf)
    try:
        out = np.zeros(block.num_floats, np.float32)
        return block.read(out), out
    finally:
        block.close()
        release(segment, unlink=False)


def local_records(cfg: Config, flat: np.ndarray, epsilon: float, tmp_path: Path) -> list[np.ndarray]:
    """The first RECORDS records of each stream of ``cfg.num_processes`` local collectors
    acting with ``flat`` at ``epsilon``, read by the local backend's consolidator."""
    from pipeline.run.collector.args import CollectorArgs
    from pipeline.run.collector.supervisor import Supervisor
    from pipeline.run.trainer.consolidator import Consolidator
    from pipeline.transport import ring as R
    from pipeline.transport.segments import create_segment, segment_name
    from pipeline.transport.weights import block_bytes

    k = cfg.envs_per_collector
    layout = R.RingLayout(num_slots=cfg.num_processes * k, capacity=cfg.ring_capacity)
    tag = P.new_tag("rayeqlocal")
    ring_segment = create_segment(segment_name(tag, "ring"), layout.total_bytes)
    weights_segment = create_segment(segment_name(tag, "weights"), block_bytes(len(flat)))
    ring = R.TransitionRing.initialise(ring_segment.buf, layout)
    weights = WeightsBlock.initialise(weights_segment.buf, len(flat))
    weights.publish(flat, epsilon=epsilon)

    def make_args(index: int) -> CollectorArgs:
        return CollectorArgs(
            slot=index,
            config=cfg,
            ring_name=ring_segment.name,
            weights_name=weights_segment.name,
            parent_pid=os.getpid(),
            log_path=str(tmp_path / f"local-collector-{index}.log"),
            slots=tuple(range(index * k, (index + 1) * k)),
        )

    supervisor = Supervisor([ring.slots[c * k] for c in range(cfg.num_processes)], make_args, heartbeat_timeout_s=60)
    sink = Sink()
    consolidator = Consolidator(ring, sink)
    try:
        supervisor.start_all()

        def enough() -> bool:
            consolidator.poll()
            supervisor.check()
            return bool(consolidator.records.min() >= RECORDS)

        wait_until(enough, SAFETY_S, "the local collectors' records", poll_s=0.01)
        return [sink.records(stream)[:RECORDS] for stream in range(layout.num_slots)]
    finally:
        weights.request_stop()
        supervisor.stop(timeout_s=20)
        supervisor.slots = []  # no view into the ring may outlive it
        consolidator.ring = None
        ring.close()
        weights.close()
        release(ring_segment, unlink=True)
        release(weights_segment, unlink=True)
