"""The lock-free transition ring under real processes and real shared memory.

Producers are ``spawn`` processes writing through SpscRing.wait_for_space / next_cell /
commit exactly like a collector; the test process is the consumer. Every record's full
content is a function of (producer, seq) (see tests.pipeline.producers), so the consumer
checks every byte it receives.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time

import numpy as np
import pytest

from pipeline.run.trainer.consolidator import Consolidator
from pipeline.transport import ring as R
from pipeline.transport.records import RECORD_BYTES, RECORD_DTYPE
from pipeline.transport.segments import create_segment, release, segment_name
from tests.conftest import wait_until
from tests.pipeline import producers as P

TAG = P.new_tag("ring")
CTX = mp.get_context("spawn")


class CheckingSink:
    """Consolidator sink: copies each batch, checks every byte, tracks the next seq."""

    def __init__(self, num_streams: int) -> None:
        self.next_seq = [0] * num_streams
        self.batches = 0

    def add(self, stream: int, records: np.ndarray) -> None:
        recs = records.copy()  # the views are only valid until release()
        P.check_records(stream, self.next_seq[stream], recs)
        self.next_seq[stream] += len(recs)
        self.batches += 1


# ------------------------------------------------------------------------ exactly once
@pytest.mark.timeout(600)
def test_exactly_once_in_order_with_slow_consumer_and_wraparound():
    producers, per_producer, capacity = 3, 20_000, 64
    layout = R.RingLayout(num_slots=producers, capacity=capacity, episode_cells=8)
    with P.ring_segment(TAG, layout) as (segment, ring):
        procs = [
            CTX.Process(target=P.ring_producer, args=(segment.name, i, i, per_producer, "fields"))
            for i in range(producers)
        ]
        try:
            for p in procs:
                p.start()
            # Let every ring fill up before consuming anything: each producer then has to
            # wait for space, so a stall must be counted (and nothing may be lost).
            wait_until(lambda: all(s.transitions.pending() >= capacity for s in ring.slots), 300, "full rings")
            sink = CheckingSink(producers)
            consolidator = Consolidator(ring, sink, max_records_per_slot=16)
            deadline = time.monotonic() + 100
            polls = 0
            while consolidator.total_records < producers * per_producer:
                assert time.monotonic() < deadline, f"stuck at {consolidator.records.tolist()}"
                consolidator.poll()
                polls += 1
                if polls % 4 == 0:
                    time.sleep(0.0005)  # a deliberately slow consumer
            for p in procs:
                p.join(30)
                assert p.exitcode == 0
            # Nothing more arrives after the producers are done, and nothing is pending.
            assert consolidator.poll() == 0
            assert sink.next_seq == [per_producer] * producers
            assert consolidator.records.tolist() == [per_producer] * producers
            for slot in ring.slots:
                counters = slot.counters
                assert counters.write_seq == counters.read_seq == per_producer
                assert counters.phase_ns("stall") > 0, "a producer facing a full ring must count stall time"
                assert counters.starts == 1
            # Hundreds of wraparounds really happened.
            assert per_producer // capacity >= 300
            # The views into the ring (the consolidator's, the sink's, the last slot's
            # counters) go before the segment is closed: one alive then makes
            # SharedMemory's own close at collection raise.
            del consolidator, sink, slot, counters
        finally:
            P.kill_all(procs)


def test_peek_release_direct_two_slices_at_wraparound():
    """peek() returns the unread cells oldest first, split in two at the end of the ring."""
    layout = R.RingLayout(num_slots=1, capacity=8, episode_cells=4)
    with P.ring_segment(TAG, layout) as (_, ring):
        _peek_release(ring)


def _peek_release(ring):  # a function of its own, so no view outlives the segment
    t = ring.slots[0].transitions
    recs = P.expected_records(0, np.arange(20))
    seq = 0
    consumed = 0

    def write(n):
        nonlocal seq
        for _ in range(n):
            assert t.wait_for_space() == 0
            t.next_cell()["frame"] = recs[seq]["frame"]
            t.next_cell()["reward"] = recs[seq]["reward"]
            t.next_cell()["action"] = recs[seq]["action"]
            t.next_cell()["flags"] = recs[seq]["flags"]
            t.commit()
            seq += 1

    write(6)
    count, views = t.peek(limit=4)
    assert count == 4 and len(views) == 1
    P.check_records(0, 0, np.concatenate(views))
    t.release(count)
    consumed += count
    write(6)  # cells 6, 7 then 0..3: the unread range wraps
    assert t.pending() == 8
    count, views = t.peek()
    assert count == 8 and [len(v) for v in views] == [4, 4]
    got = np.concatenate([v.copy() for v in views])
    P.check_records(0, consumed, got)
    t.release(count)
    assert t.pending() == 0 and t.peek() == (0, [])


# ------------------------------------------------------------------------ SIGKILL mid-write
def _mid_write(ring: R.TransitionRing, slot: int) -> bool:
    """Did the producer start writing the record it never committed?"""
    t = ring.slots[slot].transitions
    write_seq = ring.slots[slot].counters.write_seq
    cell = t.cells[write_seq % t.capacity : write_seq % t.capacity + 1]
    return int(P.record_seqs(cell)[0]) == write_seq


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode,work", [("halves", 3000), ("content_then_commit", 3000)])
def test_sigkill_mid_write_never_exposes_a_partial_record(mode, work):
    """A producer SIGKILLed at random moments, restarted on the same slot each time."""
    layout = R.RingLayout(num_slots=1, capacity=32, episode_cells=4)
    with P.ring_segment(TAG, layout) as (segment, ring):
        _kill_and_restart(segment, ring, mode, work)


def _kill_and_restart(segment, ring, mode, work):
    tail = 500
    # Kills land at random moments; on one shared core about 1 in 20 lands inside a write
    # (content_then_commit: 3 of 56 with taskset -c 0), so the loop goes on, up to
    # max_kills, until wanted_mid_write of them have (15 kills missed them all once).
    min_kills, max_kills, wanted_mid_write = 5, 200, 3
    rng = random.Random(mode)
    slot = ring.slots[0]
    sink = CheckingSink(1)
    consolidator = Consolidator(ring, sink, max_records_per_slot=8)
    procs = []
    kills = mid_write_kills = 0
    try:
        while True:
            last = kills >= max_kills or (kills >= min_kills and mid_write_kills >= wanted_mid_write)
            start_seq = slot.counters.write_seq
            # A restarted producer continues from the slot's write_seq.
            total = start_seq + tail if last else 10**9
            proc = CTX.Process(target=P.ring_producer, args=(segment.name, 0, 0, total, mode, work))
            procs.append(proc)
            proc.start()
            wait_until(lambda p=proc: slot.counters.pid == p.pid, 300, "producer start", 0.001)
            if last:
                break
            kill_at = time.monotonic() + rng.uniform(0.02, 0.25)
            while time.monotonic() < kill_at:
                consolidator.poll()  # keep up, so the producer is mostly writing, not stalled
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(10)
            assert proc.exitcode == -signal.SIGKILL
            kills += 1
            mid_write_kills += _mid_write(ring, 0)
        deadline = time.monotonic() + 60
        while procs[-1].exitcode is None or slot.transitions.pending():
            assert time.monotonic() < deadline, "the last producer did not finish"
            consolidator.poll()
        assert procs[-1].exitcode == 0
        final_total = slot.counters.write_seq
        assert consolidator.poll() == 0
        # Contiguous from 0 with no gap or duplicate, and every byte as written
        # (CheckingSink checked each record's content and sequence number).
        assert sink.next_seq == [final_total] and consolidator.total_records == final_total
        assert final_total >= tail
        assert slot.counters.starts == kills + 1
        # The test exercised what it claims: some kills hit a record being written.
        assert mid_write_kills >= 1, f"none of {kills} kills landed inside a write"
        print(f"{mode}: {kills} kills, {mid_write_kills} inside a write, {final_total} records")
    finally:
        P.kill_all(procs)


# ------------------------------------------------------------------------ layout
def _addr(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_layout_alignment_and_cache_lines():
    # capacity 5 makes slot_bytes not a multiple of 64: alignment must not depend on it.
    layout = R.RingLayout(num_slots=3, capacity=5, episode_cells=7)
    assert RECORD_BYTES % 8 == 0 and RECORD_DTYPE.fields["reward"][1] % 4 == 0
    with P.ring_segment(TAG, layout) as (segment, ring):
        _check_layout(layout, segment, ring)


def _check_layout(layout, segment, ring):
    assert layout.total_bytes <= segment.size
    base = _addr(np.frombuffer(segment.buf, np.uint8))
    spans = []
    for slot in ring.slots:
        header = _addr(slot.header)
        write_addr = header + 8 * R.WRITE_SEQ
        read_addr = header + 8 * R.READ_SEQ
        assert write_addr % 8 == 0 and read_addr % 8 == 0
        assert write_addr // 64 != read_addr // 64, "read_seq shares a cache line with write_seq"
        # Every producer word lives before the consumer line.
        assert max(R.WRITE_SEQ, R.STATE, R.STALL_NS) * 8 + 8 <= R.CONSUMER_OFFSET
        cells = slot.transitions.cells
        assert cells.strides == (RECORD_BYTES,) and len(cells) == layout.capacity
        for i in range(layout.capacity):
            assert (_addr(cells) + i * RECORD_BYTES) % 8 == 0
        assert _addr(cells) >= header + R.SLOT_HEADER_BYTES
        ep_header = _addr(slot.episode_header)
        assert ep_header >= _addr(cells) + layout.transitions_bytes
        assert (ep_header + 8 * R.WRITE_SEQ) // 64 != (ep_header + 8 * R.READ_SEQ) // 64
        ep_cells = slot.episodes.cells
        assert len(ep_cells) == layout.episode_cells and _addr(ep_cells) % 8 == 0
        spans.append((header - base, _addr(ep_cells) + ep_cells.nbytes - base))
    # Slots follow each other without overlap and inside the block.
    assert spans[0][0] == R.BLOCK_HEADER_BYTES
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start
    assert spans[-1][1] <= layout.total_bytes
    # Writes through one slot never show up in another.
    ring.slots[1].header[R.WRITE_SEQ] = 7
    ring.slots[1].transitions.cells[:]["frame"] = 255
    ring.slots[1].episodes.cells[:]["length"] = 0xFFFF
    for index in (0, 2):
        assert ring.slots[index].counters.write_seq == 0
        assert not ring.slots[index].transitions.cells["frame"].any()
        assert not ring.slots[index].episodes.cells["length"].any()


def test_from_buffer_reads_the_layout_back():
    layout = R.RingLayout(num_slots=2, capacity=9, episode_cells=5)
    with P.ring_segment(TAG, layout) as (segment, ring):
        _check_from_buffer(layout, segment, ring)


def _check_from_buffer(layout, segment, ring):
    other = R.TransitionRing.from_buffer(segment.buf)
    try:
        assert other.layout == layout
        assert len(other.slots) == 2
        ring.slots[1].header[R.WRITE_SEQ] = 3
        ring.slots[1].transitions.cells[2]["reward"] = 1.5
        assert other.slots[1].transitions.pending() == 3
        assert other.slots[1].transitions.cells[2]["reward"] == np.float32(1.5)
    finally:
        other.close()


def test_from_buffer_rejects_garbage():
    layout = R.RingLayout(num_slots=2, capacity=4, episode_cells=4)
    name = segment_name(TAG, "garbage")
    segment = create_segment(name, layout.total_bytes)
    try:
        words = np.frombuffer(segment.buf, np.uint64, 8, 0)
        # Zeroed memory (never initialised).
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(segment.buf)
        # Random bytes.
        rng = np.random.default_rng(5)
        np.frombuffer(segment.buf, np.uint8)[:] = rng.integers(0, 256, segment.size, np.uint8)
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(segment.buf)
        # The right magic with an unknown layout version.
        words[:5] = (R.MAGIC, R.LAYOUT_VERSION + 1, 2, 4, 4)
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(segment.buf)
        # The right magic and version, but a layout that does not fit the buffer.
        words[:5] = (R.MAGIC, R.LAYOUT_VERSION, 2, 10_000, 4)
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(segment.buf)
        words[:5] = (R.MAGIC, R.LAYOUT_VERSION, 2, 2**63 + 5, 4)
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(segment.buf)
        # A buffer too small to hold even the block header.
        with pytest.raises(ValueError):
            R.TransitionRing.from_buffer(memoryview(bytearray(16)))
        words = None
    finally:
        release(segment, unlink=True)
