"""The lock-free transition ring: one shared-memory block, one SPSC ring per collector.

Layout of the block::

    [block header 64 B: magic, layout version, num_slots, capacity, episode cells]
    slot 0: [producer lines 128 B][consumer line 64 B][pad 64 B][capacity records]
            [episode producer 128 B][episode consumer 64 B][pad 64 B][episode cells]
    slot 1: ...

Each slot holds two single-producer single-consumer rings with the same protocol: the
transition records (:mod:`pipeline.transport.records`) and the msgpack episode summaries
(:mod:`pipeline.transport.episodes`). The producer is one collector process, the consumer the
learner's consolidator.

The producer lines of the slot header also hold the producer's counters (frames, steps,
episodes, heartbeat, PID, weights version, per-phase nanoseconds...), which the learner
reads without any message passing. The word indices below are the layout; code
outside this module should read and write them by name, through :class:`SlotCounters`
(``slot.counters``).

Protocol (the invariants the tests hold):

1. The producer writes the record at ``write_seq % capacity``, then (and only then)
   stores ``write_seq + 1``.
2. It never overwrites an unread record: while ``write_seq - read_seq == capacity`` it
   sleeps (0.2 ms, growing to 2 ms while it stays full) and counts the time as stall. Nothing is dropped.
3. The consumer reads ``write_seq`` once, copies ``[read_seq, write_seq)`` in at most two
   contiguous slices, then stores the new ``read_seq``.
4. A producer that dies mid-write never advanced ``write_seq``: the half-written record
   is never read, and a restarted producer overwrites it and carries on in the slot.

Memory ordering: sequence numbers are aligned 8-byte words, and an aligned 8-byte store
or load is atomic on x86-64. x86-64 (TSO) never reorders a store with an earlier store
nor a load with an earlier load, so a consumer that sees ``write_seq = n`` also sees the
record bytes written before it, and a producer that sees ``read_seq = m`` knows the
consumer's copies of records below ``m`` are complete. Each numpy operation is a
separate C call, so the compiler cannot reorder them either. On a weakly ordered CPU
(ARM) these stores would need explicit release/acquire fences.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, get_args, overload

import numpy as np

from pipeline.transport.records import RECORD_DTYPE

MAGIC = 0x4D4152494F52494E  # "MARIORIN"
LAYOUT_VERSION = 1
BLOCK_HEADER_BYTES = 64
SLOT_HEADER_BYTES = 256  # producer lines (128) + consumer line (64) + pad (64)
CONSUMER_OFFSET = 128

# Producer-side header words (u64 index into the slot header).
WRITE_SEQ = 0
FRAMES = 1  # emulator frames stepped
STEPS = 2  # agent steps taken
EPISODES = 3
HEARTBEAT_NS = 4  # time.monotonic_ns() of the producer's latest sign of life
WEIGHTS_VERSION = 5  # version of the published weights the producer acts with
PID = 6
STARTS = 7  # how many times a producer started on this slot
EMULATE_NS = 8
PREPROCESS_NS = 9
INFER_NS = 10
WRITE_NS = 11
STALL_NS = 12
ENV_ERRORS = 13  # environment exceptions caught and recovered from
STATE = 14  # see STATE_* below
REPLAYED_FRAMES = 15  # emulator frames replayed to reach restart points (not recorded)
# Consumer-side word (own cache line).
READ_SEQ = CONSUMER_OFFSET // 8

# Where a collector's time goes; each phase has a nanosecond counter in the slot header.
# emulate: env stepping and resets minus preprocessing; preprocess: the observation
# wrappers; infer: the acting forward pass; write: ring and episode writes; stall: waiting
# on a full ring. Plain strings (not an Enum) so they stay plain in CSV, JSON and pickles.
CollectorPhase = Literal["emulate", "preprocess", "infer", "write", "stall"]
COLLECTOR_PHASES: Final[tuple[CollectorPhase, ...]] = get_args(CollectorPhase)
PHASE_WORDS: Final[Mapping[CollectorPhase, int]] = MappingProxyType(
    dict(zip(COLLECTOR_PHASES, (EMULATE_NS, PREPROCESS_NS, INFER_NS, WRITE_NS, STALL_NS), strict=True))
)

STATE_EMPTY, STATE_STARTING, STATE_RUNNING, STATE_STOPPED, STATE_FAILED = range(5)

EPISODE_CELL_BYTES = 256
EPISODE_CELL_DTYPE = np.dtype([("length", "<u2"), ("data", np.uint8, (EPISODE_CELL_BYTES - 2,))])
EPISODE_CELLS = 64

# A producer on a full ring sleeps STALL_SLEEP_MIN_S first and twice as long after each
# check that still finds it full, up to STALL_SLEEP_MAX_S. A stall that ends at once is
# noticed within 0.2 ms; one that lasts (the replay ratio holding the collectors back while
# the learner updates, 30-80 % of a collector's time on a 2-core box) costs a few hundred
# wake-ups a second instead of thousands, each taking CPU the learner could use. Side by
# side, two producers held back alike by one consumer (2 records every 75 ms, an update's
# time) delivered the same records; polling every 0.2 ms took 9.6 % of a core, this
# backoff 1.8 % (2-core AMD EPYC Zen 3). When a stalled producer's consumer frees a cell, it
# still has the ring's other capacity - 1 records to read while the producer wakes up.
STALL_SLEEP_MIN_S = 0.0002
STALL_SLEEP_MAX_S = 0.002
STALL_REPORT_NS = 10_000_000  # a stall's time and heartbeat are stored every 10 ms


class RingStopped(Exception):
    """Raised to a producer waiting on a full ring when it was asked to stop."""


class _Word:
    """One u64 header word as an ``int`` attribute of :class:`SlotCounters`.

    A get is one load and a set one store of the aligned word, exactly what indexing the
    header does, so the protocol's atomicity and ordering (above) are unchanged.
    """

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    @overload
    def __get__(self, counters: None, owner: type | None = None) -> _Word: ...
    @overload
    def __get__(self, counters: SlotCounters, owner: type | None = None) -> int: ...
    def __get__(self, counters: SlotCounters | None, owner: type | None = None) -> int | _Word:
        return self if counters is None else int(counters.words[self.index])

    def __set__(self, counters: SlotCounters, value: int) -> None:
        counters.words[self.index] = value


class _ReadOnlyWord(_Word):
    """A word the view only reads: the sequence numbers, which :class:`SpscRing` alone moves."""

    __slots__ = ()

    def __set__(self, counters: SlotCounters, value: int) -> None:
        raise AttributeError(f"header word {self.index} is moved by SpscRing only")


class SlotCounters:
    """The producer's counters in a slot header, by name: a typed view over its u64 words.

    ``slot.counters`` views the live shared memory (the collector stores through it, the
    supervisor reads it); :meth:`snapshot` is a private copy of the whole header, taken with
    one read of each word, for readers that want figures from one instant (the monitor).
    Accessing a field allocates nothing beyond the int it returns.
    """

    __slots__ = ("words",)

    write_seq = _ReadOnlyWord(WRITE_SEQ)
    read_seq = _ReadOnlyWord(READ_SEQ)
    frames = _Word(FRAMES)  # emulator frames stepped
    steps = _Word(STEPS)  # agent steps taken
    episodes = _Word(EPISODES)  # episodes finished
    heartbeat_ns = _Word(HEARTBEAT_NS)  # time.monotonic_ns() of the producer's latest sign of life
    weights_version = _Word(WEIGHTS_VERSION)  # version of the published weights it acts with
    pid = _Word(PID)
    starts = _Word(STARTS)  # producer starts on this slot (a restart adds one)
    env_errors = _Word(ENV_ERRORS)  # environment exceptions caught and recovered from
    state = _Word(STATE)  # one of STATE_*
    replayed_frames = _Word(REPLAYED_FRAMES)  # frames stepped to return to restart points

    def __init__(self, words: np.ndarray) -> None:
        self.words = words  # the slot header's u64 words (or a copy of them)

    @property
    def pending(self) -> int:
        """Records committed and not yet consumed."""
        return self.write_seq - self.read_seq

    def beat(self) -> None:
        """Store a heartbeat: the producer is alive (the supervisor kills a silent one)."""
        self.words[HEARTBEAT_NS] = time.monotonic_ns()

    def phase_ns(self, phase: CollectorPhase) -> int:
        return int(self.words[PHASE_WORDS[phase]])

    def set_phase_ns(self, phase: CollectorPhase, ns: int) -> None:
        self.words[PHASE_WORDS[phase]] = ns

    def add_phase_ns(self, phase: CollectorPhase, ns: int) -> None:
        word = PHASE_WORDS[phase]
        self.words[word] = int(self.words[word]) + ns

    def phases_ns(self) -> dict[CollectorPhase, int]:
        """Every phase's nanoseconds, in :data:`COLLECTOR_PHASES` order."""
        return {phase: int(self.words[word]) for phase, word in PHASE_WORDS.items()}

    def snapshot(self) -> SlotCounters:
        """A view over a private copy of the header (one read of each word)."""
        return SlotCounters(self.words.copy())


class SpscRing:
    """One single-producer single-consumer ring of fixed-size cells over shared memory.

    ``header`` is the ring's u64 header view (write_seq at WRITE_SEQ, read_seq at
    READ_SEQ); ``cells`` is a structured numpy view of ``capacity`` cells.
    """

    def __init__(self, header: np.ndarray, cells: np.ndarray, stats: SlotCounters | None = None) -> None:
        self.header = header
        self.cells = cells
        self.capacity = len(cells)
        # Where stall time and heartbeats go: the slot's counters, also for the episode ring.
        self.stats = SlotCounters(header) if stats is None else stats

    # -- producer ---------------------------------------------------------------------
    def wait_for_space(self, should_stop: Callable[[], bool] | None = None) -> int:
        """Block (sleeps growing from 0.2 to 2 ms) until a cell is free; return the stall time in ns.

        Back-pressure is normal operation (the replay ratio holds the consumer back), so a
        stalled producer keeps beating its heartbeat, and its stall time is counted as it
        goes (every 10 ms), not only when it ends: a stall of minutes shows in the monitor
        while it lasts, and never looks like a hang.
        """
        header = self.header
        if int(header[WRITE_SEQ]) - int(header[READ_SEQ]) < self.capacity:
            return 0
        start = counted = time.monotonic_ns()
        delay = STALL_SLEEP_MIN_S
        try:
            while int(header[WRITE_SEQ]) - int(header[READ_SEQ]) >= self.capacity:
                time.sleep(delay)
                delay = min(2.0 * delay, STALL_SLEEP_MAX_S)
                now = time.monotonic_ns()
                if now - counted >= STALL_REPORT_NS:
                    self.stats.add_phase_ns("stall", now - counted)
                    counted = now
                    self.stats.beat()  # stalled, not hung
                    if should_stop is not None and should_stop():
                        raise RingStopped
        finally:
            now = time.monotonic_ns()
            self.stats.add_phase_ns("stall", now - counted)
            self.stats.beat()
        return now - start

    def next_cell(self) -> np.void:
        """The cell the producer fills next (call wait_for_space first)."""
        return self.cells[int(self.header[WRITE_SEQ]) % self.capacity]

    def commit(self) -> None:
        """Publish the filled cell: the one store that makes it visible."""
        self.header[WRITE_SEQ] = int(self.header[WRITE_SEQ]) + 1

    # -- consumer ---------------------------------------------------------------------
    def pending(self) -> int:
        return int(self.header[WRITE_SEQ]) - int(self.header[READ_SEQ])

    def peek(self, limit: int | None = None) -> tuple[int, list[np.ndarray]]:
        """Unread cells as at most two contiguous views, oldest first, and their count.

        Reads ``write_seq`` once. The views stay valid until :meth:`release` is called
        with the count; copy them before that.
        """
        write_seq = int(self.header[WRITE_SEQ])
        read_seq = int(self.header[READ_SEQ])
        count = write_seq - read_seq
        if limit is not None:
            count = min(count, limit)
        if count <= 0:
            return 0, []
        start = read_seq % self.capacity
        first = min(count, self.capacity - start)
        views = [self.cells[start : start + first]]
        if count > first:
            views.append(self.cells[: count - first])
        return count, views

    def release(self, count: int) -> None:
        """Hand ``count`` consumed cells back to the producer."""
        self.header[READ_SEQ] = int(self.header[READ_SEQ]) + count


@dataclass(frozen=True)
class RingLayout:
    num_slots: int
    capacity: int
    episode_cells: int = EPISODE_CELLS

    @property
    def transitions_bytes(self) -> int:
        return self.capacity * RECORD_DTYPE.itemsize

    @property
    def episodes_bytes(self) -> int:
        return self.episode_cells * EPISODE_CELL_BYTES

    @property
    def slot_bytes(self) -> int:
        return 2 * SLOT_HEADER_BYTES + self.transitions_bytes + self.episodes_bytes

    @property
    def total_bytes(self) -> int:
        return BLOCK_HEADER_BYTES + self.num_slots * self.slot_bytes


class Slot:
    """The two rings and the counters of one collector's slot."""

    def __init__(self, buf: memoryview, layout: RingLayout, index: int) -> None:
        base = BLOCK_HEADER_BYTES + index * layout.slot_bytes
        self.index = index
        self.header = np.frombuffer(buf, np.uint64, SLOT_HEADER_BYTES // 8, base)
        self.counters = SlotCounters(self.header)
        self.transitions = SpscRing(
            self.header,
            np.frombuffer(buf, RECORD_DTYPE, layout.capacity, base + SLOT_HEADER_BYTES),
            stats=self.counters,
        )
        episode_base = base + SLOT_HEADER_BYTES + layout.transitions_bytes
        self.episode_header = np.frombuffer(buf, np.uint64, SLOT_HEADER_BYTES // 8, episode_base)
        self.episodes = SpscRing(
            self.episode_header,
            np.frombuffer(buf, EPISODE_CELL_DTYPE, layout.episode_cells, episode_base + SLOT_HEADER_BYTES),
            stats=self.counters,
        )


class TransitionRing:
    """Views over one ring block: ``num_slots`` slots of ``capacity`` records each."""

    def __init__(self, buf: memoryview, layout: RingLayout) -> None:
        self.layout = layout
        self.block_header = np.frombuffer(buf, np.uint64, 8, 0)
        self.slots = [Slot(buf, layout, i) for i in range(layout.num_slots)]

    @classmethod
    def initialise(cls, buf: memoryview, layout: RingLayout) -> TransitionRing:
        """Write the block header into fresh (zeroed) shared memory."""
        header = np.frombuffer(buf, np.uint64, 8, 0)
        header[1:5] = (LAYOUT_VERSION, layout.num_slots, layout.capacity, layout.episode_cells)
        header[0] = MAGIC  # last: a reader that sees the magic sees the layout
        return cls(buf, layout)

    @classmethod
    def from_buffer(cls, buf: memoryview) -> TransitionRing:
        """Attach to an initialised block, reading its layout from the header."""
        header = np.frombuffer(buf, np.uint64, 8, 0)
        if int(header[0]) != MAGIC or int(header[1]) != LAYOUT_VERSION:
            raise ValueError("shared memory block is not an initialised transition ring")
        layout = RingLayout(int(header[2]), int(header[3]), int(header[4]))
        too_big = layout.total_bytes > memoryview(buf).nbytes
        if min(layout.num_slots, layout.capacity, layout.episode_cells) < 1 or too_big:
            raise ValueError(f"transition ring header describes {layout}, which does not fit the block")
        return cls(buf, layout)

    def close(self) -> None:
        """Drop every numpy view so the segment can be closed."""
        self.slots = []
        self.block_header = None  # type: ignore[assignment]
