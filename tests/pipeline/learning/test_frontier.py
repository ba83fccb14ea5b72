"""The frontier archive keeps the furthest trajectory up to its furthest x and draws restart
points on it; a fixed Mario stage replays the same way from the same actions (the premise
of returning by replay)."""

from __future__ import annotations

import numpy as np
import pytest

from config import Config
from envs import make_env
from pipeline.learning.frontier import (
    EpisodeTrace,
    FrontierArchive,
    TrajectoryError,
    read_trajectory,
    write_trajectory,
)


def trace_of(xs: list[int], actions: list[int] | None = None, capacity: int = 100) -> EpisodeTrace:
    trace = EpisodeTrace(capacity)
    for i, x in enumerate(xs):
        trace.append(actions[i] if actions is not None else i % 7, x)
    return trace


def test_offer_keeps_the_furthest_trajectory_up_to_its_furthest_x() -> None:
    archive = FrontierArchive(0.5, np.random.default_rng(0))
    assert archive.draw_restart() == 0  # nothing kept yet: the level's start
    assert archive.offer(trace_of([40, 60, 90, 80, 70], actions=[1, 2, 3, 4, 5]))
    assert archive.best_x == 90
    np.testing.assert_array_equal(archive.actions, [1, 2, 3])  # cut after the first step at 90
    assert not archive.offer(trace_of([40, 90, 90, 50]))  # as far is not further
    assert not archive.offer(trace_of([40, 50, 60]))
    np.testing.assert_array_equal(archive.actions, [1, 2, 3])
    assert archive.offer(trace_of([40, 95, 95, 91], actions=[6, 5, 4, 3]))
    np.testing.assert_array_equal(archive.actions, [6, 5])


def test_the_step_that_ended_the_episode_is_no_start() -> None:
    """Running into a goomba: the furthest x is the death's; the start is the step before it."""
    archive = FrontierArchive(0.5, np.random.default_rng(0))
    assert archive.offer(trace_of([40, 60, 80, 100], actions=[1, 2, 3, 4]))
    assert archive.best_x == 80
    np.testing.assert_array_equal(archive.actions, [1, 2, 3])
    assert not archive.offer(trace_of([500]))  # a one-step episode has no live state after the start


def test_the_kept_trajectory_is_a_copy() -> None:
    archive = FrontierArchive(0.5, np.random.default_rng(0))
    trace = trace_of([40, 60, 50], actions=[1, 2, 3])
    archive.offer(trace)
    trace.clear()
    trace.append(6, 10)
    np.testing.assert_array_equal(archive.actions, [1, 2])


def test_an_episode_longer_than_the_trace_is_never_offered() -> None:
    archive = FrontierArchive(0.5, np.random.default_rng(0))
    trace = trace_of([1, 2, 3, 4], capacity=3)
    assert trace.overflowed and trace.length == 3
    assert not archive.offer(trace)
    trace.clear()
    assert not trace.overflowed and trace.length == 0
    assert not archive.offer(trace)  # an empty trace neither


def test_restarts_are_the_share_of_episodes_at_uniform_steps_of_the_trajectory() -> None:
    archive = FrontierArchive(0.3, np.random.default_rng(1))
    archive.offer(trace_of(list(range(10, 61))))  # 51 steps: 50 before the one that ended it
    draws = np.array([archive.draw_restart() for _ in range(50_000)])
    restarts = draws[draws > 0]
    assert abs(len(restarts) / len(draws) - 0.3) < 0.01  # binomial sd 0.002
    assert restarts.min() == 1 and restarts.max() == 50
    counts = np.bincount(restarts, minlength=51)[1:]
    expected = len(restarts) / 50
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 100.0  # 49 degrees of freedom: p < 1e-5 beyond this


@pytest.mark.parametrize("share", [-0.1, 1.0, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="restart share"):
        FrontierArchive(share, np.random.default_rng(0))


def test_a_fixed_stage_replays_the_same_way_from_the_same_actions() -> None:
    """Return by replay works only if reset + the same actions give the same states."""
    cfg = Config()
    env = make_env(cfg.env_id, seed=3, **cfg.env_kwargs())
    rng = np.random.default_rng(3)
    try:
        env.reset(seed=3)
        actions, frames, xs = [], [], []
        for _ in range(150):
            action = int(rng.integers(env.action_space.n))
            obs, _, terminated, truncated, info = env.step(action)
            actions.append(action)
            frames.append(obs)
            xs.append(info["x_pos"])
            if terminated or truncated:
                break
        assert max(xs) > 100  # it moved: the check below compares states that differ
        for _ in range(2):  # and again after the episode above ended a second time
            env.reset()
            for action, frame, x in zip(actions, frames, xs):
                obs, _, _, _, info = env.step(action)
                assert info["x_pos"] == x
                np.testing.assert_array_equal(obs, frame)
    finally:
        env.close()


def test_the_trajectory_is_kept_on_disk_and_a_new_archive_carries_on_from_it(tmp_path) -> None:
    path = tmp_path / "frontier" / "collector-0.npz"  # the folder is made on the first save
    first = FrontierArchive(0.5, np.random.default_rng(0), str(path), "1-1 simple skip 4")
    assert first.offer(trace_of([40, 60, 90, 80], actions=[1, 2, 3, 4]))
    again = FrontierArchive(0.5, np.random.default_rng(1), str(path), "1-1 simple skip 4")
    assert again.best_x == 90
    np.testing.assert_array_equal(again.actions, [1, 2, 3])
    assert again.draw_restart() in (0, 1, 2, 3)
    assert not again.offer(trace_of([40, 85, 70]))  # not further than the kept one
    assert again.offer(trace_of([50, 120, 60], actions=[6, 6, 0]))
    np.testing.assert_array_equal(
        FrontierArchive(0.5, np.random.default_rng(2), str(path), "1-1 simple skip 4").actions, [6, 6]
    )
    assert [p.name for p in path.parent.iterdir()] == ["collector-0.npz"]  # no temporary file left


def test_a_trajectory_of_another_stage_or_an_unreadable_file_is_not_used(tmp_path, caplog) -> None:
    path = tmp_path / "collector-0.npz"
    FrontierArchive(0.5, np.random.default_rng(0), str(path), "1-1 simple skip 4").offer(trace_of([40, 60, 50]))
    other = FrontierArchive(0.5, np.random.default_rng(0), str(path), "1-2 simple skip 4")
    assert other.best_x == -1 and len(other.actions) == 0
    assert "recorded with '1-1 simple skip 4', not '1-2 simple skip 4'" in caplog.text
    path.write_bytes(b"not an archive")
    broken = FrontierArchive(0.5, np.random.default_rng(0), str(path), "1-1 simple skip 4")
    assert broken.best_x == -1 and "unreadable" in caplog.text


def test_a_failed_write_is_reported_once_and_the_archive_goes_on_in_memory(tmp_path, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    archive = FrontierArchive(0.5, np.random.default_rng(0), str(blocker / "collector-0.npz"), "1-1 simple skip 4")
    assert archive.offer(trace_of([40, 60, 50], actions=[1, 2, 3]))
    assert archive.offer(trace_of([40, 70, 50], actions=[4, 5, 6]))
    np.testing.assert_array_equal(archive.actions, [4, 5])
    assert caplog.text.count("could not keep the frontier trajectory") == 1


def test_a_fresh_archive_starts_from_a_given_trajectory_and_keeps_it_as_its_own(tmp_path) -> None:
    found = tmp_path / "explored.npz"
    write_trajectory(found, np.array([1, 2, 2, 4]), 300, "1-3 right_only skip 4")
    kept = tmp_path / "frontier" / "collector-0.npz"
    archive = FrontierArchive(0.5, np.random.default_rng(0), str(kept), "1-3 right_only skip 4", start_from=str(found))
    assert archive.best_x == 300
    np.testing.assert_array_equal(archive.actions, [1, 2, 2, 4])
    assert not archive.offer(trace_of([100, 250, 200]))  # the given trajectory is the one to beat
    assert archive.offer(trace_of([100, 310, 200], actions=[3, 3, 3]))
    # A collector that starts again carries on from its own kept trajectory, not the given one.
    again = FrontierArchive(0.5, np.random.default_rng(1), str(kept), "1-3 right_only skip 4", start_from=str(found))
    assert again.best_x == 310
    np.testing.assert_array_equal(again.actions, [3, 3])


def test_a_given_trajectory_of_another_stage_is_refused_in_one_line(tmp_path, caplog) -> None:
    found = tmp_path / "explored.npz"
    write_trajectory(found, np.array([1, 1]), 40, "1-1 right_only skip 4")
    with pytest.raises(TrajectoryError, match="recorded with '1-1 right_only skip 4', not '1-3 right_only skip 4'"):
        read_trajectory(found, "1-3 right_only skip 4")
    actions, best_x = read_trajectory(found, "1-1 right_only skip 4")
    assert best_x == 40 and actions.dtype == np.int16 and actions.tolist() == [1, 1]
    with pytest.raises(TrajectoryError, match="unreadable"):
        read_trajectory(tmp_path / "missing.npz", "1-1 right_only skip 4")
    archive = FrontierArchive(0.5, np.random.default_rng(0), "", "1-3 right_only skip 4", start_from=str(found))
    assert archive.best_x == -1 and "recorded with '1-1 right_only skip 4'" in caplog.text
