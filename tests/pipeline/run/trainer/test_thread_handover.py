"""Tests for pipeline.run.trainer.thread_handover and pipeline.common.cores: a collector stall
gives the learner threads, a learner wait gives them back, one step a tick within the
range, from fake stall figures; a thread that makes the learner slower goes back and is
held off, from fake update counts; and the range the settings give."""

from __future__ import annotations

import logging

import pytest

from pipeline.common.cores import learner_thread_range
from pipeline.run.monitor.keys import collector_phase_key, learner_phase_key
from pipeline.run.trainer.thread_handover import (
    HOLD_FIRST,
    HOLD_MOST,
    RATE_KEEP,
    STALL_UP,
    WAIT_DOWN,
    HandoverWatch,
    ThreadHandover,
)

SECOND_NS = 1e9


def counters(stall_s: float, wait_s: float, updates: float = 0.0) -> dict[str, float]:
    """Snapshot counters: collector stall summed over the slots, the learner's wait, its updates."""
    return {
        collector_phase_key("stall"): stall_s * SECOND_NS,
        learner_phase_key("wait"): wait_s * SECOND_NS,
        "updates": updates,
    }


def test_a_collector_stall_gives_the_learner_threads_and_a_learner_wait_takes_them_back() -> None:
    applied: list[int] = []
    watch = HandoverWatch(ThreadHandover(least=1, most=3), collectors=2, set_threads=applied.append)
    assert watch.observe(0.0, counters(0, 0)) == 1  # the first snapshot only sets the baseline
    # 5 s ticks. Two collectors stalled 2 s each of 5 (40 %), the learner never waits: up.
    assert watch.observe(5.0, counters(4, 0)) == 2
    assert watch.observe(10.0, counters(8, 0)) == 3
    assert watch.observe(15.0, counters(12, 0)) == 3  # at most
    # The learner now waits 1 s of 5 (20 %) for data: down, one a tick, to the least.
    assert watch.observe(20.0, counters(12, 1)) == 2
    assert watch.observe(25.0, counters(12, 2)) == 1
    assert watch.observe(30.0, counters(12, 3)) == 1
    assert applied == [2, 3, 2, 1]  # applied only when it changed
    assert watch.changes == 4


def test_balanced_shares_keep_the_thread_count() -> None:
    handover = ThreadHandover(least=1, most=2, threads=2)
    assert handover.decide(stall_share=STALL_UP * 0.9, wait_share=WAIT_DOWN * 0.9, updates_per_s=30) == 2
    handover = ThreadHandover(least=1, most=2)
    assert handover.decide(stall_share=STALL_UP * 0.9, wait_share=0.0, updates_per_s=30) == 1
    # Both wait at once (a stall and a wait in one tick): the learner gives its thread back.
    assert ThreadHandover(least=1, most=2, threads=2).decide(stall_share=0.5, wait_share=0.5, updates_per_s=30) == 1


def test_the_stall_share_is_per_collector() -> None:
    """Stall nanoseconds are summed over collectors: four collectors stalled 0.3 s each in
    a 5 s tick are 6 % of their time, under the threshold."""
    watch = HandoverWatch(ThreadHandover(least=1, most=2), collectors=4, set_threads=lambda n: None)
    watch.observe(0.0, counters(0, 0))
    assert watch.observe(5.0, counters(1.2, 0)) == 1
    assert watch.observe(10.0, counters(1.2 + 4 * 0.6, 0)) == 2  # 12 %


class LearnerBound:
    """A learner-bound run's snapshots every 5 s: two collectors stalled 40 % of each tick,
    the learner never waiting, and the updates/s of each tick given by the test."""

    def __init__(self, watch: HandoverWatch) -> None:
        self.watch = watch
        self.time_s = self.stall_s = self.updates = 0.0
        watch.observe(0.0, counters(0, 0, 0))

    def tick(self, updates_per_s: float) -> int:
        self.time_s += 5.0
        self.stall_s += 2 * 2.0
        self.updates += 5.0 * updates_per_s
        return self.watch.observe(self.time_s, counters(self.stall_s, 0, self.updates))


def test_a_thread_that_makes_the_learner_slower_goes_back_and_is_held_off(caplog: pytest.LogCaptureFixture) -> None:
    """Two learner-bound runs on one box, each taking a second thread: 25 updates/s at one
    thread, 1.8 at two (their parallel regions wait on each other). Neither share moves, so
    only the rate rule gives the thread back: after two slow ticks, held off 12 ticks, then
    tried again and, slower again, held off twice as long."""
    applied: list[int] = []
    run = LearnerBound(HandoverWatch(ThreadHandover(least=1, most=2), collectors=2, set_threads=applied.append))
    assert run.tick(25.0) == 2  # the stall takes a thread; 25/s recorded for one thread
    assert run.tick(1.8) == 2  # one slow tick: could be a checkpoint
    with caplog.at_level(logging.INFO, logger="mario.trainer"):
        assert run.tick(1.8) == 1  # two: 1.8 < 0.8 x 25, given back
    assert "learner threads 2 -> 1: 1.8 updates/s at 2 against 25.0 at 1, held back 12 ticks" in caplog.text
    assert [run.tick(25.0) for _ in range(HOLD_FIRST)] == [1] * HOLD_FIRST  # stalled, but held off
    assert run.tick(25.0) == 2  # the hold is over: tried again
    assert [run.tick(1.8) for _ in range(2)] == [2, 1]  # slower again
    assert [run.tick(25.0) for _ in range(2 * HOLD_FIRST)] == [1] * (2 * HOLD_FIRST)
    assert run.tick(25.0) == 2
    assert applied == [2, 1, 2, 1, 2]


def test_a_thread_that_makes_the_learner_faster_stays_and_one_slow_tick_is_forgiven() -> None:
    run = LearnerBound(HandoverWatch(ThreadHandover(least=1, most=2), collectors=2, set_threads=lambda n: None))
    assert run.tick(25.0) == 2
    assert [run.tick(38.0) for _ in range(30)] == [2] * 30
    # A tick that saved a checkpoint (8/s), then back to speed: the thread stays.
    assert [run.tick(8.0), run.tick(38.0), run.tick(38.0)] == [2, 2, 2]
    # Just above the share it must keep (0.8 x 25 = 20): kept.
    assert [run.tick(RATE_KEEP * 25.0 + 0.5) for _ in range(5)] == [2] * 5


def test_the_hold_doubles_up_to_its_most_and_starts_over_once_a_thread_holds() -> None:
    handover = ThreadHandover(least=1, most=2)
    holds = []
    for _ in range(6):
        assert handover.decide(0.5, 0.0, 25.0) == 2
        handover.decide(0.5, 0.0, 1.8)
        assert handover.decide(0.5, 0.0, 1.8) == 1
        holds.append(handover.hold)
        while handover.hold:
            handover.decide(0.5, 0.0, 25.0)
    assert holds == [HOLD_FIRST, 2 * HOLD_FIRST, 4 * HOLD_FIRST, 8 * HOLD_FIRST, HOLD_MOST, HOLD_MOST]
    # The thread is taken and holds for HOLD_FIRST ticks: the next proof starts at HOLD_FIRST.
    assert handover.decide(0.5, 0.0, 25.0) == 2
    for _ in range(HOLD_FIRST):
        assert handover.decide(0.5, 0.0, 30.0) == 2
    handover.decide(0.5, 0.0, 1.8)
    assert handover.decide(0.5, 0.0, 1.8) == 1
    assert handover.hold == HOLD_FIRST


def test_a_bad_range_is_refused() -> None:
    with pytest.raises(ValueError, match="least"):
        ThreadHandover(least=2, most=1)
    with pytest.raises(ValueError, match="least"):
        ThreadHandover(least=0, most=1)


@pytest.mark.parametrize(
    ("threads", "most", "collectors", "cores", "expected"),
    [
        (1, 0, 2, 2, (1, 2)),  # the cpu preset on 2 cores: one thread, both while they stall
        (0, 0, 2, 2, (1, 2)),  # the cores the collectors leave: at least one
        (0, 0, 2, 8, (6, 8)),
        (1, 1, 1, 2, (1, 1)),  # the tiny preset: a fixed count
        (4, 2, 2, 8, (4, 4)),  # a most below the least is the least
        (1, 16, 2, 2, (1, 2)),  # never more than the cores
    ],
)
def test_the_thread_range_of_the_settings(
    threads: int, most: int, collectors: int, cores: int, expected: tuple[int, int]
) -> None:
    assert learner_thread_range(threads, most, collectors, cores) == expected
