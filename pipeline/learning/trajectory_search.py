"""A trajectory through a stage, found by search on the emulator: Go-Explore's exploration phase.

Go-Explore (Ecoffet et al., 2021) splits hard-exploration into two phases: first find a
way through by returning to the furthest state reached and exploring from it, on the
deterministic emulator and without a network; then train a policy that restarts along
that trajectory (Salimans and Chen's backward curriculum: restarts near the end are met
first, then earlier ones). The second phase is the collectors' restarts near the
frontier (:mod:`pipeline.learning.frontier`, ``frontier_start_share``); this module is the
first, and ``python main.py explore`` writes its result where a run's
``frontier_trajectory`` reads it.

The search keeps one action sequence, up to the step of its greatest x. Each iteration
goes back a few steps from its end (``BACKTRACK_STEPS``; twice as far, and on for as many more
steps, after every ``STALL_SEQUENCES`` that got no further, so a dead end is left by an
earlier branch), appends random actions, each held for a geometric number of agent steps
(a jump that clears a tall obstacle needs A held for several), and plays the sequence: a
fixed stage replays the same way from the same actions. A sequence that gets further
replaces the kept one; one that reaches the flag ends the search. On a Mario env a playout
does not start at the level's start but at the last snapshot along the kept sequence
before the cut (:mod:`pipeline.learning.trajectory_snapshots`, as the collectors' restarts
do), which finds the same sequences for a fraction of the emulation (1-1: 4.9 times fewer
steps).

Only steps that did not end the episode count: the kept sequence never includes the
step that lost the life (or took the flag), so replaying all of it leaves Mario alive.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from config import Config
from envs.snapshots import can_snapshot
from pipeline.learning.episode_loop import build_env
from pipeline.learning.frontier import stage_signature, write_trajectory
from pipeline.learning.trajectory_snapshots import TrajectorySnapshots

__all__ = ["SEARCH_SEQUENCES", "SearchResult", "backtrack_reach", "play_actions", "search_stage", "search_trajectory"]

# Sequences a search plays at most unless told (``explore --iterations``): 1-2, the longest
# search of World 1, found its flag in 228.
SEARCH_SEQUENCES = 2000
# Steps the search goes back from the kept sequence's end before exploring (uniform).
BACKTRACK_STEPS = (5, 40)
# Random steps appended past the cut in one iteration.
EXTEND_STEPS = 60
# Sequences without a further x after which the search goes back twice as far (and appends
# as many more steps): the way on may branch off well before a dead end that is further in
# x (1-2: the ceiling leads over the exit pipe into the warp zone, where no rightward action
# goes on; the pipe is ~100 steps back).
STALL_SEQUENCES = 100
# At most this many doublings: 40 << 5 = 1,280 steps, back past the start of any World 1 stage's
# trajectory (1-1: 537 steps).
MAX_DOUBLINGS = 5
# A random action is held for a geometric number of steps with this success probability
# (mean 1/p = 3.3 steps; a 7-step hold, what a tall pipe needs, is drawn with 8 % chance).
HOLD_P = 0.3


@dataclass
class SearchResult:
    """The kept sequence and how it was found."""

    actions: np.ndarray  # int16, the agent steps from the level's start, none of them ending the episode
    best_x: int  # the x position after the last of them (the greatest reached)
    flag: bool  # whether the step after them takes the flag
    iterations: int  # sequences played
    agent_steps: int  # agent steps emulated in all (the search's cost; restored ones not counted)


@dataclass
class Playout:
    """One sequence played from the level's start."""

    x_pos: np.ndarray  # x after each step that did not end the episode
    ended: bool  # the sequence ended the episode (a life lost, the flag, a cut)
    flag: bool  # it ended at the flag


def play_actions(
    env: Any, actions: list[int] | np.ndarray, snapshots: TrajectorySnapshots | None = None, shared: int = 0
) -> Playout:
    """Reset ``env`` and play ``actions`` until they run out or the episode ends.

    With ``snapshots`` (along a trajectory whose first ``shared`` actions are those of
    ``actions``), start from the last one within them, and take the ones the playout
    passes within them; the x positions are still counted from the level's start.
    """
    env.reset()
    start = 0 if snapshots is None else snapshots.nearest(shared)
    x_pos = [] if start == 0 else snapshots.x_pos[:start].tolist()  # type: ignore[union-attr]
    if start:
        snapshots.restore(env, start)  # type: ignore[union-attr]
    for step, action in enumerate(list(actions)[start:], start=start + 1):
        obs, _, terminated, truncated, info = env.step(int(action))
        if terminated or truncated:
            return Playout(np.array(x_pos, np.int64), True, bool(info.get("flag_get", False)))
        x_pos.append(int(info["x_pos"]))
        if snapshots is not None and step <= shared:
            snapshots.passed(env, step, obs, x_pos[-1])
    return Playout(np.array(x_pos, np.int64), False, False)


def random_holds(rng: np.random.Generator, num_actions: int, steps: int) -> list[int]:
    """``steps`` random actions, each held for a geometric number of steps."""
    out: list[int] = []
    while len(out) < steps:
        out += [int(rng.integers(num_actions))] * int(rng.geometric(HOLD_P))
    return out[:steps]


def backtrack_reach(stalled: int) -> int:
    """The bound (exclusive) of the steps to go back after ``stalled`` sequences without a
    further x: ``BACKTRACK_STEPS[1]``, doubled every ``STALL_SEQUENCES`` of them."""
    return BACKTRACK_STEPS[1] << min(stalled // STALL_SEQUENCES, MAX_DOUBLINGS)


def search_trajectory(
    env: Any,
    rng: np.random.Generator,
    iterations: int,
    report: Callable[[SearchResult], None] = lambda result: None,
    use_snapshots: bool = True,
) -> SearchResult:
    """Search ``env`` (a fixed stage, deterministic given the actions) for ``iterations``
    sequences at most; ``report`` is called at every improvement. ``use_snapshots``:
    start playouts from snapshots where ``env`` takes them (the same result either way)."""
    num_actions = int(env.action_space.n)
    kept = np.zeros(0, np.int16)
    result = SearchResult(kept, -1, False, 0, 0)
    snapshots = TrajectorySnapshots() if use_snapshots and can_snapshot(env) else None
    stalled = 0  # sequences since the last further x
    for iteration in range(1, iterations + 1):
        reach = backtrack_reach(stalled)
        cut = max(0, len(kept) - int(rng.integers(BACKTRACK_STEPS[0], reach)))
        sequence = kept[:cut].tolist() + random_holds(rng, num_actions, EXTEND_STEPS + reach - BACKTRACK_STEPS[1])
        stalled += 1
        if snapshots is not None:
            snapshots.follow(kept)
        played_before = 0 if snapshots is None else snapshots.nearest(cut)
        playout = play_actions(env, sequence, snapshots, cut)
        result.iterations = iteration
        result.agent_steps += len(playout.x_pos) - played_before + int(playout.ended)
        if playout.flag:
            # Every step before the flag's is kept: restarts can then be drawn up to it.
            kept = np.array(sequence[: len(playout.x_pos)], np.int16)
            result.actions, result.flag = kept, True
            result.best_x = int(playout.x_pos[-1]) if len(playout.x_pos) else 0
            report(result)
            return result
        if len(playout.x_pos) == 0:
            continue
        furthest = int(np.argmax(playout.x_pos))
        if int(playout.x_pos[furthest]) > result.best_x:
            kept = np.array(sequence[: furthest + 1], np.int16)
            result.actions, result.best_x = kept, int(playout.x_pos[furthest])
            stalled = 0
            report(result)
    return result


def search_stage(
    cfg: Config,
    out: Path,
    seed: int,
    iterations: int = SEARCH_SEQUENCES,
    report: Callable[[SearchResult], None] = lambda result: None,
) -> SearchResult:
    """Search ``cfg``'s stage (its env, action set and frame skip) with the generator of
    ``seed`` and write the kept sequence to ``out`` (a trajectory file, atomically), unless
    no step stayed alive (``best_x`` < 0). What ``explore`` and a run with
    ``frontier_trajectory=search`` do."""
    env = build_env(cfg, seed=seed)
    try:
        result = search_trajectory(env, np.random.default_rng(seed), iterations, report)
    finally:
        env.close()
    if result.best_x >= 0:
        out.parent.mkdir(parents=True, exist_ok=True)
        signature = stage_signature(cfg.env_id, cfg.action_set, cfg.frame_skip)
        write_trajectory(out, result.actions, result.best_x, signature)
    return result
