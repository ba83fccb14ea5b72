"""Tests for pipeline.run.trainer.thread_handover and pipeline.common.cores: a collector stall
gives the learner threads, a learner wait gives them back, one step a tick within the
range, from fake stall figures; and the range the settings give."""

from __future__ import annotations

import pytest

from pipeline.common.cores import learner_thread_range
from pipeline.run.monitor.keys import collector_phase_key, learner_phase_key
from pipeline.run.trainer.thread_handover import STALL_UP, WAIT_DOWN, HandoverWatch, ThreadHandover

SECOND_NS = 1e9


def counters(stall_s: float, wait_s: float) -> dict[str, float]:
    """Snapshot counters: collector stall summed over the slots, the learner's wait."""
    return {collector_phase_key("stall"): stall_s * SECOND_NS, learner_phase_key("wait"): wait_s * SECOND_NS}


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
    assert handover.decide(stall_share=STALL_UP * 0.9, wait_share=WAIT_DOWN * 0.9) == 2
    handover = ThreadHandover(least=1, most=2)
    assert handover.decide(stall_share=STALL_UP * 0.9, wait_share=0.0) == 1
    # Both wait at once (a stall and a wait in one tick): the learner gives its thread back.
    assert ThreadHandover(least=1, most=2, threads=2).decide(stall_share=0.5, wait_share=0.5) == 1


def test_the_stall_share_is_per_collector() -> None:
    """Stall nanoseconds are summed over collectors: four collectors stalled 0.3 s each in
    a 5 s tick are 6 % of their time, under the threshold."""
    watch = HandoverWatch(ThreadHandover(least=1, most=2), collectors=4, set_threads=lambda n: None)
    watch.observe(0.0, counters(0, 0))
    assert watch.observe(5.0, counters(1.2, 0)) == 1
    assert watch.observe(10.0, counters(1.2 + 4 * 0.6, 0)) == 2  # 12 %


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
