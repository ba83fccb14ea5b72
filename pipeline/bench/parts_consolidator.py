"""Throughput benchmark of the consolidator: how many records/s the learner side absorbs.

``producers`` spawn processes flood their ring slots with full-size records (a pre-built
record array; one record copy + commit per record, i.e. a collector's write without an
environment). The test process runs the real :class:`~pipeline.run.trainer.consolidator.Consolidator`
``run()`` coroutine into a real :class:`pipeline.learning.replay.ReplayMemory` on the CPU and
counts what it consumed during ``seconds`` after a 1 s warm-up.

Run::

    python -m pipeline.bench.parts_consolidator [seconds] [producers] [capacity]
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: make `pipeline` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from pipeline.common.child import process_context
from pipeline.transport import ring as R
from pipeline.transport.records import FRAME_SHAPE, RECORD_BYTES, RECORD_DTYPE
from pipeline.transport.segments import attach_segment, create_segment, release, segment_name

WARMUP_S = 1.0
PREBUILT_RECORDS = 64
STOP_CHECK_RECORDS = 4096
SINK_RECORDS_PER_STREAM = 8192


# ------------------------------------------------------------------------ producers
def flood_producer(ring_name: str, slot: int, stop, seed: int) -> None:
    """Spawn target: write pre-built records into ``slot`` as fast as the ring allows."""
    segment = attach_segment(ring_name)
    ring = R.TransitionRing.from_buffer(segment.buf)
    try:
        _flood(ring.slots[slot], stop, seed)
    finally:
        ring.close()
        release(segment, unlink=False)


def _flood(slot: R.Slot, stop, seed: int) -> None:
    rng = np.random.default_rng(seed)
    records = np.zeros(PREBUILT_RECORDS, RECORD_DTYPE)
    records["frame"] = rng.integers(0, 256, (PREBUILT_RECORDS, *FRAME_SHAPE), np.uint8)
    records["reward"] = rng.standard_normal(PREBUILT_RECORDS).astype(np.float32)
    records["action"] = rng.integers(0, 12, PREBUILT_RECORDS)
    counters = slot.counters
    counters.pid = os.getpid()
    transitions = slot.transitions
    cells = transitions.cells
    capacity = transitions.capacity
    wait_for_space, commit = transitions.wait_for_space, transitions.commit
    should_stop = stop.is_set
    written = 0
    try:
        while True:
            wait_for_space(should_stop)
            cells[counters.write_seq % capacity] = records[written % PREBUILT_RECORDS]
            commit()
            written += 1
            if written % STOP_CHECK_RECORDS == 0:
                counters.beat()
                if should_stop():
                    return
    except R.RingStopped:
        return


# ------------------------------------------------------------------------ sinks
def make_sink(streams: int):
    """The real CPU ReplayMemory the consolidator drains into, and its name."""
    from pipeline.learning.replay import ReplayMemory

    return ReplayMemory(streams * SINK_RECORDS_PER_STREAM, streams, device="cpu"), "replay"


# ------------------------------------------------------------------------ benchmark
def bench_consolidator(seconds: float = 5.0, producers: int = 2, capacity: int = 1024) -> dict:
    """Records/s and MB/s the consolidator absorbs from ``producers`` flooding producers."""
    from pipeline.run.trainer.consolidator import Consolidator

    layout = R.RingLayout(num_slots=producers, capacity=capacity)
    tag = f"bench{uuid.uuid4().hex[:8]}"
    segment = create_segment(segment_name(tag, "ring"), layout.total_bytes)
    ctx = process_context()
    stop = ctx.Event()
    procs = [ctx.Process(target=flood_producer, args=(segment.name, i, stop, i), daemon=True) for i in range(producers)]
    ring = None
    try:
        ring = R.TransitionRing.initialise(segment.buf, layout)
        sink, sink_name = make_sink(producers)
        consolidator = Consolidator(ring, sink)
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while any(slot.counters.pid == 0 for slot in ring.slots):  # children are up
            if time.monotonic() > deadline or any(p.exitcode is not None for p in procs):
                raise RuntimeError("benchmark producers did not start")
            time.sleep(0.01)
        result = asyncio.run(_measure(consolidator, ring, seconds))
        sink_records = int(sink.inserted)
        if sink_records != consolidator.total_records:
            raise RuntimeError(f"sink holds {sink_records} records, consolidator consumed {consolidator.total_records}")
    finally:
        stop.set()
        for p in procs:
            if p.pid is None:  # never started
                continue
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
        if ring is not None:
            ring.close()
        release(segment, unlink=True)
    records = result["records"]
    elapsed = result["elapsed_s"]
    return {
        "records_per_s": records / elapsed,
        "mb_per_s": records * RECORD_BYTES / elapsed / 1e6,
        "producers": producers,
        "sink": sink_name,
        "stall_pct": 100.0 * result["stall_ns"] / (elapsed * 1e9 * producers),
        "capacity": capacity,
        "seconds": elapsed,
        "records": records,
        "sink_records": sink_records,
        "polls": result["polls"],
        "max_gap_ms": 1e3 * result["max_gap_s"],
    }


async def _measure(consolidator, ring: R.TransitionRing, seconds: float) -> dict:
    stop = asyncio.Event()
    task = asyncio.create_task(consolidator.run(stop))

    def snapshot():
        return (
            time.perf_counter(),
            consolidator.total_records,
            consolidator.polls,
            sum(slot.counters.phase_ns("stall") for slot in ring.slots),
        )

    try:
        await asyncio.sleep(WARMUP_S)
        consolidator.reset_gap()
        t0, r0, p0, s0 = snapshot()
        await asyncio.sleep(seconds)
        t1, r1, p1, s1 = snapshot()
        max_gap = consolidator.reset_gap()
    finally:
        stop.set()
        await task
    return {"records": r1 - r0, "elapsed_s": t1 - t0, "polls": p1 - p0, "stall_ns": s1 - s0, "max_gap_s": max_gap}


def main(argv: list[str]) -> None:
    # Import by module name, so spawn children find the producer as
    # pipeline.bench.parts_consolidator.flood_producer even when this file runs as __main__.
    from pipeline.bench.parts_consolidator import bench_consolidator as bench

    kwargs = {}
    for name, value in zip(("seconds", "producers", "capacity"), argv):
        kwargs[name] = float(value) if name == "seconds" else int(value)
    print(bench(**kwargs))


if __name__ == "__main__":
    main(sys.argv[1:])
