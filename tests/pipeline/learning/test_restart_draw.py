"""The ``failures`` restart draw: a trajectory's sections, their failure shares (an
exponential average worked out by hand), restarts drawn in proportion to them, and the
figures a replaced trajectory keeps."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.learning.frontier import EpisodeTrace, FrontierArchive, shared_steps
from pipeline.learning.restart_draw import (
    FAILURE_FLOOR,
    PROGRESS_X,
    SECTION_STEPS,
    FailureWeightedDraw,
    restart_failed,
)


def drawn_on(steps: int, seed: int = 0) -> FailureWeightedDraw:
    draw = FailureWeightedDraw(np.random.default_rng(seed))
    draw.follow(0, steps)
    return draw


def test_a_restart_fails_short_of_a_screen_further_unless_it_takes_the_flag() -> None:
    assert restart_failed(600, 600 + PROGRESS_X - 1, flag=False)
    assert not restart_failed(600, 600 + PROGRESS_X, flag=False)
    assert not restart_failed(3000, 3010, flag=True)  # the flag is near the end: success all the same


def test_sections_start_untried_and_their_failure_shares_average_the_outcomes() -> None:
    draw = drawn_on(2 * SECTION_STEPS + 3)  # two whole sections and a short one
    np.testing.assert_array_equal(draw.failure, [1.0, 1.0, 1.0])
    # Section 1 (steps 9..16): succeed, succeed, fail. 1 -> 0.9 -> 0.81 -> 0.81 + 0.1 * 0.19.
    draw.record(SECTION_STEPS + 1, 500, 900, flag=False)
    draw.record(2 * SECTION_STEPS, 520, 800, flag=False)
    draw.record(SECTION_STEPS + 4, 510, 600, flag=False)
    assert draw.failure[1] == pytest.approx(0.829)
    assert draw.tries[1] == 3 and draw.start_x[1] == pytest.approx(510.0)
    np.testing.assert_array_equal(draw.failure[[0, 2]], [1.0, 1.0])
    assert draw.hardest(1).startswith("x 510: 0.83 of 3")
    draw.record(99 * SECTION_STEPS, 0, 0, flag=False)  # beyond the trajectory: not counted
    assert draw.tries.sum() == 3


def test_sections_are_drawn_in_proportion_to_failure_plus_the_floor() -> None:
    draw = drawn_on(3 * SECTION_STEPS)
    draw.failure[:] = [1.0, 0.0, 0.45]
    weights = np.array([1.0 + FAILURE_FLOOR, FAILURE_FLOOR, 0.45 + FAILURE_FLOOR])
    steps = np.array([draw.draw() for _ in range(20_000)])
    assert steps.min() >= 1 and steps.max() <= 3 * SECTION_STEPS
    sections = (steps - 1) // SECTION_STEPS
    shares = np.bincount(sections, minlength=3) / len(steps)
    np.testing.assert_allclose(shares, weights / weights.sum(), atol=0.012)
    # Uniform within a section: each of section 0's steps about an eighth of its draws.
    within = np.bincount(steps[sections == 0], minlength=SECTION_STEPS + 1)[1:] / (sections == 0).sum()
    np.testing.assert_allclose(within, 1 / SECTION_STEPS, atol=0.02)


def test_the_last_short_section_draws_only_steps_of_the_trajectory() -> None:
    draw = drawn_on(SECTION_STEPS + 3)
    draw.failure[:] = [0.0, 1.0]
    steps = {draw.draw() for _ in range(2_000)}
    assert max(steps) == SECTION_STEPS + 3 and {SECTION_STEPS + 1, SECTION_STEPS + 3} <= steps


def test_a_replaced_trajectory_keeps_the_figures_of_the_whole_sections_it_shares() -> None:
    old = np.arange(4 * SECTION_STEPS, dtype=np.int16)
    draw = drawn_on(len(old))
    draw.failure[:] = [0.1, 0.2, 0.3, 0.4]
    draw.tries[:] = 5
    new = np.concatenate([old[: 2 * SECTION_STEPS + 5], np.full(3 * SECTION_STEPS, 99, np.int16)])
    draw.follow(shared_steps(old, new), len(new))  # differs from step 2 * SECTION_STEPS + 5 on: 0 and 1 shared whole
    assert draw.steps == len(new)
    np.testing.assert_array_equal(draw.failure, [0.1, 0.2, 1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(draw.tries, [5, 5, 0, 0, 0, 0])
    draw.follow(shared_steps(new, new[:SECTION_STEPS]), SECTION_STEPS)  # a shorter one (a file loaded)
    np.testing.assert_array_equal(draw.failure, [0.1])


def trace_of(xs: list[int]) -> EpisodeTrace:
    trace = EpisodeTrace(100)
    for x in xs:
        trace.append(1, x)
    return trace


def test_the_archive_counts_a_restart_from_the_x_it_began_at_to_its_furthest() -> None:
    archive = FrontierArchive(0.5, np.random.default_rng(0), draw="failures")
    kept = [40 + 10 * i for i in range(3 * SECTION_STEPS)]
    assert archive.offer(trace_of([*kept, 0]))
    np.testing.assert_array_equal(archive.failures.failure, [1.0, 1.0, 1.0])  # type: ignore[union-attr]
    # Replayed 10 steps (to x 130), then got to x 130 + PROGRESS_X: section 1 succeeded once.
    archive.record_restart(trace_of([*kept[:10], 200, 130 + PROGRESS_X, 150]), 10, flag=False)
    # Replayed 3 steps (to x 60), died 100 pixels on: section 0 failed.
    archive.record_restart(trace_of([*kept[:3], 160]), 3, flag=False)
    archive.record_restart(trace_of(kept[:5]), 0, flag=False)  # a level start: nothing to count
    np.testing.assert_allclose(archive.failures.failure, [1.0, 0.9, 1.0])  # type: ignore[union-attr]
    assert archive.outcomes == 2
    assert archive.failures.start_x[1] == 130  # type: ignore[union-attr]


def test_the_uniform_draw_counts_nothing_and_an_unknown_draw_is_refused() -> None:
    archive = FrontierArchive(0.5, np.random.default_rng(0))
    archive.record_restart(trace_of([40, 60, 80]), 2, flag=False)
    assert archive.failures is None and archive.outcomes == 0
    with pytest.raises(ValueError, match="restart draw"):
        FrontierArchive(0.5, np.random.default_rng(0), draw="backward")


def test_restarts_follow_the_failures_once_the_archive_keeps_a_trajectory() -> None:
    archive = FrontierArchive(0.9, np.random.default_rng(3), draw="failures")
    assert archive.offer(trace_of([*range(100, 100 + 2 * SECTION_STEPS), 0]))
    archive.failures.failure[:] = [0.0, 1.0]  # type: ignore[union-attr]
    starts = np.array([archive.draw_restart() for _ in range(4_000)])
    restarts = starts[starts > 0]
    assert len(restarts) / len(starts) == pytest.approx(0.9, abs=0.02)
    second = np.mean(restarts > SECTION_STEPS)
    assert second == pytest.approx((1 + FAILURE_FLOOR) / (1 + 2 * FAILURE_FLOOR), abs=0.02)
