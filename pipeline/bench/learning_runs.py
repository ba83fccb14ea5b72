"""The learning benchmark's training runs: one ordinary ``python main.py`` per seed, in a
child process, trained or resumed up to the benchmark's frames, and what its
``metrics.csv`` says of it afterwards (wall time, frames/s, the replay ratio held).

A Ctrl-C reaches the run too (one process group), and it stops by itself, saving its final
checkpoint and replay; a SIGTERM sent to the bench alone (:class:`Terminated`) is passed on
to the run, so the same command resumes it later (:mod:`~pipeline.bench.learning`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from pipeline.common.errors import UserError

__all__ = [
    "EXIT_INTERRUPTED",
    "REPLAY_SAVE_INTERVAL_S",
    "ROOT",
    "Terminated",
    "raise_terminated",
    "run_frames",
    "train",
    "wait_for_clean_stop",
    "wall_and_ratio",
]

ROOT = Path(__file__).resolve().parents[2]
# A Ctrl-C's exit status (128 + SIGINT), as main.py's own.
EXIT_INTERRUPTED = 130
REPLAY_SAVE_INTERVAL_S = 600.0


class Terminated(KeyboardInterrupt):
    """A SIGTERM reached the bench: it stops as on a Ctrl-C."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    """The bench's SIGTERM handler (Python's default would end it at once, leaving its
    training run or mark workers running without it)."""
    raise Terminated


def run_frames(run: Path) -> int:
    """Frames of the newest checkpoint of ``run`` (0 if none)."""
    names = [p.stem for p in (run / "checkpoints").glob("ckpt-*.pt")]
    return max((int(name.split("-")[1]) for name in names), default=0)


def train(run: Path, seed: int, args: argparse.Namespace, train_args: list[str]) -> None:
    """Train (or resume) ``run`` up to ``args.frames``; a failed run is one UserError."""
    command = [sys.executable, "main.py", *train_args, "--total-frames", str(args.frames), "--monitor", "log"]
    command += ["--set", f"mark_interval_frames={args.mark_frames}"]
    if not any(arg.startswith("replay_save_interval_s=") for arg in train_args):
        # A benchmark of hours may be killed (a machine's session ends): save the replay
        # every 10 minutes too, so the same command resumes it with little lost.
        command += ["--set", f"replay_save_interval_s={REPLAY_SAVE_INTERVAL_S:g}"]
    command += ["--seed", str(seed)]
    if run_frames(run):
        command += ["--resume", str(run)]
    else:
        command += ["--run-dir", str(run.parent), "--run-name", run.name]
    print(f"learning bench: {' '.join(command[1:])}", file=sys.stderr, flush=True)
    log = run.parent / f"{run.name}.out"
    with log.open("a") as out:
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = child.wait()
        except KeyboardInterrupt as stop:
            # Not subprocess.call, which kills the child on a KeyboardInterrupt: the run would
            # lose its final checkpoint and the replay since its last save. A terminal's
            # Ctrl-C reaches the run too (one process group), and it stops by itself; a
            # SIGTERM may have reached the bench alone, so the run is sent its own (a run
            # takes any number of them as one stop).
            if isinstance(stop, Terminated):
                child.send_signal(signal.SIGTERM)
            wait_for_clean_stop(child, run)
            raise
    if code != 0:
        raise UserError(f"training run {run} exited with code {code}; see {log}")


def wait_for_clean_stop(child: subprocess.Popen[bytes], run: Path) -> None:
    """Wait, through further Ctrl-Cs, for an interrupted training run to stop.

    No SIGINT is sent to it: the Ctrl-C that interrupted this process reached it as well,
    and a second SIGINT is its "exit at once" (the final checkpoint skipped).
    """
    print(f"learning bench: interrupted; waiting for {run} to stop and save", file=sys.stderr, flush=True)
    while True:
        try:
            child.wait()
            return
        except KeyboardInterrupt:
            continue


def wall_and_ratio(run: Path) -> dict[str, float]:
    """Training wall time summed over the run's processes (a resumed run's clock restarts),
    frames/s over it, the replay ratio held and the frames replayed to reach restart points
    near the frontier (not counted in the frames), from ``metrics.csv``."""
    config = json.loads((run / "config.json").read_text())["config"]
    wall, segment, last = 0.0, 0.0, None
    with (run / "metrics.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            seconds = float(row["time_s"])
            if seconds < segment:  # a new process started
                wall += segment
            segment, last = seconds, row
    wall += segment
    if last is None:
        return {"wall_s": 0.0, "frames_per_s": 0.0, "replay_ratio_held": math.nan, "replayed_frames": 0.0}
    frames, samples, records = (float(last[key]) for key in ("frames", "samples", "records"))
    ratio = samples / max(1.0, records - config["learning_starts"])
    return {
        "wall_s": wall,
        "frames_per_s": frames / wall if wall else 0.0,
        "replay_ratio": ratio,
        "replay_ratio_held": ratio / config["replay_ratio"],
        "replayed_frames": float(last.get("replayed_frames") or 0.0),  # older runs' metrics lack it
    }
