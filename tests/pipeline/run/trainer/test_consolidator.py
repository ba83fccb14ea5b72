"""The consolidator draining real producer processes through the real ring."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time

import numpy as np
import pytest

from pipeline.run.trainer.consolidator import Consolidator
from pipeline.transport import ring as R
from tests.pipeline import producers as P

TAG = P.new_tag("consol")
CTX = mp.get_context("spawn")


class ListSink:
    """A RecordSink (``add`` method) keeping copies of everything, per stream."""

    def __init__(self, streams: int) -> None:
        self.batches: list[list[np.ndarray]] = [[] for _ in range(streams)]

    def add(self, stream: int, records: np.ndarray) -> None:
        self.batches[stream].append(records.copy())

    def stream(self, index: int) -> np.ndarray:
        parts = self.batches[index]
        return np.concatenate(parts) if parts else np.zeros(0, P.expected_records(0, []).dtype)


def _write_in_process(slot: R.Slot, producer: int, seqs) -> None:
    recs = P.expected_records(producer, np.asarray(seqs))
    t = slot.transitions
    for rec in recs:
        assert t.wait_for_space() == 0
        cell = t.next_cell()
        cell["frame"] = rec["frame"]
        cell["reward"] = rec["reward"]
        cell["action"] = rec["action"]
        cell["flags"] = rec["flags"]
        t.commit()


# ------------------------------------------------------------------------ poll
@pytest.mark.timeout(450)
def test_records_and_episodes_from_producer_processes():
    streams, per_stream, episode_every, bad_every = 2, 3000, 100, 4
    episodes_each = per_stream // episode_every
    bad_each = len(range(0, episodes_each, bad_every))
    layout = R.RingLayout(num_slots=streams, capacity=128, episode_cells=8)
    with P.ring_segment(TAG, layout) as (segment, ring):
        sink = ListSink(streams)
        consolidator = Consolidator(ring, sink, max_records_per_slot=48, episode_window=10)
        procs = [
            CTX.Process(target=P.episode_producer, args=(segment.name, i, i, per_stream, episode_every, bad_every))
            for i in range(streams)
        ]
        try:
            for p in procs:
                p.start()
            deadline = time.monotonic() + 60
            while (
                consolidator.total_records < streams * per_stream
                or consolidator.episodes_total + consolidator.bad_episode_records < streams * (episodes_each + bad_each)
            ):
                assert time.monotonic() < deadline, "consolidator did not get everything"
                if consolidator.poll() == 0:
                    time.sleep(0.001)
            for p in procs:
                p.join(30)
                assert p.exitcode == 0
            assert consolidator.poll() == 0
        finally:
            P.kill_all(procs)
    for i in range(streams):
        got = sink.stream(i)
        assert len(got) == per_stream
        P.check_records(i, 0, got)  # all of them, in order, intact
        # The per-slot limit held for every batch handed to the sink.
        assert max(len(b) for b in sink.batches[i]) <= 48
    assert consolidator.records.tolist() == [per_stream] * streams
    assert consolidator.total_records == streams * per_stream
    assert consolidator.episodes_total == streams * episodes_each
    assert consolidator.bad_episode_records == streams * bad_each
    # The window keeps the newest summaries, each decoded field for field.
    assert len(consolidator.episodes) == 10
    for summary in consolidator.episodes:
        assert summary == P.make_summary(summary.collector, summary.weights_version)
    last = [s for s in consolidator.episodes if s.collector == 0]
    assert [s.weights_version for s in last] == sorted(s.weights_version for s in last)
    assert consolidator.polls > 0


def test_callable_sink_and_per_slot_limit():
    layout = R.RingLayout(num_slots=3, capacity=16, episode_cells=4)
    with P.ring_segment(TAG, layout) as (_, ring):
        calls = []

        def sink(stream, records):
            calls.append((stream, records.copy()))

        consolidator = Consolidator(ring, sink, max_records_per_slot=5)
        _write_in_process(ring.slots[0], 0, range(12))
        _write_in_process(ring.slots[2], 2, range(3))
        assert consolidator.poll() == 5 + 3
        assert consolidator.poll() == 5
        assert consolidator.poll() == 2
        assert consolidator.poll() == 0
        assert consolidator.records.tolist() == [12, 0, 3]
        got0 = np.concatenate([r for s, r in calls if s == 0])
        P.check_records(0, 0, got0)
        P.check_records(2, 0, np.concatenate([r for s, r in calls if s == 2]))
        assert all(s != 1 for s, _ in calls)
        assert ring.slots[0].counters.read_seq == 12


def test_max_gap_is_measured_and_reset():
    layout = R.RingLayout(num_slots=1, capacity=4, episode_cells=4)
    with P.ring_segment(TAG, layout) as (_, ring):
        consolidator = Consolidator(ring, lambda stream, records: None)
        consolidator.poll()
        consolidator.reset_gap()
        consolidator.poll()
        time.sleep(0.2)
        consolidator.poll()
        consolidator.poll()
        gap = consolidator.reset_gap()
        assert gap >= 0.2
        assert consolidator.max_gap_s == 0.0


# ------------------------------------------------------------------------ run()
def test_run_drains_everything_committed_before_the_stop():
    """More records are committed than one pass takes; after stop they all arrive."""
    layout = R.RingLayout(num_slots=2, capacity=64, episode_cells=4)
    with P.ring_segment(TAG, layout) as (_, ring):
        sink = ListSink(2)
        consolidator = Consolidator(ring, sink, max_records_per_slot=8)
        _write_in_process(ring.slots[0], 0, range(50))
        _write_in_process(ring.slots[1], 1, range(64))

        async def main():
            stop = asyncio.Event()
            stop.set()  # stop before the first pass: only the final drain runs
            await asyncio.wait_for(consolidator.run(stop), 10)

        asyncio.run(main())
        assert consolidator.records.tolist() == [50, 64]
        P.check_records(0, 0, sink.stream(0))
        P.check_records(1, 0, sink.stream(1))
        assert all(slot.transitions.pending() == 0 for slot in ring.slots)


@pytest.mark.timeout(450)
def test_run_with_live_producers_stops_on_the_event_and_measures_the_gap():
    streams, per_stream = 2, 2500
    layout = R.RingLayout(num_slots=streams, capacity=256, episode_cells=8)
    with P.ring_segment(TAG, layout) as (segment, ring):
        sink = ListSink(streams)
        consolidator = Consolidator(ring, sink, max_records_per_slot=32)
        procs = [
            CTX.Process(target=P.episode_producer, args=(segment.name, i, i, per_stream, 500, 0))
            for i in range(streams)
        ]

        async def main():
            stop = asyncio.Event()
            task = asyncio.create_task(consolidator.run(stop))
            for p in procs:
                p.start()
            await asyncio.sleep(0.05)
            time.sleep(0.3)  # a "training step" hogging the event loop
            while any(p.exitcode is None for p in procs):
                await asyncio.sleep(0.01)
            stop.set()
            await asyncio.wait_for(task, 30)
            assert task.done() and task.exception() is None

        try:
            asyncio.run(main())
            for p in procs:
                p.join(10)
                assert p.exitcode == 0
        finally:
            P.kill_all(procs)
        # Producers finished before the stop, so everything committed was drained.
        assert consolidator.records.tolist() == [per_stream] * streams
        for i in range(streams):
            P.check_records(i, 0, sink.stream(i))
        assert consolidator.episodes_total == streams * (per_stream // 500)
        assert consolidator.bad_episode_records == 0
        assert consolidator.max_gap_s >= 0.3


@pytest.mark.timeout(300)
def test_bench_consolidator_smoke():
    from pipeline.bench.parts_consolidator import bench_consolidator
    from pipeline.transport.records import RECORD_BYTES

    result = bench_consolidator(seconds=0.5, producers=1, capacity=64)
    assert set(result) >= {"records_per_s", "mb_per_s", "producers", "sink", "stall_pct"}
    assert result["records_per_s"] > 0  # records did flow
    # MB/s is the same rate in bytes: a record is RECORD_BYTES (a unit slip breaks this).
    assert result["mb_per_s"] == pytest.approx(result["records_per_s"] * RECORD_BYTES / 1e6)
    assert result["producers"] == 1
    assert result["sink"] == "replay"
    assert 0.0 <= result["stall_pct"] <= 100.0


def test_a_budget_caps_a_pass_and_is_shared_by_every_slot_over_passes():
    layout = R.RingLayout(num_slots=4, capacity=64, episode_cells=4)
    with P.ring_segment(TAG, layout, "budget") as (_, ring):
        for slot in ring.slots:
            for _ in range(40):
                slot.transitions.wait_for_space()
                slot.transitions.commit()
        sink = ListSink(4)
        consolidator = Consolidator(ring, sink)
        assert consolidator.poll(budget=0) == 0
        taken = [consolidator.poll(budget=10) for _ in range(8)]
        assert taken == [10] * 8
        # Rotating starts: every slot got its share, none was left behind.
        assert sorted(consolidator.records.tolist()) == [20, 20, 20, 20]
        assert consolidator.poll() == 4 * 40 - 80  # no budget: everything left
        del slot, consolidator  # no view may outlive the segment
