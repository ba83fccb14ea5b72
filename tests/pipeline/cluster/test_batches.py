"""What a pull carries and how the learner counts it: pure numpy, no Ray needed."""

from __future__ import annotations

import numpy as np

from pipeline.cluster.batches import IncarnationLedger, MirrorRing, take_records
from pipeline.transport import ring as R
from pipeline.transport.records import RECORD_DTYPE
from tests.pipeline import producers as P

TAG = P.new_tag("batches")


def write(slot: R.Slot, producer: int, count: int) -> None:
    transitions = slot.transitions
    seq = slot.counters.write_seq
    for record in P.expected_records(producer, np.arange(seq, seq + count)):
        cell = transitions.next_cell()
        for name in ("frame", "reward", "action", "flags"):
            cell[name] = record[name]
        transitions.commit()


def test_a_pull_is_one_contiguous_array_with_the_ranges_it_covers_across_a_wrap():
    layout = R.RingLayout(num_slots=2, capacity=8, episode_cells=4)
    with P.ring_segment(TAG, layout) as (_, ring):
        write(ring.slots[0], 10, 6)
        data, ranges = take_records(ring.slots, limit=None)
        assert ranges.tolist() == [[0, 0, 6]]
        write(ring.slots[0], 10, 7)  # wraps around the end of the 8-cell ring
        write(ring.slots[1], 11, 5)
        data, ranges = take_records(ring.slots, limit=10, first=1)  # slot 1 first, then what is left
        assert data.dtype == np.uint8 and data.flags.c_contiguous
        assert ranges.tolist() == [[1, 0, 5], [0, 6, 5]]
        records = data.view(RECORD_DTYPE)
        P.check_records(11, 0, records[:5])
        P.check_records(10, 6, records[5:])
        assert ring.slots[0].counters.read_seq == 11 and ring.slots[0].transitions.pending() == 2
        data, ranges = take_records(ring.slots, limit=0)
        assert len(data) == 0 and ranges.shape == (0, 3)


def test_the_ledger_inserts_each_record_once_and_counts_gaps_duplicates_and_the_lost_tail():
    ledger = IncarnationLedger(7, "node", rings=2)
    assert ledger.accept(np.array([[0, 0, 5], [1, 0, 3]])) == [(0, 0, 5), (1, 5, 3)]
    # ring 0 resumes at 8: 3 records lost in flight; ring 1 repeats 2 records it already had
    assert ledger.accept(np.array([[0, 8, 2], [1, 1, 4]])) == [(0, 0, 2), (1, 4, 2)]
    assert ledger.gap_lost.tolist() == [3, 0] and ledger.duplicates.tolist() == [0, 2]
    assert ledger.next_seq.tolist() == [10, 5]
    headers = np.zeros((2, 32), np.uint64)
    headers[:, R.WRITE_SEQ] = (12, 9)  # committed on the node, never received
    ledger.observe(headers)
    assert ledger.lost.tolist() == [3, 0]  # the tail counts once the incarnation has ended
    ledger.close("node died")
    assert ledger.lost.tolist() == [5, 4]
    assert ledger.as_dict()["rings"][0] == {
        "committed": 12,
        "received": 10,
        "delivered": 0,
        "lost": 5,
        "duplicates_dropped": 0,
    }


def test_the_mirror_reads_like_local_slots_and_carries_counts_over_a_new_incarnation():
    mirror = MirrorRing(4)
    headers = np.zeros((2, 32), np.uint64)
    headers[:, R.FRAMES] = (100, 200)
    headers[:, R.WRITE_SEQ] = (30, 40)
    mirror.update(2, headers, received=np.array([25, 40]))
    counters = mirror.slots[2].counters
    assert (counters.frames, counters.write_seq, counters.read_seq, counters.pending) == (100, 30, 25, 5)
    mirror.rebase(2, 2)  # the node's agent restarted: its counters start again at zero
    headers[:, R.FRAMES] = (7, 8)
    headers[:, R.WRITE_SEQ] = (3, 0)
    mirror.update(2, headers, received=np.array([1, 0]))
    assert (counters.frames, counters.write_seq, counters.read_seq) == (107, 33, 31)
    assert mirror.slots[3].counters.frames == 208 and mirror.slots[0].counters.frames == 0


def test_an_older_status_reply_never_steps_the_mirror_back():
    mirror = MirrorRing(2)
    newer = np.zeros((2, 32), np.uint64)
    newer[:, R.FRAMES] = (400, 500)
    newer[:, R.WRITE_SEQ] = (100, 120)
    newer[:, R.WEIGHTS_VERSION] = (7, 7)
    mirror.update(0, newer, received=np.array([100, 120]))
    # A status reply read on the node before that pull arrives after it: ring 0 is stale,
    # ring 1 has moved on since.
    older = np.zeros((2, 32), np.uint64)
    older[:, R.FRAMES] = (360, 520)
    older[:, R.WRITE_SEQ] = (90, 125)
    older[:, R.WEIGHTS_VERSION] = (6, 8)
    mirror.update(0, older, received=np.array([100, 120]))
    stale, moved = (slot.counters for slot in mirror.slots)
    assert (stale.frames, stale.write_seq, stale.read_seq, stale.weights_version) == (400, 100, 100, 7)
    assert (moved.frames, moved.write_seq, moved.read_seq, moved.weights_version) == (520, 125, 120, 8)
