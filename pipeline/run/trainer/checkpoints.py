"""A training run's checkpoints: what one holds, which one is the best, and resuming from one.

- :func:`checkpoint_payload`: the learner, the run's counters, its settings and every RNG.
- :class:`RunCheckpoints`: periodic and final ``ckpt-<frames>.pt`` files (the newest
  ``keep`` kept) and ``best.pt``, the weights behind the best rolling training return.
- :func:`save_mark`: the online network alone, at a fixed frame count, in ``marks/``
  (never rotated; what the learning benchmark evaluates after a run).
- :func:`write_periodic`, :func:`write_mark`: those written by a worker thread while
  training goes on; a write that fails is reported once and the run goes on.
- :func:`resume_from`: puts a checkpoint's learner and RNG state back and returns its counters.
- :func:`write_failure`: what a checkpoint that could not be written says (what, where,
  the free space there, and the last good checkpoint, which stays the one to resume from).

The files themselves (atomic, safely loaded, rotated) are :mod:`pipeline.learning.checkpoint`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from config import Config
from pipeline.learning.checkpoint import (
    CheckpointError,
    capture_rng_state,
    check_compatible,
    checkpoint_name,
    restore_rng_state,
    rotate_checkpoints,
    save_checkpoint,
)
from pipeline.learning.learner import Learner
from pipeline.run.monitor.keys import COUNTER_KEYS, CounterKey
from pipeline.run.trainer.write_failures import MB, WriteFailures, free_space, short_reason
from pipeline.transport.episodes import EpisodeSummary

BEST_NAME = "best.pt"
MARKS_DIR = "marks"
# Periodic checkpoints kept besides the final one and best.pt: enough to step back past a
# bad save or two (each is ~20 MB with the optimizer), few enough that a long run's
# directory stays small; never a setting anyone changed.
KEEP_CHECKPOINTS = 3
# best.pt needs a return averaged over this many training episodes at least.
MIN_EPISODES_FOR_BEST = 10
ROLLING_EPISODES = 100


def checkpoint_payload(
    learner: Learner, totals: Mapping[CounterKey, int], cfg: Config, num_actions: int
) -> dict[str, Any]:
    """A checkpoint of ``learner`` as it is now: its state is cloned, so the updates that go
    on while a worker thread writes it, and the statistics training puts back after a
    calibration for saving, cannot change it."""
    return {
        "learner": cloned(learner.state_dict()),
        "counters": dict(totals),
        "config": cfg.to_dict(),
        "num_actions": num_actions,
        "rng": capture_rng_state(),
    }


def cloned(payload: Any) -> Any:
    """A copy of a payload whose tensors are cloned (containers copied, other values shared)."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, dict):
        return {key: cloned(value) for key, value in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(cloned(value) for value in payload)
    return payload


def rolling_return(episodes: Iterable[EpisodeSummary]) -> float | None:
    """Mean return of the latest training episodes that started at the level's start (None
    while there are too few)."""
    episodes = [e for e in episodes if e.replayed_steps == 0]
    if len(episodes) < MIN_EPISODES_FOR_BEST:
        return None
    return float(np.mean([e.ret for e in episodes[-ROLLING_EPISODES:]]))


class RunCheckpoints:
    """The checkpoints of one run directory, and the best rolling return saved so far."""

    def __init__(self, directory: Path, keep: int = KEEP_CHECKPOINTS) -> None:
        self.directory = directory
        self.keep = keep
        self.best_return = float("-inf")  # a resumed run carries on with its checkpoint's
        self.last_good: Path | None = None  # the newest checkpoint on disk (a resumed run's, at first)
        self.writing: Path | None = None  # the file the latest save wrote last (the one that failed, if any)

    def path_for(self, frames: int) -> Path:
        return self.directory / checkpoint_name(frames)

    def save(self, payload: dict[str, Any], frames: int, score: float | None) -> Path:
        """Write ``ckpt-<frames>.pt``, and ``best.pt`` too when ``score`` beats the best so far.

        Raises ``CheckpointError`` when a file cannot be written; the files already on disk
        are then untouched (writes are atomic) and none is rotated away.
        """
        path = self.writing = self.path_for(frames)
        save_checkpoint(path, payload)
        self.last_good = path
        if score is not None and score > self.best_return:
            payload["best_return"] = score
            self.writing = self.directory / BEST_NAME
            save_checkpoint(self.writing, payload)
            self.best_return = score  # only once best.pt holds it
        rotate_checkpoints(self.directory, self.keep, self.directory / BEST_NAME)
        return path

    def write_failure(self, what: str, exc: BaseException, payload: Any) -> str:
        """One line on the file of the latest save that could not be written (see :func:`write_failure`)."""
        path = self.writing or self.directory
        return write_failure(what, path, exc, payload_bytes(payload), self.last_good)


def payload_bytes(payload: Any) -> int:
    """The bytes of a payload's tensors: about what its file needs on disk."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, dict):
        return sum(payload_bytes(value) for value in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_bytes(value) for value in payload)
    return 0


def write_failure(what: str, path: Path, exc: BaseException, needed: int, last_good: Path | None) -> str:
    """``what`` (e.g. "periodic checkpoint") could not be written to ``path``: why, what it
    needs and the free space there, and the checkpoint that is still good."""
    good = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint of this run is on disk yet"
    return (
        f"{what} {path} not written ({short_reason(exc)}; it needs about {needed / MB:,.1f} MB, "
        f"{free_space(path.parent)}); no partial file is left, {good}"
    )


def mark_name(frames: int) -> str:
    """``frames-000500000.pt``: marks sort by name in frame order."""
    return f"frames-{frames:09d}.pt"


def mark_payload(learner: Learner, totals: Mapping[CounterKey, int], cfg: Config, num_actions: int) -> dict[str, Any]:
    """What :func:`~pipeline.learning.policy.load_policy` needs: the online net and the
    acting copy when there is one (cloned, so updates going on meanwhile cannot tear
    them), the counters, config and action count; and the update counts of the weights
    and of their BatchNorm statistics (equal when the mark was calibrated for them)."""
    acting = learner.acting
    return {
        "learner": {
            "online": cloned(learner.online.state_dict()),
            "acting": cloned(acting.state_dict()) if acting is not None else None,
            "updates": learner.updates,
            "calibrated_at": learner.calibrated_at,
        },
        "counters": dict(totals),
        "config": cfg.to_dict(),
        "num_actions": num_actions,
    }


def save_mark(checkpoints: Path, payload: dict[str, Any], mark: int) -> Path:
    """Write ``checkpoints/marks/frames-<mark>.pt`` atomically."""
    path = checkpoints / MARKS_DIR / mark_name(mark)
    path.parent.mkdir(exist_ok=True)
    save_checkpoint(path, payload)
    return path


async def write_periodic(
    checkpoints: RunCheckpoints,
    payload: dict[str, Any],
    frames: int,
    score: float | None,
    write_failures: WriteFailures,
    retry_s: float,
) -> Path | None:
    """A periodic checkpoint written by a worker thread while training goes on.

    Writing and fsyncing ~27 MB (twice when best.pt is due) can take seconds on a slow
    disk; in the event loop that stalled the consolidator and the learner alike.
    ``payload`` is a copy taken in the loop (:func:`checkpoint_payload`), so the updates
    that go on meanwhile cannot tear it. A write that fails (a full disk) is reported once through
    ``write_failures`` and retried ``retry_s`` later; the run goes on with its last good
    checkpoint. Returns the path written, None when it failed.
    """
    try:
        path = await asyncio.to_thread(checkpoints.save, payload, frames, score)
    except (CheckpointError, OSError) as exc:
        failure = checkpoints.write_failure("periodic checkpoint", exc, payload)
        write_failures.failed(
            "periodic checkpoint",
            f"{failure}; training goes on, the next attempt is in {retry_s:g} s (reported once while they fail)",
        )
        return None
    write_failures.succeeded("periodic checkpoint", str(path))
    return path


async def write_mark(
    checkpoints: Path, payload: dict[str, Any], mark: int, write_failures: WriteFailures
) -> Path | None:
    """:func:`save_mark` by a worker thread; a failed write is reported once through
    ``write_failures`` and that mark is skipped (None)."""
    try:
        path = await asyncio.to_thread(save_mark, checkpoints, payload, mark)
    except (CheckpointError, OSError) as exc:
        where = free_space(checkpoints)
        write_failures.failed("frame mark", f"frame mark {mark} not written ({short_reason(exc)}; {where})")
        return None
    write_failures.succeeded("frame mark", str(path))
    return path


def resume_from(state: dict[str, Any], path: Path, learner: Learner) -> tuple[dict[CounterKey, int], float]:
    """Load a checkpoint's learner and RNG state; return its counters and best return."""
    check_compatible(learner.online, state["learner"]["online"], path)
    learner.load_state_dict(state["learner"])
    counters = {key: int(state["counters"].get(key, 0)) for key in COUNTER_KEYS}
    restore_rng_state(state["rng"])
    return counters, float(state.get("best_return", float("-inf")))
