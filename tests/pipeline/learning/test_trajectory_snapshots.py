"""Snapshots along a trajectory: taken every ``spacing`` steps a replay passes, the nearest
one at or before a start restored (into another env) to the same state a replay from the
level's start reaches; kept for the prefix a new trajectory shares; the spacing doubles
so that at most MOST_SNAPSHOTS are kept."""

from __future__ import annotations

import numpy as np

from envs import make_env
from pipeline.learning.trajectory_snapshots import FIRST_SPACING, MOST_SNAPSHOTS, TrajectorySnapshots

ENV = "SuperMarioBros-1-1-v0"


def test_a_start_restores_the_nearest_snapshot_and_reaches_the_replayed_state() -> None:
    trajectory = np.array([1] * 12 + [2, 2, 2, 1, 1, 4, 4, 4, 1, 1] * 3, np.int16)  # 42 steps, 1-1 survives them
    snapshots = TrajectorySnapshots()
    snapshots.follow(trajectory)
    assert snapshots.nearest(41) == 0  # none taken yet: the level's start
    player, other, reference = make_env(ENV), make_env(ENV), make_env(ENV)
    try:
        player.reset()
        x_pos = []
        for step, action in enumerate(trajectory.tolist(), start=1):
            obs, _, terminated, truncated, info = player.step(action)
            assert not (terminated or truncated)
            x_pos.append(info["x_pos"])
            snapshots.passed(player, step, obs, info["x_pos"])
        assert sorted(snapshots.snapshots) == [8, 16, 24, 32, 40]
        assert snapshots.known == len(trajectory)
        np.testing.assert_array_equal(snapshots.x_pos, x_pos)
        assert snapshots.nearest(39) == 32 and snapshots.nearest(40) == 40 and snapshots.nearest(7) == 0

        # Restored after 32 steps into another env, then 7 steps replayed: the state after 39.
        other.reset()
        obs = snapshots.restore(other, 32)
        for action in trajectory[32:39].tolist():
            obs, *_ = other.step(action)
        reference.reset()
        for action in trajectory[:39].tolist():
            expected, *_ = reference.step(action)
        np.testing.assert_array_equal(obs, expected)
        follow_on = [other.step(1)[:4] for _ in range(3)]
        reference_on = [reference.step(1)[:4] for _ in range(3)]
        for (obs_a, *rest_a), (obs_b, *rest_b) in zip(follow_on, reference_on, strict=True):
            np.testing.assert_array_equal(obs_a, obs_b)
            assert rest_a == rest_b
    finally:
        player.close()
        other.close()
        reference.close()


def test_a_new_trajectory_keeps_the_snapshots_and_x_of_the_prefix_it_shares() -> None:
    snapshots = TrajectorySnapshots()
    old = np.arange(40, dtype=np.int16)
    snapshots.follow(old)
    snapshots.snapshots = {8: "a", 16: "b", 24: "c", 32: "d"}  # type: ignore[dict-item]
    snapshots.x_pos[:] = np.arange(40) * 3
    snapshots.known = 40
    new = np.concatenate([old[:20], np.full(30, 99, np.int16)])  # differs from step 21 on
    snapshots.follow(new)
    assert sorted(snapshots.snapshots) == [8, 16]  # the state after 24 steps is another one now
    assert snapshots.known == 20
    np.testing.assert_array_equal(snapshots.x_pos[:20], np.arange(20) * 3)
    assert len(snapshots.x_pos) == 50
    snapshots.follow(new)  # the same array again: nothing changes
    assert sorted(snapshots.snapshots) == [8, 16]


def test_the_spacing_doubles_so_that_at_most_most_snapshots_are_kept() -> None:
    snapshots = TrajectorySnapshots()
    snapshots.follow(np.zeros(MOST_SNAPSHOTS * FIRST_SPACING, np.int16))
    assert snapshots.spacing == FIRST_SPACING
    snapshots.snapshots = {step: step for step in range(FIRST_SPACING, 65 * FIRST_SPACING, FIRST_SPACING)}  # type: ignore[misc]
    snapshots.known = MOST_SNAPSHOTS * FIRST_SPACING
    snapshots.follow(np.zeros(MOST_SNAPSHOTS * FIRST_SPACING + 1, np.int16))  # one step longer, same prefix
    assert snapshots.spacing == 2 * FIRST_SPACING
    assert sorted(snapshots.snapshots) == list(range(2 * FIRST_SPACING, 65 * FIRST_SPACING, 2 * FIRST_SPACING))
    snapshots.follow(np.zeros(5 * MOST_SNAPSHOTS * FIRST_SPACING, np.int16))
    assert snapshots.spacing == 8 * FIRST_SPACING
    assert len(snapshots.snapshots) <= MOST_SNAPSHOTS
    assert snapshots.nearest(8 * FIRST_SPACING + 3) == 8 * FIRST_SPACING
