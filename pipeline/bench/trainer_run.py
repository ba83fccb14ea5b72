"""Benchmark Trainer runs: a real Trainer in its own process, measured over a steady window.

:func:`run_trainer` starts a plain :class:`~pipeline.run.trainer.trainer.Trainer` in a spawned
learner process, as ``python main.py`` would, with a :class:`BenchWindow` as its
``on_snapshot`` hook: the window records every monitor snapshot, opens once the run is
steady (:data:`READY`) and stops the run when it has lasted long enough.
:func:`window_figures` turns two snapshots of the window into rates, phase shares and
CPU figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from pipeline.common.child import Child, ChildError, ChildExited, ChildTimeout
from pipeline.common.errors import UserError
from pipeline.common.gauges import (
    EVAL_CPU_S_TOTAL,
    EVAL_WALL_S_TOTAL,
    EVALUATIONS,
    EVALUATOR_CPU_PCT,
    EVALUATOR_PROGRESS_GAUGES,
    EVALUATOR_STEPS,
)
from pipeline.run.monitor.keys import LEARNER_PHASES, collector_phase_key, learner_phase_key, share_key
from pipeline.run.monitor.monitor import Snapshot
from pipeline.transport.ring import COLLECTOR_PHASES

if TYPE_CHECKING:  # importing the trainer imports torch: not for every bench process
    from config import Config
    from pipeline.run.trainer.trainer import Trainer

TRAINER_START_ALLOWANCE_S = 240.0  # compile, spawn collectors, fill learning_starts
# The child winds down on its own once the window closes; past this, SIGTERM (the
# Trainer still stops its collectors and unlinks its shared memory), and past as long
# again, SIGKILL.
TRAINER_JOIN_S = 30.0

READY: dict[str, Callable[[Any], bool]] = {
    # the window opens once every collector has written frames ...
    "collecting": lambda snap: bool(snap.collectors) and all(c.get("frames", 0) > 0 for c in snap.collectors),
    # ... or once the learner has made its first update
    "training": lambda snap: snap.counters.get("updates", 0) > 0,
    # ... or once training runs and the evaluator is playing (its start-up, importing torch
    # and booting an emulator at nice 10, is a one-off). Not once it has finished an
    # evaluation: niced beside two collectors and the learner on 2 cores it gets a few
    # percent of a core, and its first evaluation (up to 11 episodes of 2,000 steps) took
    # longer than the part's whole time limit, so the window never opened.
    "evaluating": lambda snap: snap.counters.get("updates", 0) > 0 and snap.gauges.get(EVALUATOR_STEPS, 0) > 0,
}


class NoSteadyWindow(RuntimeError):
    """A benchmark run ended before its steady window was long enough: nothing measured.

    On a busy machine that is the load's doing, not a failure (the suite says so in the
    part's row); on a quiet one it is a failure.
    """


class BenchWindow:
    """The Trainer's ``on_snapshot`` hook: records every snapshot and ends the run after a window.

    The window opens ``warmup_s`` after ``READY[ready](snapshot)`` first holds and closes
    once ``window_s`` seconds of snapshots are in it (``window_s = inf``: never, the run
    ends at the Trainer's ``time_limit_s``). The Trainer calls the hook only while the
    run is going: after the stop the collectors are gone and their figures not steady.
    """

    def __init__(self, *, window_s: float, warmup_s: float, ready: str) -> None:
        self.window_s = window_s
        self.warmup_s = warmup_s
        self.is_ready = READY[ready]
        self.snaps: list[Snapshot] = []
        self.window: list[int] = []  # indices of snapshots in the window
        self._ready_at: float | None = None

    def __call__(self, snap: Snapshot, trainer: Trainer) -> None:
        self.snaps.append(snap)
        if self._ready_at is None and self.is_ready(snap):
            self._ready_at = snap.time
        if self._ready_at is not None and snap.time >= self._ready_at + self.warmup_s:
            self.window.append(len(self.snaps) - 1)
            if snap.time - self.snaps[self.window[0]].time >= self.window_s:
                trainer.request_stop("benchmark window complete")


def _make_bench_trainer(
    cfg: Config,
    *,
    sources: dict[str, str],
    train: bool,
    throttle: bool,
    window_s: float,
    warmup_s: float,
    ready: str,
    time_limit_s: float,
) -> tuple[Trainer, BenchWindow]:
    """A real Trainer whose snapshots a :class:`BenchWindow` records, and that window."""
    from pipeline.run.trainer.trainer import Trainer

    window = BenchWindow(window_s=window_s, warmup_s=warmup_s, ready=ready)
    collection = None
    if cfg.backend == "ray":  # the ray part: the same Trainer, its collectors behind a node agent
        from pipeline.cluster.ray_backend import RayBackend

        collection = RayBackend(cfg)
    trainer = Trainer(
        cfg,
        sources=sources,
        train=train,
        throttle=throttle,
        time_limit_s=time_limit_s,
        on_snapshot=window,
        collection=collection,
    )
    return trainer, window


@dataclass
class TrainerRun:
    """What a benchmark Trainer run left: its snapshots, window and summary.json."""

    snaps: list[Any]
    window: list[int]
    summary: dict[str, Any]
    startup: dict[str, float]
    stop_reason: str
    root: str


def _trainer_worker(conn: Connection, cfg_dict: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Spawn target: one benchmark Trainer run in a fresh learner process, as main.py has."""
    from config import Config

    trainer, window = _make_bench_trainer(Config(**cfg_dict), **kwargs)
    trainer.run()
    root = trainer.resources.paths.root
    summary_path = root / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    conn.send(TrainerRun(window.snaps, window.window, summary, dict(trainer.startup), trainer.stop_reason, str(root)))


def run_trainer(
    cfg: Config,
    what: str,
    *,
    sources: dict[str, str],
    train: bool,
    throttle: bool,
    window_s: float,
    warmup_s: float,
    ready: str,
    time_limit_s: float,
) -> TrainerRun:
    """Run a benchmark Trainer in a spawned learner process and return what it recorded.

    Its own process, like ``python main.py``: a fresh RSS for the soak, no compile caches
    or thread settings carried between parts. Ctrl-C reaches it too (same process group):
    it stops its collectors and exits cleanly, and this raises KeyboardInterrupt.
    """
    kwargs = dict(
        sources=sources,
        train=train,
        throttle=throttle,
        window_s=window_s,
        warmup_s=warmup_s,
        ready=ready,
        time_limit_s=time_limit_s,
    )
    # Not a daemon: the Trainer starts collector processes of its own.
    child = Child(_trainer_worker, (cfg.to_dict(), kwargs), name=f"bench-{what}", daemon=False)
    run: TrainerRun | None = None
    try:
        run = child.receive(time_limit_s + TRAINER_START_ALLOWANCE_S, through_interrupt=True)
    except (ChildExited, ChildTimeout):
        pass  # reported below, once the exit code is known
    except ChildError as exc:
        # Imported here, in the parent only when a run failed: the trainer imports torch.
        from pipeline.learning.checkpoint import CheckpointError
        from pipeline.run.trainer.pieces import TrainingError

        if exc.raised(CheckpointError) or exc.raised(TrainingError) or exc.raised(UserError):
            raise UserError(exc.message) from None
        raise RuntimeError(f"{what}: learner process failed: " + exc.last_line) from None
    finally:
        child.close(TRAINER_JOIN_S, terminate_s=TRAINER_JOIN_S)
    if run is None:
        raise RuntimeError(f"{what}: the learner process exited with code {child.exitcode} and no result")
    if run.stop_reason.startswith("interrupted"):
        raise KeyboardInterrupt
    if len(run.window) < 2:
        raise NoSteadyWindow(
            f"{what}: no steady window within {time_limit_s:.0f} s "
            f"(stopped: {run.stop_reason or 'unknown'}); see the logs in {run.root}"
        )
    return run


def window_figures(snaps: Sequence[Any], first: int, last: int) -> dict[str, float]:
    """Rates, phase shares and CPU between snapshots ``first`` and ``last``."""
    a, b = snaps[first], snaps[last]
    dt = b.time - a.time
    n = max(1, len(b.collectors))

    def delta(key: str) -> float:
        return b.counters.get(key, 0.0) - a.counters.get(key, 0.0)

    out = {f"{key}_per_s": delta(key) / dt for key in ("frames", "steps", "records", "updates", "samples")}
    out["window_s"] = dt
    phases = {name: 100.0 * delta(collector_phase_key(name)) / 1e9 / dt / n for name in COLLECTOR_PHASES}
    for name, pct in phases.items():
        out[f"{name}_pct"] = pct
    out["other_pct"] = max(0.0, 100.0 - sum(phases.values()))
    out["env_share"] = (phases["emulate"] + phases["preprocess"]) / 100.0
    steps = delta("steps")
    out["infer_ms_per_step"] = delta(collector_phase_key("infer")) / 1e6 / steps if steps else float("nan")
    for name in LEARNER_PHASES:
        out[share_key(learner_phase_key(name))] = 100.0 * delta(learner_phase_key(name)) / 1e9 / dt
    inside = snaps[first + 1 : last + 1]  # cpu_pct is measured since the previous tick
    out["collectors_cpu_pct"] = mean([sum(c.get("cpu_pct", 0.0) for c in s.collectors) for s in inside])
    out["learner_cpu_pct"] = mean([s.gauges.get("learner_cpu_pct", float("nan")) for s in inside])
    out["replay_ratio"] = delta("samples") / delta("records") if delta("records") else float("nan")
    out["max_poll_gap_ms"] = max((s.gauges.get("poll_gap_ms", 0.0) for s in inside), default=float("nan"))
    out[EVALUATOR_CPU_PCT] = mean([s.gauges.get(EVALUATOR_CPU_PCT, float("nan")) for s in inside])
    out[EVALUATIONS] = b.gauges.get(EVALUATIONS, 0.0) - a.gauges.get(EVALUATIONS, 0.0)
    # The evaluator's own seconds, summed over every evaluation of the run up to b.
    out[f"{EVALUATIONS}_run"] = b.gauges.get(EVALUATIONS, 0.0)
    out[EVAL_WALL_S_TOTAL] = b.gauges.get(EVAL_WALL_S_TOTAL, 0.0)
    out[EVAL_CPU_S_TOTAL] = b.gauges.get(EVAL_CPU_S_TOTAL, 0.0)
    # The evaluator's steps and seconds of evaluating in the window, as they went
    # (pipeline.run.evaluator.progress), and in the whole run up to b.
    for key in EVALUATOR_PROGRESS_GAUGES:
        out[f"{key}_window"] = b.gauges.get(key, 0.0) - a.gauges.get(key, 0.0)
        out[f"{key}_run"] = b.gauges.get(key, 0.0)
    return out


def mean(values: Sequence[float]) -> float:
    """The mean of the numbers among ``values`` (NaN and non-numbers skipped); NaN if none."""
    values = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")
