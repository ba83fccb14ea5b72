"""The consolidator: an asyncio task in the learner that drains every ring slot.

It polls each slot's ``write_seq`` without locks, copies new records into the replay
memory in at most two vectorized slices per slot, then hands the cells back by storing
``read_seq``. Episode summaries are decoded (bad ones counted and skipped) and kept in
a bounded window for the monitor.

It never blocks the event loop for long: one pass touches each slot once and takes at
most ``max_records_per_slot`` records from it, then yields. The longest gap between two
passes is reported, so a training step that hogs the loop shows up in the monitor.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from pipeline.transport.episodes import EpisodeSummary, receive
from pipeline.transport.ring import TransitionRing


class RecordSink(Protocol):
    def add(self, stream: int, records: np.ndarray) -> None: ...


class Consolidator:
    def __init__(
        self,
        ring: TransitionRing,
        sink: RecordSink | Callable[[int, np.ndarray], None],
        *,
        max_records_per_slot: int = 4096,
        episode_window: int = 1000,
    ) -> None:
        self.ring = ring
        self._add = sink if callable(sink) and not hasattr(sink, "add") else sink.add  # type: ignore[union-attr]
        self.max_records_per_slot = max_records_per_slot
        self.records = np.zeros(ring.layout.num_slots, np.int64)  # consumed per slot
        self.episodes: deque[EpisodeSummary] = deque(maxlen=episode_window)
        self.episodes_total = 0
        self.bad_episode_records = 0
        self.polls = 0
        self.max_gap_s = 0.0  # longest time between two passes since the last reset_gap()
        self._last_poll = time.perf_counter()

    @property
    def total_records(self) -> int:
        return int(self.records.sum())

    def poll(self, budget: int | None = None) -> int:
        """One pass over all slots, taking at most ``budget`` records in all; returns records consumed.

        With a budget the pass starts one slot further on each time, so a small budget is
        shared by every slot over successive passes instead of always going to the first.
        """
        now = time.perf_counter()
        self.max_gap_s = max(self.max_gap_s, now - self._last_poll)
        self._last_poll = now
        self.polls += 1
        consumed = 0
        slots = self.ring.slots
        first = self.polls % len(slots)
        for index in (*range(first, len(slots)), *range(first)):
            slot = slots[index]
            ring = slot.transitions
            limit = self.max_records_per_slot
            if budget is not None:
                left = max(0, budget - consumed)
                limit = left if limit is None else min(limit, left)
            count, views = ring.peek(limit) if limit != 0 else (0, [])
            if count:
                for view in views:
                    self._add(index, view)
                ring.release(count)
                self.records[index] += count
                consumed += count
            if slot.episodes.pending():
                summaries, bad = receive(slot.episodes)
                self.episodes.extend(summaries)
                self.episodes_total += len(summaries)
                self.bad_episode_records += bad
        return consumed

    def reset_gap(self) -> float:
        gap, self.max_gap_s = self.max_gap_s, 0.0
        return gap

    async def run(self, stop: asyncio.Event, idle_sleep_s: float = 0.001) -> None:
        """Poll until ``stop`` is set; sleep briefly only when every slot was empty."""
        self._last_poll = time.perf_counter()
        while not stop.is_set():
            consumed = self.poll()
            await asyncio.sleep(0 if consumed else idle_sleep_s)
        # Take everything committed before the stop, not just one pass's share of it.
        limit, self.max_records_per_slot = self.max_records_per_slot, None
        try:
            self.poll()
        finally:
            self.max_records_per_slot = limit
