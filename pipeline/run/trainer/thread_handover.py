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
  :data:`WAIT_DOWN` of its time: it gives one back, down to ``least``.

The collectors run below the learner's CPU priority (:mod:`pipeline.common.priority`),
so a learner thread takes a core only while the learner has work; without that the extra
thread would wait on the collectors at every parallel region (two threads beside two busy
processes of the same priority took 230-970 ms an update against one thread's 40-48 ms).

:class:`ThreadHandover` decides from the shares; :class:`HandoverWatch` computes them from
the run's snapshot counters (nanoseconds of collector stall and learner wait) between two
monitor ticks and applies the decision with ``torch.set_num_threads``. One step per tick
(5 s by default) keeps it from chasing noise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.common.cores import learner_thread_range
from pipeline.run.monitor.keys import collector_phase_key, learner_phase_key

__all__ = ["STALL_UP", "WAIT_DOWN", "HandoverWatch", "ThreadHandover"]

logger = logging.getLogger(__name__)

# The collectors' mean share of wall time waiting for the learner at which it takes a
# thread more: a tenth of the collectors' cores idle is worth a learner thread.
STALL_UP = 0.10
# The learner's share of wall time waiting for data at which it gives a thread back.
WAIT_DOWN = 0.10


@dataclass
class ThreadHandover:
    """The learner's thread count between ``least`` and ``most``, one step per decision."""

    least: int
    most: int
    threads: int = 0  # 0: start at the least

    def __post_init__(self) -> None:
        if not 1 <= self.least <= self.most:
            raise ValueError(f"need 1 <= least <= most, got least={self.least}, most={self.most}")
        self.threads = self.threads or self.least

    def decide(self, stall_share: float, wait_share: float) -> int:
        """The thread count for the next interval, from the last one's shares of wall time:
        the collectors' mean stall and the learner's wait (0..1)."""
        if wait_share >= WAIT_DOWN:
            self.threads = max(self.least, self.threads - 1)
        elif stall_share >= STALL_UP:
            self.threads = min(self.most, self.threads + 1)
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
        self._last: tuple[float, float, float] | None = None  # time_s, stall ns, wait ns
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
        last, self._last = self._last, (time_s, stall, wait)
        if last is None or time_s <= last[0]:
            return self.handover.threads
        wall_ns = (time_s - last[0]) * 1e9
        stall_share = (stall - last[1]) / (wall_ns * self.collectors)
        wait_share = (wait - last[2]) / wall_ns
        before = self.handover.threads
        threads = self.handover.decide(stall_share, wait_share)
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
