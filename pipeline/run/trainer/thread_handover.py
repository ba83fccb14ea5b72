"""The learner's intra-op threads, handed over between it and the collectors as either waits.

A run's cores are shared by two kinds of work: the collectors' emulation and the
learner's updates, held together by the replay ratio. Whichever is slower makes the other
wait, and a fixed split leaves the waiting side's cores idle: with one learner thread on
2 cores, when the collectors wait for a full ring (the learner is the bottleneck), the
second core is idle for as long as they wait. So the split moves:

- the collectors **stall** (they wait for the learner) for at least :data:`STALL_UP` of
  their time and the learner does not wait for data: the learner takes one more thread,
  up to ``most``;
- the learner **waits** for data (the collectors are the bottleneck) for at least
  :data:`WAIT_DOWN` of its time: it gives one back, down to ``least``;
- the thread it took makes it **slower**: its updates/s at the higher count stay below
  :data:`RATE_KEEP` of what the count below gave, for :data:`SLOW_TICKS` ticks in a row.
  It gives the thread back and does not take it again for :data:`HOLD_FIRST` ticks, twice
  as long after each further proof, up to :data:`HOLD_MOST`. Neither share sees this: two
  learner-bound runs on one 2-core box each took a second thread at the same priority,
  and each update's parallel regions then waited on a thread the other run held (36-42
  updates/s fell to 1.6-2.0, the collectors starved without stalling).

The collectors run below the learner's CPU priority (:mod:`pipeline.common.priority`),
so a learner thread takes a core only while the learner has work; without that the extra
thread would wait on the collectors at every parallel region (two threads beside two busy
processes of the same priority took 230-970 ms an update against one thread's 40-48 ms).

:class:`ThreadHandover` decides from the shares and the rate; :class:`HandoverWatch`
computes them from the run's snapshot counters (nanoseconds of collector stall and learner
wait, updates) between two monitor ticks and applies the decision with
``torch.set_num_threads``. One step per tick (5 s by default) keeps it from chasing noise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.common.cores import learner_thread_range
from pipeline.run.monitor.keys import collector_phase_key, learner_phase_key

__all__ = [
    "HOLD_FIRST",
    "HOLD_MOST",
    "RATE_KEEP",
    "SLOW_TICKS",
    "STALL_UP",
    "WAIT_DOWN",
    "HandoverWatch",
    "ThreadHandover",
]

logger = logging.getLogger("mario.trainer")  # the learner process's log

# The collectors' mean share of wall time waiting for the learner at which it takes a
# thread more: a tenth of the collectors' cores idle is worth a learner thread.
STALL_UP = 0.10
# The learner's share of wall time waiting for data at which it gives a thread back.
WAIT_DOWN = 0.10
# The share of the lower count's updates/s a higher count must keep. Ticks of one run
# vary by about 15 % (a publish, a checkpoint); the failure it catches costs 95 %.
RATE_KEEP = 0.8
# Ticks in a row below RATE_KEEP before the thread goes back: one slow tick is a checkpoint
# or a save, not a slower count.
SLOW_TICKS = 2
# Ticks (5 s each by default) before a thread given back for being slower is taken again,
# doubled after each further proof, up to HOLD_MOST: a minute, then at most ten.
HOLD_FIRST = 12
HOLD_MOST = 120


@dataclass
class ThreadHandover:
    """The learner's thread count between ``least`` and ``most``, one step per decision."""

    least: int
    most: int
    threads: int = 0  # 0: start at the least
    # The updates/s of the last interval at each count: what a higher count must keep.
    rate_at: dict[int, float] = field(default_factory=dict)
    slow_ticks: int = 0  # decisions in a row with the count slower than the one below
    hold: int = 0  # decisions left before a stall may take a thread again
    next_hold: int = HOLD_FIRST
    kept_ticks: int = 0  # decisions out of hold since a thread was last taken or proved slower

    def __post_init__(self) -> None:
        if not 1 <= self.least <= self.most:
            raise ValueError(f"need 1 <= least <= most, got least={self.least}, most={self.most}")
        self.threads = self.threads or self.least

    def decide(self, stall_share: float, wait_share: float, updates_per_s: float) -> int:
        """The thread count for the next interval, from the last one's shares of wall time
        (the collectors' mean stall and the learner's wait, 0..1) and its updates/s."""
        count = self.threads
        self.rate_at[count] = updates_per_s
        held = self.hold > 0
        if held:
            self.hold -= 1
        else:
            self.kept_ticks += 1
            if self.kept_ticks >= HOLD_FIRST:
                self.next_hold = HOLD_FIRST  # no thread proved slower for a while: start over
        below = self.rate_at.get(count - 1)
        slower = count > self.least and below is not None and updates_per_s < RATE_KEEP * below
        self.slow_ticks = self.slow_ticks + 1 if slower else 0
        if wait_share >= WAIT_DOWN:
            self.threads = max(self.least, count - 1)
        elif self.slow_ticks >= SLOW_TICKS:
            self.threads = count - 1
            self.kept_ticks = 0
            self.hold, self.next_hold = self.next_hold, min(HOLD_MOST, 2 * self.next_hold)
            logger.info(
                "learner threads %d -> %d: %.1f updates/s at %d against %.1f at %d, held back %d ticks",
                count,
                count - 1,
                updates_per_s,
                count,
                below,
                count - 1,
                self.hold,
            )
        elif stall_share >= STALL_UP and not held and count < self.most:
            self.threads = count + 1
            self.kept_ticks = 0
        if self.threads != count:
            self.slow_ticks = 0  # a new count starts its own record
        return self.threads


class HandoverWatch:
    """Feeds a :class:`ThreadHandover` the shares between two snapshots and applies its choice.

    Args:
        handover: the decision.
        collectors: collector processes (the stall counter sums over their slots, each
            collector's stalls landing on its home slot).
        set_threads: applies a thread count (``torch.set_num_threads`` in a run).
    """

    def __init__(self, handover: ThreadHandover, collectors: int, set_threads: Callable[[int], None]) -> None:
        self.handover = handover
        self.collectors = max(1, collectors)
        self.set_threads = set_threads
        self._last: tuple[float, float, float, float] | None = None  # time_s, stall ns, wait ns, updates
        self.changes = 0

    @classmethod
    def for_run(cls, cfg: Any, collectors: int) -> HandoverWatch | None:
        """The watch of a run's learner (``torch.set_num_threads``), or None when its thread
        range is one count."""
        import torch

        least, most = learner_thread_range(cfg.learner_threads, cfg.learner_threads_max, cfg.num_processes)
        if most == least:
            return None
        return cls(ThreadHandover(least, most), collectors, torch.set_num_threads)

    def observe(self, time_s: float, counters: Mapping[str, float]) -> int:
        """Read one snapshot (monotonic seconds and its counters); the thread count now."""
        stall = counters.get(collector_phase_key("stall"), 0.0)
        wait = counters.get(learner_phase_key("wait"), 0.0)
        updates = counters.get("updates", 0.0)
        last, self._last = self._last, (time_s, stall, wait, updates)
        if last is None or time_s <= last[0]:
            return self.handover.threads
        wall_ns = (time_s - last[0]) * 1e9
        stall_share = (stall - last[1]) / (wall_ns * self.collectors)
        wait_share = (wait - last[2]) / wall_ns
        updates_per_s = (updates - last[3]) / (time_s - last[0])
        before = self.handover.threads
        threads = self.handover.decide(stall_share, wait_share, updates_per_s)
        if threads != before:
            self.set_threads(threads)
            self.changes += 1
            logger.debug(
                "learner threads %d -> %d (collector stall %.0f %%, learner wait %.0f %%)",
                before,
                threads,
                100 * stall_share,
                100 * wait_share,
            )
        return threads
