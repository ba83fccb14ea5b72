"""The search for a way through a stage: on a corridor worked out by hand, and on the real 1-1."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from config import Config
from envs import make_env
from pipeline.learning import trajectory_search
from pipeline.learning.trajectory_search import (
    SearchResult,
    backtrack_reach,
    play_actions,
    random_holds,
    search_trajectory,
)

WALK, JUMP = 1, 2


class Corridor:
    """x advances one per step with WALK or JUMP (NOOP, 0, stands); x 4 is a pit that only a
    JUMP onto it crosses; reaching x 8 takes the flag. Deterministic, as a fixed stage is."""

    action_space = spaces.Discrete(3)

    def reset(self):
        self.x = 0
        return None, {"x_pos": 0}

    def step(self, action: int):
        moved = action in (WALK, JUMP)
        self.x += moved
        died = moved and self.x == 4 and action != JUMP  # standing on it after the jump is safe
        flag = self.x == 8
        return None, 0.0, died or flag, False, {"x_pos": self.x, "flag_get": flag}


class DeadEnd:
    """1-2's shape by hand: from x 2 a JUMP climbs onto an upper route that goes right to a
    wall at x 100 (alive, no further: the warp zone); below, x 5 is a pit, and NOOP at x 4
    enters a pipe to x 5 of an exit area whose x 7 is the flag (further in steps, never in x
    than the dead end)."""

    action_space = spaces.Discrete(3)

    def reset(self):
        self.x, self.route = 0, "low"
        return None, {"x_pos": 0}

    def step(self, action: int):
        moved = action in (WALK, JUMP)
        if self.route == "low" and self.x == 2 and action == JUMP:
            self.route = "high"
        if self.route == "low" and self.x == 4 and action == 0:
            self.route, self.x = "exit", 5
            return None, 0.0, False, False, {"x_pos": self.x, "flag_get": False}
        self.x = min(self.x + moved, 100) if self.route == "high" else self.x + moved
        died = self.route == "low" and self.x == 5
        flag = self.route == "exit" and self.x == 7
        return None, 0.0, died or flag, False, {"x_pos": self.x, "flag_get": flag}


def test_a_playout_counts_only_the_steps_that_did_not_end_the_episode() -> None:
    death = play_actions(Corridor(), [WALK, WALK, WALK, WALK, WALK])
    assert death.x_pos.tolist() == [1, 2, 3] and death.ended and not death.flag
    flag = play_actions(Corridor(), [WALK, WALK, WALK, JUMP, 0, WALK, WALK, WALK, WALK])
    assert flag.x_pos.tolist() == [1, 2, 3, 4, 4, 5, 6, 7] and flag.ended and flag.flag
    alive = play_actions(Corridor(), [0, WALK])
    assert alive.x_pos.tolist() == [0, 1] and not alive.ended


def test_random_holds_repeat_each_action_for_a_geometric_number_of_steps() -> None:
    holds = random_holds(np.random.default_rng(0), 5, 20_000)
    assert len(holds) == 20_000 and set(holds) == {0, 1, 2, 3, 4}
    changes = np.count_nonzero(np.diff(holds)) + 1
    # A new draw every 1/0.3 steps on average, which repeats the action 1/5 of the time.
    assert 20_000 * 0.3 * 0.8 * 0.95 < changes < 20_000 * 0.3 * 0.8 * 1.05


def test_the_search_crosses_the_pit_and_stops_at_the_flag() -> None:
    improvements: list[int] = []
    result = search_trajectory(Corridor(), np.random.default_rng(3), 500, lambda r: improvements.append(r.best_x))
    assert result.flag and result.iterations < 500
    # The kept steps replay alive to x 7; the next WALK or JUMP takes the flag.
    replay = play_actions(Corridor(), result.actions)
    assert not replay.ended and replay.x_pos[-1] == result.best_x == 7
    assert result.actions.tolist()[replay.x_pos.tolist().index(4)] == JUMP  # onto the pit: a jump
    assert improvements == sorted(improvements) and improvements[-1] == 7


def test_the_backtrack_doubles_every_stall_and_stops_doubling() -> None:
    assert [backtrack_reach(n) for n in (0, 99, 100, 199, 200, 300)] == [40, 40, 80, 80, 160, 320]
    assert backtrack_reach(10**6) == 40 << 5  # 1,280 steps: past the start of any World 1 trajectory


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_stalled_search_goes_back_far_enough_to_leave_a_dead_end(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    found = search_trajectory(DeadEnd(), np.random.default_rng(seed), 1000)
    assert found.flag and found.iterations < 1000
    replayed = DeadEnd()
    assert not play_actions(replayed, found.actions).ended
    assert (replayed.route, replayed.x) == ("exit", 6)  # through the pipe, a step before the flag
    # Never going back further than 40 steps, the same search stays at the wall.
    monkeypatch.setattr(trajectory_search, "STALL_SEQUENCES", 10**9)
    stuck = search_trajectory(DeadEnd(), np.random.default_rng(seed), 1000)
    assert not stuck.flag and stuck.best_x == 100


def test_on_world_1_1_the_kept_steps_replay_alive_to_the_furthest_x() -> None:
    cfg = Config()
    env = make_env(cfg.env_id, **cfg.env_kwargs())
    try:
        result = search_trajectory(env, np.random.default_rng(0), 8)
        assert isinstance(result, SearchResult) and not result.flag and result.iterations == 8
        assert result.best_x > 40 and result.actions.dtype == np.int16
        replay = play_actions(env, result.actions)
        assert not replay.ended and int(replay.x_pos.max()) == int(replay.x_pos[-1]) == result.best_x
        assert result.agent_steps >= len(result.actions)
    finally:
        env.close()


def test_snapshots_find_the_same_trajectory_for_fewer_emulated_steps() -> None:
    """Playouts that start at the last snapshot before their cut play out as from the
    level's start: the same sequences are kept, for less emulation."""
    cfg = Config()
    env = make_env(cfg.env_id, **cfg.env_kwargs())
    try:
        restored = search_trajectory(env, np.random.default_rng(1), 12)
        replayed = search_trajectory(env, np.random.default_rng(1), 12, use_snapshots=False)
    finally:
        env.close()
    np.testing.assert_array_equal(restored.actions, replayed.actions)
    found = (restored.best_x, restored.flag, restored.iterations)
    assert found == (replayed.best_x, replayed.flag, replayed.iterations)
    assert len(restored.actions) > 100  # long enough that snapshots along it were used
    assert restored.agent_steps < replayed.agent_steps / 2
