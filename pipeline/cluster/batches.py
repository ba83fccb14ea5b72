"""What crosses the network between a node agent and the learner, and how the learner counts it.

A pull takes records out of a node's rings into ONE contiguous uint8 array (records back
to back, in ring order, each ring's in sequence order) with the ranges it covers:
``ranges[i] = (ring, first seq, count)``. Ray hands an array of this size to the learner
as a zero-copy view of its object store. The slot headers (every collector counter)
travel with each pull and each status reply, so the learner's monitor, supervisor and
summary read remote rings the way they read local ones (:class:`MirrorRing`).

Exactly-once accounting (:class:`IncarnationLedger`) is kept per ring of one node
incarnation: a range that starts past the next expected seq is a gap (records lost in
flight), one that starts before it overlaps records already received (dropped, never
inserted twice); when an incarnation ends (its agent restarted or its node died),
whatever its rings had committed and the learner never received is counted as lost.

Pure numpy: tested without Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.transport import ring as R
from pipeline.transport.episodes import EpisodeSummary
from pipeline.transport.records import RECORD_DTYPE

HEADER_WORDS = R.SLOT_HEADER_BYTES // 8
# Words that count up over a slot's life: a new incarnation starts them at zero again, so
# the learner's mirror adds what earlier incarnations of the node had counted.
CUMULATIVE_WORDS = (R.FRAMES, R.STEPS, R.EPISODES, R.STARTS, R.ENV_ERRORS, *R.PHASE_WORDS.values())


@dataclass
class PullResult:
    """One pull's records, what they cover, and the node's counters when it was taken."""

    incarnation: int
    data: np.ndarray  # uint8: the records back to back
    ranges: np.ndarray  # int64 [k, 3]: ring, first seq, count, in the order of ``data``
    headers: np.ndarray  # uint64 [rings, HEADER_WORDS]: every slot header (weights versions the learner's)
    episodes: list[EpisodeSummary] = field(default_factory=list)
    bad_episode_records: int = 0

    @property
    def count(self) -> int:
        return int(self.ranges[:, 2].sum()) if len(self.ranges) else 0

    @property
    def records(self) -> np.ndarray:
        return self.data.view(RECORD_DTYPE)


def take_records(slots: list[R.Slot], limit: int | None, first: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Consumer side: move up to ``limit`` committed records out of ``slots`` (starting at
    slot ``first``, round robin) into one contiguous uint8 array; return it and the ranges.

    Each ring is read once (its ``write_seq`` is loaded once by ``peek``) and released only
    after its records are copied, so the ring protocol is the local consolidator's.
    """
    n = len(slots)
    plan: list[tuple[int, int]] = []
    left = limit
    for index in (*range(first % n, n), *range(first % n)):
        if left == 0:
            break
        pending = slots[index].transitions.pending()
        take = pending if left is None else min(pending, left)
        if take > 0:
            plan.append((index, take))
            left = None if left is None else left - take
    out = np.empty(sum(take for _, take in plan), RECORD_DTYPE)
    ranges = np.zeros((len(plan), 3), np.int64)
    position = 0
    for row, (index, take) in enumerate(plan):
        transitions = slots[index].transitions
        first_seq = slots[index].counters.read_seq
        count, views = transitions.peek(take)
        for view in views:
            out[position : position + len(view)] = view
            position += len(view)
        transitions.release(count)
        ranges[row] = (index, first_seq, count)
    return out.view(np.uint8), ranges


class IncarnationLedger:
    """Per-ring delivery accounting of one incarnation of one node's agent."""

    def __init__(self, incarnation: int, node_id: str, rings: int) -> None:
        self.incarnation = incarnation
        self.node_id = node_id
        self.next_seq = np.zeros(rings, np.int64)  # received through (exclusive)
        self.delivered = np.zeros(rings, np.int64)  # inserted into replay
        self.gap_lost = np.zeros(rings, np.int64)  # skipped over by a later range
        self.duplicates = np.zeros(rings, np.int64)  # received twice, dropped
        self.committed = np.zeros(rings, np.int64)  # highest write_seq the node reported
        self.closed = False
        self.end_reason = ""

    def observe(self, headers: np.ndarray) -> None:
        """Note what the node's rings had committed (from a pull's or a status's headers)."""
        if not self.closed:
            np.maximum(self.committed, headers[:, R.WRITE_SEQ].astype(np.int64), out=self.committed)

    def accept(self, ranges: np.ndarray) -> list[tuple[int, int, int]]:
        """The parts of a pull to insert: (ring, first record in the pull, count), in order."""
        chunks = []
        offset = 0
        for ring, start, count in ranges.tolist():
            expected = int(self.next_seq[ring])
            if start > expected:
                self.gap_lost[ring] += start - expected
                expected = start
            skip = min(count, expected - start)
            self.duplicates[ring] += skip
            if count > skip:
                chunks.append((ring, offset + skip, count - skip))
                self.next_seq[ring] = start + count
            offset += count
        np.maximum(self.committed, self.next_seq, out=self.committed)
        return chunks

    def inserted(self, ring: int, count: int) -> None:
        self.delivered[ring] += count

    @property
    def lost(self) -> np.ndarray:
        """Records this incarnation lost: gaps, plus (once closed) what it never handed over."""
        tail = np.maximum(0, self.committed - self.next_seq) if self.closed else 0
        return self.gap_lost + tail

    def close(self, reason: str) -> None:
        self.closed, self.end_reason = True, reason

    def as_dict(self) -> dict[str, Any]:
        lost = self.lost
        return {
            "incarnation": f"{self.incarnation:012x}",
            "node_id": self.node_id,
            "ended": self.end_reason,
            "rings": [
                {
                    "committed": int(self.committed[i]),
                    "received": int(self.next_seq[i]),
                    "delivered": int(self.delivered[i]),
                    "lost": int(lost[i]),
                    "duplicates_dropped": int(self.duplicates[i]),
                }
                for i in range(len(self.next_seq))
            ],
        }


class _MirrorSlot:
    __slots__ = ("counters",)

    def __init__(self, counters: R.SlotCounters) -> None:
        self.counters = counters


class MirrorRing:
    """The learner's copy of every remote slot header, laid out as one local ring's slots.

    ``slots[i].counters`` reads like a local slot's: cumulative counters include earlier
    incarnations of the node, ``write_seq`` counts every record the slot ever committed and
    ``read_seq`` every record the learner received from it.
    """

    def __init__(self, num_slots: int) -> None:
        self.words = np.zeros((num_slots, HEADER_WORDS), np.uint64)
        self.base = np.zeros((num_slots, HEADER_WORDS), np.uint64)
        self.slots = [_MirrorSlot(R.SlotCounters(self.words[i])) for i in range(num_slots)]

    def update(self, first: int, headers: np.ndarray, received: np.ndarray) -> None:
        """Take a node's headers; never step a counter back.

        Headers arrive from pulls and from status replies, and a status reply can be
        older than a pull processed before it (it was read on the node first): its rows
        with a smaller ``write_seq`` than the mirror's are stale and keep the newer words;
        the counting words only ever take the larger value.
        """
        rows = slice(first, first + len(headers))
        words, base = self.words[rows], self.base[rows]
        counted = [*CUMULATIVE_WORDS, R.WRITE_SEQ]
        fresh = headers[:, R.WRITE_SEQ] + base[:, R.WRITE_SEQ] >= words[:, R.WRITE_SEQ]
        previous = words[:, counted]  # a copy (fancy indexing)
        words[fresh] = headers[fresh]
        words[:, counted] = np.maximum(previous, headers[:, counted] + base[:, counted])
        words[:, R.READ_SEQ] = base[:, R.READ_SEQ] + received.astype(np.uint64)

    def rebase(self, first: int, count: int) -> None:
        """A new incarnation takes these slots over: what the old one counted becomes the base."""
        rows = slice(first, first + count)
        self.base[rows] = self.words[rows]
        # What the old incarnation never handed over is lost (its ledger counts it), not pending.
        through = np.maximum(self.words[rows, R.WRITE_SEQ], self.words[rows, R.READ_SEQ])
        self.base[rows, R.WRITE_SEQ] = self.base[rows, R.READ_SEQ] = through

    def close(self) -> None:
        self.slots = []
