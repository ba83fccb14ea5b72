"""Restarts near the frontier: a collector's best trajectory so far, and where to restart on it.

Go-Explore's "return, then explore" (Ecoffet et al., 2021) and the backward curriculum of
Salimans and Chen (2018, Montezuma's Revenge from one demonstration), with the agent's
own experience as the demonstration: a share of training episodes do not start at the
level's start but at a state on the furthest trajectory the collector has played, and
explore from there. Obstacles that the agent passed once by luck (a tall pipe of World
1-1 needs A held for ~7 agent steps) are then met again many times, from the states just
before them, instead of once per lucky episode.

How the collector returns to such a state: a fixed stage is deterministic given the
actions (``reset`` restores the same snapshot; the game's own randomness comes from its
frame counter), so it resets as usual and replays the recorded actions from the start,
``frame_skip`` emulator frames per replayed step. The frames are counted
(``replayed_frames``) and never recorded as transitions.

The archive keeps one trajectory: the action sequence from the level's start up to the
step where its x position was greatest (before the step that ended it), of the episode
that went furthest. An episode restarts at a uniform step of it, so every obstacle on the
way is met in proportion to the steps the agent spent in front of it.

Evaluation always starts from the level's start.

The kept trajectory outlives its collector process: with a path (the trainer gives
``<run>/frontier/collector-<i>.npz``) every improvement is written there atomically, and
a collector that starts again (restarted by the supervisor, or the run resumed in a later
session) carries on from it instead of from an empty archive. The file names the stage
and the action set it was recorded with; one that does not match is ignored.

A fresh archive may start from a trajectory found elsewhere (``start_from``, the run's
``frontier_trajectory``): the file ``python main.py explore`` writes by searching the
emulator (:mod:`pipeline.learning.trajectory_search`), in the same format. Restarts are
then drawn along it from the first episode on: Go-Explore's robustification phase, with
the searched trajectory as the demonstration.
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import numpy as np

from pipeline.common.files import atomic_write

logger = logging.getLogger(__name__)


__all__ = [
    "EpisodeTrace",
    "FrontierArchive",
    "TrajectoryError",
    "read_trajectory",
    "shared_steps",
    "stage_signature",
    "write_trajectory",
]


def shared_steps(old: np.ndarray, new: np.ndarray) -> int:
    """How many leading actions two trajectories share: the states after them are the same."""
    length = min(len(old), len(new))
    differs = np.flatnonzero(old[:length] != new[:length])
    return int(differs[0]) if len(differs) else length


def stage_signature(env_id: str, action_set: str, frame_skip: int) -> str:
    """What a recorded trajectory replays the same way under: the stage, the meaning of
    each action index (the set), and the frames an action is held."""
    return f"{env_id} {action_set} skip {frame_skip}"


class TrajectoryError(ValueError):
    """A trajectory file that cannot be read, or was recorded for another stage or action set."""


def read_trajectory(path: str | Path, recorded_with: str) -> tuple[np.ndarray, int]:
    """The actions and greatest x of the trajectory file ``path``, checked to replay under
    ``recorded_with`` (:func:`stage_signature`); a problem is one :class:`TrajectoryError` line."""
    try:
        with np.load(path) as kept:
            signature = str(kept["recorded_with"])
            actions, best_x = kept["actions"].astype(np.int16), int(kept["best_x"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise TrajectoryError(f"trajectory {path} unreadable ({exc})") from None
    if signature != recorded_with:
        raise TrajectoryError(f"trajectory {path} was recorded with {signature!r}, not {recorded_with!r}")
    return actions, best_x


def write_trajectory(path: str | Path, actions: np.ndarray, best_x: int, recorded_with: str) -> None:
    """Write a trajectory file atomically (a reader never sees half of one)."""
    with atomic_write(Path(path)) as handle:
        np.savez(handle, actions=np.asarray(actions, np.int16), best_x=best_x, recorded_with=recorded_with)


class EpisodeTrace:
    """The actions and x positions of one env's current episode, counted from the level's start.

    Pre-allocated for ``capacity`` steps; an episode longer than that stops being recorded
    (``overflowed``) and is never offered to the archive.
    """

    def __init__(self, capacity: int) -> None:
        self.actions = np.zeros(capacity, np.int16)
        self.x_pos = np.zeros(capacity, np.int32)
        self.length = 0
        self.overflowed = False

    def clear(self) -> None:
        self.length = 0
        self.overflowed = False

    def append(self, action: int, x_pos: int) -> None:
        """Record one agent step (its action and the x position it led to)."""
        if self.length == len(self.actions):
            self.overflowed = True
            return
        self.actions[self.length] = action
        self.x_pos[self.length] = x_pos
        self.length += 1

    def extend(self, actions: np.ndarray, x_pos: np.ndarray) -> None:
        """Record several agent steps at once (as :meth:`append` would one by one)."""
        room = len(self.actions) - self.length
        if len(actions) > room:
            self.overflowed = True
        count = min(len(actions), room)
        self.actions[self.length : self.length + count] = actions[:count]
        self.x_pos[self.length : self.length + count] = x_pos[:count]
        self.length += count


class FrontierArchive:
    """A collector's furthest trajectory and the restart points drawn on it.

    Args:
        share: probability that an episode starts from a restart point (0 disables).
        rng: the collector's generator.
        path: where the trajectory is kept across processes ("" keeps it in memory only).
        recorded_with: what the trajectory is only valid for (stage, action set, frame
            skip), stored beside it and checked when it is loaded.
        log: where a file that cannot be read or written is reported (the collector's log).
        start_from: a trajectory file (``explore``'s) to start from when ``path`` keeps none.
    """

    def __init__(
        self,
        share: float,
        rng: np.random.Generator,
        path: str = "",
        recorded_with: str = "",
        log: logging.Logger = logger,
        start_from: str = "",
    ) -> None:
        if not 0.0 <= share < 1.0:
            raise ValueError(f"restart share must be in [0, 1), got {share!r}")
        self.share = share
        self.rng = rng
        self.actions = np.zeros(0, np.int16)  # the best trajectory, up to its furthest x
        self.best_x = -1
        self.path = Path(path) if path else None
        self.recorded_with = recorded_with
        self.save_failed = False  # a failed write is logged once; the archive goes on in memory
        self.log = log
        if self.path is not None and self.path.exists():
            self._load(self.path)
        if self.best_x < 0 and start_from:
            self._load(Path(start_from))
            self._save()  # kept from now on as the collector's own

    def _load(self, path: Path) -> None:
        try:
            actions, self.best_x = read_trajectory(path, self.recorded_with)
        except TrajectoryError as exc:
            self.log.warning("frontier: %s; starting with none", exc)
            return
        self.actions = actions

    def _save(self) -> None:
        if self.path is None or self.best_x < 0:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_trajectory(self.path, self.actions, self.best_x, self.recorded_with)
        except OSError as exc:
            if not self.save_failed:
                self.save_failed = True
                self.log.warning(
                    "could not keep the frontier trajectory in %s (%s); it stays in memory", self.path, exc
                )

    def offer(self, trace: EpisodeTrace) -> bool:
        """Keep the finished episode ``trace`` if it went further than the kept trajectory;
        return whether it did.

        Its last step ended the episode (a death, the flag, a cut): the state it led to is
        no place to start from, so only the steps before it count.
        """
        if trace.overflowed or trace.length < 2:
            return False
        x_pos = trace.x_pos[: trace.length - 1]
        furthest = int(np.argmax(x_pos))  # the first step at the maximum
        if int(x_pos[furthest]) <= self.best_x:
            return False
        self.best_x = int(x_pos[furthest])
        self.actions = trace.actions[: furthest + 1].copy()
        self._save()
        return True

    def draw_restart(self) -> int:
        """Steps of the kept trajectory to replay before the next episode (0: the level's start)."""
        if self.share == 0.0 or len(self.actions) == 0 or self.rng.random() >= self.share:
            return 0
        return int(self.rng.integers(1, len(self.actions) + 1))
