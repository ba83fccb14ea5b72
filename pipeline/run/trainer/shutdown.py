"""The steps of a training run's shutdown that write what the run leaves behind.

The :class:`~pipeline.run.trainer.trainer.Trainer` runs them in order once its event loop has
ended (collectors asked to stop through the weights block and joined): the final
evaluation waited for (:func:`finish_evaluations`), the rings drained (:func:`drain`), the
final checkpoint (:func:`save_final`), the replay and ``summary.json``
(:func:`write_summary`), and the monitor's last row (:func:`final_monitor_row`). Then the
run's release stack releases what the startup created (monitor, shared memory, lock),
whatever failed here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.common.files import atomic_write
from pipeline.learning.checkpoint import CheckpointError
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor.monitor import Monitor, Snapshot
from pipeline.run.trainer.checkpoints import RunCheckpoints
from pipeline.run.trainer.interrupts import WaitInterrupts
from pipeline.run.trainer.write_failures import WriteFailures, free_space, short_reason

__all__ = ["drain", "final_monitor_row", "finish_evaluations", "save_final", "write_summary"]

logger = logging.getLogger("mario.trainer")

# How long a run that reached total_frames waits for the evaluation of its final weights:
# ten minutes hold a 10+1-episode evaluation of 2,000-step Mario episodes on a busy core,
# and a wedged evaluator cannot hold the run's end for longer (Ctrl-C skips it).
FINAL_EVALUATION_TIMEOUT_S = 600.0


def finish_evaluations(evaluations: Evaluations, *, final: bool, timeout_s: float = FINAL_EVALUATION_TIMEOUT_S) -> None:
    """Wait for the final evaluation when one was asked for (``final``; the collectors are
    stopped, so it has the CPU; a Ctrl-C skips it), then stop the evaluator."""
    if evaluations.evaluator is None:
        return
    if final:
        logger.info("final evaluation of the last weights (waiting up to %g s; Ctrl-C skips it)", timeout_s)
        with WaitInterrupts() as interrupts:
            outcome = evaluations.finish(timeout_s, give_up=lambda: bool(interrupts.received))
        logger.info("final evaluation: %s", outcome)
    evaluations.stop(timeout_s=10)


def drain(consolidator: Any) -> None:
    """With the collectors stopped, read everything they committed (a pass takes at most
    ``max_records_per_slot`` per slot, so it loops until a pass is empty)."""
    while consolidator.poll():
        pass


def save_final(
    checkpoints: RunCheckpoints,
    payload: dict[str, Any],
    frames: int,
    score: float | None,
    *,
    run_root: Path,
    stop_reason: str,
) -> tuple[Path | None, str]:
    """The final checkpoint (and best.pt when due): its path, and "" or why it could not
    be written (one line, which the trainer raises once everything is released: the
    replay, summary and shared memory are still to be dealt with). Only best.pt failing
    is a warning: the final checkpoint itself is on disk."""
    path = checkpoints.path_for(frames)
    try:
        checkpoints.save(payload, frames, score)
    except (CheckpointError, OSError) as exc:
        failure = checkpoints.write_failure("the final checkpoint", exc, payload)
        if checkpoints.last_good != path:
            return None, f"{failure}; resume from it with --resume {run_root} once there is space"
        logger.warning(failure)
    logger.info("final checkpoint: %s (%s)", path, stop_reason or "stopped")
    return path, ""


def write_summary(root: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` in ``root``, atomically: never a truncated one on a full disk, where
    it is a warning."""
    path = root / "summary.json"
    try:
        with atomic_write(path, "w") as handle:
            handle.write(json.dumps(summary, indent=2))
    except OSError as exc:
        logger.warning("could not write %s (%s; %s)", path, short_reason(exc), free_space(path.parent))


def final_monitor_row(
    monitor: Monitor, snapshot: Callable[[], Snapshot], write_failures: WriteFailures, root: Path
) -> None:
    """The monitor's last snapshot, shown and written with the status ``stopped``."""
    try:
        monitor.update(snapshot(), status="stopped")
    except OSError as exc:  # metrics.csv or TensorBoard on a full disk: said once for the whole run
        write_failures.metrics_failed(root, exc)
