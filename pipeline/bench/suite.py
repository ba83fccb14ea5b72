"""The benchmark suite: ``python main.py bench``.

Every headline figure is a *ratio* of two things measured side by side in the same
run, because absolute frames/s on a shared machine move with whatever else runs on it.
The parts (``--only NAME`` runs one; a comma-separated list runs several):

``raw``
    One spawned process steps the bare emulator (:class:`envs.mario.MarioEnv`, one NES
    frame per step, random actions of the configured action set), then another steps
    the wrapped env (:func:`envs.make_env` with the config's frame skip, grayscale,
    resize, reward scale and limits) likewise. Frames and agent steps are counted
    separately: one agent step is ``frame_skip`` emulator frames.
``collector``
    ONE real collector (the real :class:`~pipeline.run.trainer.Trainer`, ``train=False``,
    ``throttle=False``, so the consolidator drains the ring as fast as it fills) with
    ``epsilon_start = epsilon_end = 0``: the Q-network runs on *every* step, the worst
    case for the collector. It is measured between two runs of the wrapped-env process
    (before and after); ``collector_efficiency = collector / mean(before, after)``.
    Its time split (emulate, preprocess, infer, write, stall, other) comes from the
    phase counters in its ring slot header.
``pipeline``
    ``NUM_PROCESSES`` collectors (at least 2 unless ``--num-processes`` says otherwise)
    with the learner draining but not training, at the *final* exploration epsilon of
    the schedule (``epsilon_end``, 0.05 by default: the network runs on 95% of steps, as
    for the whole run after the decay), against ``NUM_PROCESSES`` independent wrapped-env
    processes running at the same time, before and after.
``consolidator``
    :func:`pipeline.bench.consolidator.bench_consolidator`: flooding producers, the real
    consolidator and replay memory; records/s and MB/s the learner side absorbs.
``learner``
    In a spawned process with the training thread count: updates/s of ``Learner.update``
    alone (batches pre-sampled from a replay memory of synthetic episodes) for eager,
    eager+AMP, compiled and compiled+AMP learners after warm-up, interleaved in rounds so
    drifting machine load hits every variant alike.
``training``
    The whole system training (``Trainer(train=True)``) with a small ``learning_starts``;
    measured for ``--seconds`` after the first update: frames/s, updates/s, replay ratio
    and how the machine's CPU is split between collectors and learner.
``startup``
    From the same training run (``summary.json`` ``startup_s``): compile + warm-up time,
    seconds to the first transition and to the first update.
``evaluator``
    What the in-training evaluator costs collection: the training run without an
    evaluator, then with the evaluator evaluating back to back (the worst case: the
    configured ``eval_interval_s`` is minutes), then without it again, each measured
    for ``max(--seconds, 45)`` seconds (evaluations must finish inside the window); the
    middle run's window opens after the evaluator's first evaluation, so its one-off
    start-up is not counted; ``frames_ratio = with / mean(before, after)``, likewise
    updates/s. At the configured interval the evaluator is busy for one evaluation's
    wall time per interval, so ``frames_ratio_at_interval = 1 - (1 - frames_ratio) x
    wall_s_per_evaluation / eval_interval_s``.
    The evaluator's CPU seconds per evaluation, measured in the middle run, give its
    share of the machine at the configured interval.
``soak``
    Only when asked (``--soak MINUTES`` or ``--only soak``; default 10 minutes): full
    training with a replay memory small enough to fill in the first minute or so, and
    no evaluator (its cost is the evaluator part's); per-minute frames/s and updates/s,
    last minute / first minute after the replay is full, and the learner's RSS growth
    after the replay is full.

``--quick`` shortens every part (and measures fewer learner variants) so the default
suite finishes in about two minutes on a 2-core machine: a smoke run for CI, not a
measurement to quote.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.common.errors import OneLineParser, UserError

PARTS: tuple[str, ...] = (
    "raw",
    "collector",
    "pipeline",
    "consolidator",
    "learner",
    "training",
    "startup",
    "evaluator",
    "soak",
)
DEFAULT_PARTS: tuple[str, ...] = PARTS[:-1]  # soak only when asked: it runs for minutes
DEFAULT_ENV = "SuperMarioBros-1-1-v0"
DEFAULT_SECONDS = 20.0
QUICK_SECONDS = 5.0
DEFAULT_SOAK_MINUTES = 10.0
TARGET_EFFICIENCY = 0.90
TARGET_RECORDS_PER_S = 50_000.0
TARGET_AMP_SPEEDUP = 1.5
TARGET_SOAK_RATIO = 0.95
TARGET_RSS_GROWTH_PCT = 5.0
# At the configured interval the evaluator costs collection under 2 %: below the 2-6 %
# by which two identical training runs of this bench differ on a 2-core box.
TARGET_EVALUATOR_RATIO = 0.98
EVALUATOR_BACK_TO_BACK_S = 0.001  # eval_interval_s of the evaluator part's middle run
# The niced evaluator gets ~10 % of a core on a busy 2-core box: its runs need a window
# long enough for evaluations to finish in it.
EVALUATOR_MIN_WINDOW_S = 45.0
# Collection only needs a replay to drain into; its size does not change the cost.
COLLECT_REPLAY_CAPACITY = 16_384
SOAK_REPLAY_CAPACITY = 3_000  # fills within about a minute on a loaded 2-core CPU box
LEARNER_REPLAY_CAPACITY = 8_192
WORKER_START_TIMEOUT_S = 180.0  # spawning, importing and booting an emulator on a busy box
TRAINER_START_ALLOWANCE_S = 240.0  # compile, spawn collectors, fill learning_starts


def _log(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


# ============================================================================ options


def _number(kind: type, minimum: float, what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not value >= minimum or (isinstance(value, float) and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"expected {what} >= {minimum:g}, got {text!r}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    from config import PRESET_NAMES

    parser = OneLineParser(
        prog="main.py bench",
        description="Measure the training system; every headline is a ratio measured side by side in one run.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short parts and fewer learner variants (the suite in ~2 minutes; a CI smoke run)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--only", metavar="NAME", help=f"run only these parts (comma-separated): {', '.join(PARTS)}")
    parser.add_argument(
        "--soak",
        metavar="MINUTES",
        type=_number(float, 0.5, "minutes"),
        help=f"add the soak part, MINUTES long (default {DEFAULT_SOAK_MINUTES:g} with --only soak)",
    )
    parser.add_argument(
        "--seconds",
        metavar="S",
        type=_number(float, 1.0, "seconds"),
        help=f"measured seconds per part (default {DEFAULT_SECONDS:g}, {QUICK_SECONDS:g} with --quick)",
    )
    parser.add_argument("--preset", choices=PRESET_NAMES, help="hardware preset (default: PRESET in config.py)")
    parser.add_argument(
        "--num-processes",
        metavar="N",
        type=_number(int, 1, "a whole number"),
        help="collector processes of the pipeline, training and soak parts (default: the config's, at least 2)",
    )
    parser.add_argument("--env", dest="env_id", metavar="ID", help=f"environment id (default {DEFAULT_ENV})")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), help="learner device")
    parser.add_argument(
        "--keep-runs", metavar="DIR", help="keep the run directories (metrics.csv, summary.json, logs) under DIR"
    )
    return parser


@dataclass
class BenchOptions:
    parts: tuple[str, ...]
    quick: bool
    seconds: float
    soak_minutes: float
    json_path: Path | None
    keep_runs: Path | None


def parse_options(argv: Sequence[str]) -> tuple[BenchOptions, Any]:
    """Parse the command line; returns the options and the resolved configuration."""
    from config import ConfigError, resolve_config

    args = build_parser().parse_args(list(argv))
    if args.only:
        parts = tuple(dict.fromkeys(p.strip() for p in args.only.split(",") if p.strip()))
        unknown = [p for p in parts if p not in PARTS]
        if unknown or not parts:
            raise UserError(
                f"bench: --only {args.only!r}: unknown part(s) {', '.join(unknown) or '(none)'}; "
                f"choose from {', '.join(PARTS)}"
            )
    else:
        parts = DEFAULT_PARTS + (("soak",) if args.soak is not None else ())
    json_path = Path(args.json) if args.json else None
    if json_path is not None and not json_path.parent.exists():
        raise UserError(f"bench: --json {args.json}: directory {json_path.parent} does not exist")
    keep = Path(args.keep_runs) if args.keep_runs else None
    seconds = args.seconds if args.seconds is not None else (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    options = BenchOptions(
        parts=parts,
        quick=args.quick,
        seconds=float(seconds),
        soak_minutes=float(args.soak if args.soak is not None else DEFAULT_SOAK_MINUTES),
        json_path=json_path,
        keep_runs=keep,
    )
    cli: dict[str, Any] = {
        "env_id": args.env_id or DEFAULT_ENV,
        "num_processes": args.num_processes,
        "device": args.device,
        "monitor": "off",
    }
    try:
        resolved = resolve_config(cli, preset=args.preset)
        # A pipeline of one collector is the collector part again: unless the user chose
        # the count, the multi-collector parts use at least two.
        if (
            resolved.sources["num_processes"] not in ("command line", "config.py knob")
            and resolved.config.num_processes < 2
        ):
            cli["num_processes"] = 2
            resolved = resolve_config(cli, preset=args.preset)
            resolved.sources["num_processes"] = "bench (at least 2 collectors)"
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    return options, resolved


# ============================================================================ figures


@dataclass(frozen=True)
class FigureSpec:
    label: str
    fmt: str
    meaning: str
    target: tuple[str, float] | None = None  # (">=" or "<=", threshold)


def _spec(label: str, fmt: str, meaning: str, target: tuple[str, float] | None = None) -> FigureSpec:
    return FigureSpec(label, fmt, meaning, target)


PHASE_MEANING = {
    "emulate": "% of wall time in the emulator (env.step minus preprocessing)",
    "preprocess": "% of wall time in grayscale + resize",
    "infer": "% of wall time evaluating the Q-network (CPU, 1 thread)",
    "write": "% of wall time writing records into the ring",
    "stall": "% of wall time waiting for a full ring",
    "other": "% of wall time in none of the above (loop, counters, resets)",
}

FIGURES: dict[str, dict[str, FigureSpec]] = {
    "raw": {
        "raw_frames_per_s": _spec(
            "bare emulator frames/s", "{:,.0f}", "1 process, MarioEnv, 1 NES frame per step, random actions"
        ),
        "wrapped_frames_per_s": _spec(
            "wrapped env frames/s", "{:,.0f}", "1 process, make_env stack (frame skip, grayscale, resize, limits)"
        ),
        "wrapped_steps_per_s": _spec(
            "wrapped env agent steps/s", "{:,.1f}", "agent steps (1 step = frame_skip frames)"
        ),
        "wrapper_efficiency": _spec("wrapped / bare frames", "{:.3f}", "emulator speed left after the wrappers"),
    },
    "collector": {
        "collector_frames_per_s": _spec(
            "collector frames/s", "{:,.0f}", "1 real collector, epsilon 0 (network on every step), ring + consolidator"
        ),
        "collector_steps_per_s": _spec("collector agent steps/s", "{:,.1f}", "agent steps of that collector"),
        "wrapped_before_frames_per_s": _spec(
            "wrapped env frames/s, before", "{:,.0f}", "1 wrapped-env process just before"
        ),
        "wrapped_after_frames_per_s": _spec(
            "wrapped env frames/s, after", "{:,.0f}", "1 wrapped-env process just after"
        ),
        "collector_efficiency": _spec(
            "collector efficiency", "{:.3f}", "collector / mean(wrapped before, after)", (">=", TARGET_EFFICIENCY)
        ),
        "env_share": _spec("collector env share", "{:.3f}", "(emulate + preprocess) / wall time of the collector"),
        **{f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning) for name, meaning in PHASE_MEANING.items()},
        "infer_ms_per_step": _spec("inference ms/step", "{:.2f}", "Q-network forward per agent step"),
        "collector_cpu_pct": _spec("collector CPU %", "{:.0f}", "of one core"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "consolidator process, of one core"),
    },
    "pipeline": {
        "collectors": _spec("collectors", "{:.0f}", "NUM_PROCESSES"),
        "epsilon": _spec("epsilon", "{:.2f}", "fixed exploration (network runs on 1 - epsilon of steps)"),
        "pipeline_frames_per_s": _spec("pipeline frames/s", "{:,.0f}", "all collectors, learner draining"),
        "pipeline_steps_per_s": _spec("pipeline agent steps/s", "{:,.1f}", "all collectors"),
        "wrapped_before_frames_per_s": _spec(
            "wrapped env frames/s, before", "{:,.0f}", "NUM_PROCESSES wrapped-env processes at once, just before"
        ),
        "wrapped_after_frames_per_s": _spec("wrapped env frames/s, after", "{:,.0f}", "the same, just after"),
        "pipeline_efficiency": _spec(
            "pipeline efficiency", "{:.3f}", "pipeline / mean(wrapped before, after)", (">=", TARGET_EFFICIENCY)
        ),
        "env_share": _spec("collector env share", "{:.3f}", "(emulate + preprocess) / wall, mean per collector"),
        **{
            f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning + ", mean per collector")
            for name, meaning in PHASE_MEANING.items()
        },
        "collectors_cpu_pct": _spec("collectors CPU %", "{:.0f}", "sum over collectors (100 = one core)"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "consolidator process"),
    },
    "consolidator": {
        "records_per_s": _spec(
            "records/s", "{:,.0f}", "drained into replay from flooding producers", (">=", TARGET_RECORDS_PER_S)
        ),
        "mb_per_s": _spec("MB/s", "{:,.0f}", "record bytes per second"),
        "producers": _spec("producers", "{:.0f}", "flooding producer processes"),
        "stall_pct": _spec("producer stall %", "{:.1f}", "producers waiting on a full ring"),
    },
    "learner": {
        "threads": _spec("torch threads", "{:.0f}", "the learner's intra-op threads in training"),
        "batch_size": _spec("batch size", "{:.0f}", "samples per update"),
        **{
            f"{v}_updates_per_s": _spec(
                f"{v.replace('_', '+')} updates/s", "{:,.1f}", "Learner.update only, after warm-up"
            )
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        **{
            f"{v}_samples_per_s": _spec(f"{v.replace('_', '+')} samples/s", "{:,.0f}", "updates/s x batch size")
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        **{
            f"{v}_warmup_s": _spec(f"{v.replace('_', '+')} warm-up s", "{:.1f}", "compile (if any) + 3 warm-up updates")
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        "compiled_speedup": _spec("compiled / eager", "{:.2f}", "updates/s ratio, fp32"),
        "amp_speedup": _spec("eager+AMP / eager", "{:.2f}", "updates/s ratio, no compile"),
        "compiled_amp_speedup": _spec(
            "compiled+AMP / eager", "{:.2f}", "updates/s ratio (the configured learner)", (">=", TARGET_AMP_SPEEDUP)
        ),
    },
    "training": {
        "frames_per_s": _spec("frames/s", "{:,.0f}", "emulator frames collected while training"),
        "steps_per_s": _spec("agent steps/s", "{:,.1f}", "agent steps collected while training"),
        "updates_per_s": _spec("updates/s", "{:,.1f}", "learner updates"),
        "samples_per_s": _spec("samples/s", "{:,.0f}", "updates/s x batch size"),
        "replay_ratio": _spec("replay ratio", "{:.2f}", "samples drawn / transitions inserted in the window"),
        "replay_ratio_target": _spec("configured replay ratio", "{:.2f}", "REPLAY_RATIO the limiter holds"),
        "collectors_cpu_pct": _spec("collectors CPU %", "{:.0f}", "sum over collectors (100 = one core)"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "learner process (all its threads)"),
        "machine_cpu_pct": _spec("machine CPU %", "{:.0f}", "collectors + learner, of all cores (100 = every core)"),
        **{
            f"learner_{name}_pct": _spec(f"learner {name} %", "{:.1f}", f"% of learner wall time in {name}")
            for name in ("wait", "sample", "update", "publish", "consolidate")
        },
        **{
            f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning + ", mean per collector")
            for name, meaning in PHASE_MEANING.items()
        },
    },
    "startup": {
        "compile_s": _spec("compile + warm-up s", "{:.1f}", "before the collectors start"),
        "first_transition_s": _spec("first transition s", "{:.1f}", "collectors started -> first record in replay"),
        "first_update_s": _spec(
            "first update s", "{:.1f}", "collectors started -> first update (learning_starts below)"
        ),
        "learning_starts": _spec("learning_starts", "{:,.0f}", "transitions before the first update (bench setting)"),
    },
    "evaluator": {
        "frames_per_s_without": _spec(
            "frames/s without evaluator", "{:,.0f}", "training, mean of the runs before and after"
        ),
        "frames_per_s_with": _spec("frames/s with evaluator", "{:,.0f}", "training, evaluator evaluating back to back"),
        "frames_ratio": _spec("frames/s with / without", "{:.3f}", "worst case: evaluating back to back"),
        "updates_ratio": _spec("updates/s with / without", "{:.3f}", "worst case: evaluating back to back"),
        "evaluations": _spec("evaluations in the window", "{:.0f}", "finished while measuring"),
        "evaluator_cpu_pct": _spec("evaluator CPU %", "{:.0f}", "of one core, niced (+10)"),
        "wall_s_per_evaluation": _spec(
            "wall s per evaluation", "{:.1f}", "mean over the run's evaluations (eval_episodes episodes each)"
        ),
        "cpu_s_per_evaluation": _spec("CPU s per evaluation", "{:.1f}", "mean over the run's evaluations"),
        "eval_interval_s": _spec("configured eval interval s", "{:.0f}", "eval_interval_s of the preset"),
        "busy_share_at_interval": _spec(
            "evaluator busy share at that interval", "{:.3f}", "wall s per evaluation / interval"
        ),
        "frames_ratio_at_interval": _spec(
            "frames/s ratio at that interval",
            "{:.4f}",
            "1 - (1 - worst-case ratio) x busy share",
            (">=", TARGET_EVALUATOR_RATIO),
        ),
        "machine_pct_at_interval": _spec(
            "machine CPU % at that interval", "{:.2f}", "CPU s per evaluation / interval / cores"
        ),
    },
    "soak": {
        "minutes": _spec("minutes", "{:.1f}", "soak length"),
        "replay_capacity": _spec("replay capacity", "{:,.0f}", "small so that it fills early"),
        "replay_full_s": _spec("replay full at s", "{:.0f}", "warm-up ends: replay full and training"),
        "frames_per_s_first": _spec("frames/s, first minute", "{:,.0f}", "first full minute after the replay is full"),
        "frames_per_s_last": _spec("frames/s, last minute", "{:,.0f}", "last full minute"),
        "frames_ratio": _spec(
            "frames/s last / first", "{:.3f}", "collection does not slow down", (">=", TARGET_SOAK_RATIO)
        ),
        "updates_per_s_first": _spec(
            "updates/s, first minute", "{:,.1f}", "first full minute after the replay is full"
        ),
        "updates_per_s_last": _spec("updates/s, last minute", "{:,.1f}", "last full minute"),
        "updates_ratio": _spec(
            "updates/s last / first", "{:.3f}", "training does not slow down", (">=", TARGET_SOAK_RATIO)
        ),
        "rss_full_mb": _spec("learner RSS at full, MB", "{:,.0f}", "when the replay became full"),
        "rss_end_mb": _spec("learner RSS at end, MB", "{:,.0f}", "at the last monitor tick"),
        "rss_growth_pct": _spec(
            "learner RSS growth %", "{:.1f}", "after the replay is full", ("<=", TARGET_RSS_GROWTH_PCT)
        ),
        "collectors_rss_full_mb": _spec(
            "collectors RSS at full, MB", "{:,.0f}", "sum over collectors when the replay became full"
        ),
        "collectors_rss_end_mb": _spec("collectors RSS at end, MB", "{:,.0f}", "at the last monitor tick"),
        "collectors_rss_growth_pct": _spec(
            "collectors RSS growth %", "{:.1f}", "after the replay is full", ("<=", TARGET_RSS_GROWTH_PCT)
        ),
    },
}


def target_met(spec: FigureSpec, value: float) -> bool | None:
    if spec.target is None or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    op, threshold = spec.target
    return value >= threshold if op == ">=" else value <= threshold


# ============================================================================ env workers


def _env_worker(conn, kind: str, env_id: str, env_kwargs: dict[str, Any], seed: int) -> None:
    """Spawn target: build one env in this process, then step it when asked.

    Messages: ``(seconds, start_at)`` -> run random actions from ``start_at`` (a
    ``time.monotonic`` value, shared by all processes on Linux) for ``seconds`` and reply
    with the counts; ``None`` -> exit.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    import numpy as np

    try:
        built = time.perf_counter()
        step, reset, frames_per_step, num_actions = _build_stepper(kind, env_id, env_kwargs, seed)
        rng = np.random.default_rng(seed)
        actions = rng.integers(num_actions, size=4096)
        _run_env(step, reset, frames_per_step, actions, 0.5)  # warm caches, leave the start screen
        conn.send({"ready": True, "build_s": time.perf_counter() - built})
    except Exception:  # noqa: BLE001 - report to the parent, which raises it
        conn.send({"ready": False, "error": traceback.format_exc()})
        return
    while True:
        message = conn.recv()
        if message is None:
            return
        seconds, start_at = message
        delay = start_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        conn.send(_run_env(step, reset, frames_per_step, actions, seconds))


def _build_stepper(kind: str, env_id: str, env_kwargs: dict[str, Any], seed: int):
    from envs import make_env

    if kind == "raw":
        from envs.actions import action_bytes
        from envs.mario import MarioEnv

        env = MarioEnv(env_id)
        table = action_bytes(env_kwargs["action_set"])
        env.reset(seed=seed)

        def step(action: int) -> bool:
            _, _, terminated, truncated, _ = env.step(table[action])
            return terminated or truncated

        return step, env.reset, 1, len(table)
    env = make_env(env_id, seed=seed, **env_kwargs)
    env.reset(seed=seed)
    frames_per_step = 1 if env_id.startswith("Catch") else int(env_kwargs["frame_skip"])

    def step(action: int) -> bool:
        _, _, terminated, truncated, _ = env.step(action)
        return terminated or truncated

    return step, env.reset, frames_per_step, int(env.action_space.n)


def _run_env(step, reset, frames_per_step: int, actions, seconds: float) -> dict[str, float]:
    n = len(actions)
    steps = episodes = 0
    cpu0 = time.process_time()
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        for _ in range(16):  # check the clock every 16 steps
            if step(int(actions[steps % n])):
                reset()
                episodes += 1
            steps += 1
        now = time.perf_counter()
    elapsed = now - start
    return {
        "steps": steps,
        "frames": steps * frames_per_step,
        "episodes": episodes,
        "elapsed_s": elapsed,
        "cpu_s": time.process_time() - cpu0,
    }


class EnvPool:
    """Spawned env processes (isolated like real collectors) that step on request.

    Idle workers block in ``recv`` and use no CPU, so a pool can stay up while other
    parts are measured.
    """

    def __init__(self, kinds: Sequence[str], env_id: str, env_kwargs: dict[str, Any], seed: int = 0) -> None:
        ctx = mp.get_context("spawn")
        self.kinds = list(kinds)
        self.conns = []
        self.procs = []
        try:
            for i, kind in enumerate(self.kinds):
                parent, child = ctx.Pipe()
                proc = ctx.Process(
                    target=_env_worker,
                    args=(child, kind, env_id, env_kwargs, seed + 1000 * i),
                    name=f"bench-{kind}-{i}",
                    daemon=True,
                )
                proc.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(proc)
            for i, conn in enumerate(self.conns):
                if not conn.poll(WORKER_START_TIMEOUT_S):
                    raise RuntimeError(
                        f"env worker {i} ({self.kinds[i]}) did not start in {WORKER_START_TIMEOUT_S:.0f} s"
                    )
                reply = conn.recv()
                if not reply.get("ready"):
                    raise RuntimeError(f"env worker {i} ({self.kinds[i]}) failed:\n{reply.get('error', '')}")
        except BaseException:
            self.close()
            raise

    def run(self, indices: Sequence[int], seconds: float) -> list[dict[str, float]]:
        """Step workers ``indices`` at the same time for ``seconds``; their counts."""
        start_at = time.monotonic() + 0.1
        for i in indices:
            self.conns[i].send((seconds, start_at))
        results = []
        for i in indices:
            if not self.conns[i].poll(seconds + 120):
                raise RuntimeError(f"env worker {i} did not answer")
            results.append(self.conns[i].recv())
        return results

    def frames_per_s(self, indices: Sequence[int], seconds: float) -> tuple[float, float]:
        """Total frames/s and agent steps/s of ``indices`` stepping at once."""
        results = self.run(indices, seconds)
        return (sum(r["frames"] / r["elapsed_s"] for r in results), sum(r["steps"] / r["elapsed_s"] for r in results))

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for proc in self.procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in self.conns:
            conn.close()
        self.conns, self.procs = [], []


# ============================================================================ trainer runs


READY = {
    # the window opens once every collector has written frames ...
    "collecting": lambda snap: bool(snap.collectors) and all(c.get("frames", 0) > 0 for c in snap.collectors),
    # ... or once the learner has made its first update
    "training": lambda snap: snap.counters.get("updates", 0) > 0,
    # ... or once training runs and the evaluator has finished its first evaluation (its
    # start-up, importing torch and booting an emulator at nice 10, is a one-off)
    "evaluating": lambda snap: snap.counters.get("updates", 0) > 0 and snap.gauges.get("evaluations", 0) >= 1,
}


def _make_bench_trainer(
    cfg,
    *,
    sources: dict[str, str],
    train: bool,
    throttle: bool,
    window_s: float,
    warmup_s: float,
    ready: str,
    time_limit_s: float,
):
    """A real Trainer that records every monitor snapshot and ends itself after a window.

    The window opens ``warmup_s`` after ``READY[ready](snapshot)`` first holds and closes
    once ``window_s`` seconds of snapshots are in it (``window_s = inf``: at
    ``time_limit_s``, counted like the Trainer's from when the collectors start).
    """
    from pipeline.run.trainer import Trainer

    is_ready = READY[ready]

    class BenchTrainer(Trainer):
        def __init__(self) -> None:
            super().__init__(cfg, sources=sources, train=train, throttle=throttle, time_limit_s=time_limit_s)
            self.snaps: list[Any] = []
            self.window: list[int] = []  # indices of snapshots in the window
            self._ready_at: float | None = None

        def snapshot(self):
            snap = super().snapshot()
            if self.stop_event is None or self.stop_event.is_set():
                return snap  # after the stop: collectors are gone, their figures are not steady
            self.snaps.append(snap)
            if self._ready_at is None and is_ready(snap):
                self._ready_at = snap.time
            if self._ready_at is not None and snap.time >= self._ready_at + warmup_s:
                self.window.append(len(self.snaps) - 1)
                if snap.time - self.snaps[self.window[0]].time >= window_s:
                    self.request_stop("benchmark window complete")
            return snap

    return BenchTrainer()


@dataclass
class TrainerRun:
    """What a benchmark Trainer run left: its snapshots, window and summary.json."""

    snaps: list[Any]
    window: list[int]
    summary: dict[str, Any]
    startup: dict[str, float]
    stop_reason: str
    root: str


def _trainer_worker(conn, cfg_dict: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """Spawn target: one benchmark Trainer run in a fresh learner process, as main.py has."""
    from config import Config
    from pipeline.learning.checkpoint import CheckpointError
    from pipeline.run.trainer import TrainingError

    try:
        trainer = _make_bench_trainer(Config(**cfg_dict), **kwargs)
        trainer.run()
        summary_path = trainer.paths.root / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        conn.send(
            {
                "ok": True,
                "run": TrainerRun(
                    trainer.snaps,
                    trainer.window,
                    summary,
                    dict(trainer.startup),
                    trainer.stop_reason,
                    str(trainer.paths.root),
                ),
            }
        )
    except (CheckpointError, TrainingError) as exc:
        conn.send({"ok": False, "user_error": str(exc)})
    except BaseException:  # noqa: BLE001 - the parent reports it
        conn.send({"ok": False, "error": traceback.format_exc()})


def run_trainer(
    cfg,
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
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    kwargs = dict(
        sources=sources,
        train=train,
        throttle=throttle,
        window_s=window_s,
        warmup_s=warmup_s,
        ready=ready,
        time_limit_s=time_limit_s,
    )
    proc = ctx.Process(target=_trainer_worker, args=(child, cfg.to_dict(), kwargs), name=f"bench-{what}")
    proc.start()
    child.close()
    reply: dict[str, Any] | None = None
    interrupted = False
    try:
        deadline = time.monotonic() + time_limit_s + TRAINER_START_ALLOWANCE_S
        while reply is None and time.monotonic() < deadline:
            try:
                if parent.poll(0.5):
                    reply = parent.recv()
                elif not proc.is_alive():
                    break
            except KeyboardInterrupt:
                interrupted = True  # the child got the same SIGINT; collect its shutdown
            except EOFError:
                break
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()  # SIGTERM: the Trainer still stops collectors and unlinks
            proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        parent.close()
    if interrupted or (reply and reply.get("ok") and reply["run"].stop_reason.startswith("interrupted")):
        raise KeyboardInterrupt
    if reply is None:
        raise RuntimeError(f"{what}: the learner process exited with code {proc.exitcode} and no result")
    if not reply["ok"]:
        if "user_error" in reply:
            raise UserError(reply["user_error"])
        raise RuntimeError(f"{what}: learner process failed: " + reply["error"].strip().splitlines()[-1])
    run = reply["run"]
    if len(run.window) < 2:
        raise RuntimeError(
            f"{what}: no steady window within {time_limit_s:.0f} s "
            f"(stopped: {run.stop_reason or 'unknown'}); see the logs in {run.root}"
        )
    return run


def _window_figures(snaps: list[Any], first: int, last: int) -> dict[str, float]:
    """Rates, phase shares and CPU between snapshots ``first`` and ``last``."""
    from pipeline.run.monitor import COLLECTOR_PHASES, LEARNER_PHASES

    a, b = snaps[first], snaps[last]
    dt = b.time - a.time
    n = max(1, len(b.collectors))

    def delta(key: str) -> float:
        return b.counters.get(key, 0.0) - a.counters.get(key, 0.0)

    out = {f"{key}_per_s": delta(key) / dt for key in ("frames", "steps", "records", "updates", "samples")}
    out["window_s"] = dt
    phases = {name: 100.0 * delta(f"collector_{name}_ns") / 1e9 / dt / n for name in COLLECTOR_PHASES}
    for name, pct in phases.items():
        out[f"{name}_pct"] = pct
    out["other_pct"] = max(0.0, 100.0 - sum(phases.values()))
    out["env_share"] = (phases["emulate"] + phases["preprocess"]) / 100.0
    steps = delta("steps")
    out["infer_ms_per_step"] = delta("collector_infer_ns") / 1e6 / steps if steps else float("nan")
    for name in LEARNER_PHASES:
        out[f"learner_{name}_pct"] = 100.0 * delta(f"learner_{name}_ns") / 1e9 / dt
    inside = snaps[first + 1 : last + 1]  # cpu_pct is measured since the previous tick
    out["collectors_cpu_pct"] = _mean([sum(c.get("cpu_pct", 0.0) for c in s.collectors) for s in inside])
    out["learner_cpu_pct"] = _mean([s.gauges.get("learner_cpu_pct", float("nan")) for s in inside])
    out["replay_ratio"] = delta("samples") / delta("records") if delta("records") else float("nan")
    out["evaluator_cpu_pct"] = _mean([s.gauges.get("evaluator_cpu_pct", float("nan")) for s in inside])
    out["evaluations"] = b.gauges.get("evaluations", 0.0) - a.gauges.get("evaluations", 0.0)
    # The evaluator's own seconds, summed over every evaluation of the run up to b.
    out["evaluations_run"] = b.gauges.get("evaluations", 0.0)
    out["eval_wall_s_total"] = b.gauges.get("eval_wall_s_total", 0.0)
    out["eval_cpu_s_total"] = b.gauges.get("eval_cpu_s_total", 0.0)
    return out


def _mean(values: Sequence[float]) -> float:
    values = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


# ============================================================================ learner worker


LEARNER_VARIANTS: dict[str, tuple[bool, bool]] = {  # name -> (compile, amp)
    "eager": (False, False),
    "eager_amp": (False, True),
    "compiled": (True, False),
    "compiled_amp": (True, True),
}


def _learner_worker(conn, spec: dict[str, Any]) -> None:
    """Spawn target: time ``Learner.update`` for each variant, interleaved in rounds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        conn.send({"ok": True, "result": _measure_learners(spec)})
    except Exception:  # noqa: BLE001 - the parent reports it
        conn.send({"ok": False, "error": traceback.format_exc()})


def _synthetic_replay(spec: dict[str, Any], device):
    import numpy as np

    from pipeline.learning.replay import ReplayMemory
    from pipeline.transport.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, RECORD_DTYPE

    streams = spec["streams"]
    memory = ReplayMemory(
        spec["capacity"],
        streams,
        frame_stack=spec["frame_stack"],
        n_step=spec["n_step"],
        gamma=spec["gamma"],
        device=device,
        seed=spec["seed"],
    )
    rng = np.random.default_rng(spec["seed"])
    per = memory.capacity_per_stream
    episode = 200  # 199 steps, then the FINAL record
    for stream in range(streams):
        records = np.zeros(per, RECORD_DTYPE)
        records["frame"] = rng.integers(0, 256, (per, 84, 84), dtype=np.uint8)
        records["action"] = rng.integers(0, spec["num_actions"], per)
        records["reward"] = rng.standard_normal(per).astype(np.float32)
        position = np.arange(per) % episode
        records["flags"] = np.where(position == 0, FLAG_START, 0)
        records["flags"] |= np.where(position == episode - 2, FLAG_TERMINATED, 0).astype(np.uint8)
        records["flags"] |= np.where(position == episode - 1, FLAG_FINAL, 0).astype(np.uint8)
        memory.add(stream, records)
    return memory


def _measure_learners(spec: dict[str, Any]) -> dict[str, float]:
    import torch

    from pipeline.learning.learner import Learner, LearnerSettings

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    device = torch.device(spec["device"])
    replay = _synthetic_replay(spec, torch.device(spec["replay_device"]))
    batch_size = spec["batch_size"]
    batches = [replay.sample(batch_size) for _ in range(16)]

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    learners: dict[str, Learner] = {}
    out: dict[str, float] = {}
    for name in spec["variants"]:
        compile_, amp = LEARNER_VARIANTS[name]
        settings = LearnerSettings(**{**spec["settings"], "compile": compile_, "amp": amp, "device": str(device)})
        learner = Learner(spec["num_actions"], settings)
        out[f"{name}_warmup_s"] = learner.warmup(batch_size)
        for batch in batches[:2]:  # the real batch types once, untimed
            learner.update(batch)
        sync()
        if compile_ and not learner.compiled:
            out[f"{name}_compile_failed"] = 1.0
        learners[name] = learner
    elapsed = dict.fromkeys(learners, 0.0)
    updates = dict.fromkeys(learners, 0)
    for round_ in range(spec["rounds"]):
        order = list(learners) if round_ % 2 == 0 else list(reversed(learners))  # no variant always first
        for name in order:
            learner = learners[name]
            learner.update(batches[0])  # back in cache after the other variants
            sync()
            start = time.perf_counter()
            deadline = start + spec["round_s"]
            n = 0
            while True:
                learner.update(batches[n % len(batches)])
                n += 1
                if n % 4 == 0:
                    sync()
                    if time.perf_counter() >= deadline:
                        break
            elapsed[name] += time.perf_counter() - start
            updates[name] += n
    for name in learners:
        rate = updates[name] / elapsed[name]
        out[f"{name}_updates_per_s"] = rate
        out[f"{name}_samples_per_s"] = rate * batch_size
    eager = out.get("eager_updates_per_s")
    if eager:
        for name, key in (
            ("compiled", "compiled_speedup"),
            ("eager_amp", "amp_speedup"),
            ("compiled_amp", "compiled_amp_speedup"),
        ):
            if f"{name}_updates_per_s" in out:
                out[key] = out[f"{name}_updates_per_s"] / eager
    return out


# ============================================================================ the suite


@dataclass
class PartResult:
    figures: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # JSON only (lists, settings)
    error: str = ""
    seconds: float = 0.0


class Suite:
    def __init__(self, options: BenchOptions, resolved) -> None:
        self.options = options
        self.resolved = resolved
        self.cfg = resolved.config
        self.results: dict[str, PartResult] = {}
        self.pool: EnvPool | None = None
        self._training: Any = None  # the training run, reused by the startup part
        self.run_root = (
            Path(tempfile.mkdtemp(prefix="mario-bench-")) if options.keep_runs is None else options.keep_runs
        )
        self.run_root.mkdir(parents=True, exist_ok=True)
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    # -- plumbing -----------------------------------------------------------------------
    @property
    def seconds(self) -> float:
        return self.options.seconds

    def env_kwargs(self) -> dict[str, Any]:
        cfg = self.cfg
        return dict(
            action_set=cfg.action_set,
            frame_skip=cfg.frame_skip,
            reward_scale=cfg.reward_scale,
            no_progress_steps=cfg.no_progress_steps,
            max_episode_steps=cfg.max_episode_steps,
        )

    def is_mario(self) -> bool:
        return not self.cfg.env_id.startswith("Catch")

    def workers(self) -> EnvPool:
        """The env pool, started on first use: worker 0 steps the bare emulator (a wrapped
        env for Catch), workers 1.. the wrapped env (NUM_PROCESSES of them if the
        pipeline part runs, else one)."""
        if self.pool is None:
            wrapped = self.cfg.num_processes if "pipeline" in self.options.parts else 1
            kinds = (["raw"] if self.is_mario() else ["wrapped"]) + ["wrapped"] * wrapped
            _log(f"starting {len(kinds)} env processes")
            self.pool = EnvPool(kinds, self.cfg.env_id, self.env_kwargs(), seed=self.cfg.seed)
        return self.pool

    def part_config(self, name: str, **changes: Any):
        from config import validate

        settings: dict[str, Any] = dict(
            run_dir=str(self.run_root),
            run_name=f"{self.stamp}-{name}",
            resume="",
            monitor="off",
            total_frames=0,
            checkpoint_interval_s=3600.0,
        )
        cfg = dataclasses.replace(self.cfg, **{**settings, **changes})
        validate(cfg)
        return cfg

    def run(self) -> dict[str, PartResult]:
        try:
            for name in self.options.parts:
                _log(f"{name} ...")
                started = time.monotonic()
                result = PartResult()
                try:
                    getattr(self, f"part_{name}")(result)
                except (UserError, KeyboardInterrupt):
                    raise
                except Exception as exc:  # noqa: BLE001 - one broken part should not hide the rest
                    result.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                    result.details["traceback"] = traceback.format_exc()
                    _log(f"{name} failed: {result.error}")
                result.seconds = time.monotonic() - started
                self.results[name] = result
                _log(f"{name} done in {result.seconds:.0f} s")
        finally:
            if self.pool is not None:
                self.pool.close()
                self.pool = None
            self._training = None
            if self.options.keep_runs is None:
                shutil.rmtree(self.run_root, ignore_errors=True)
        return self.results

    # -- parts ----------------------------------------------------------------------------
    def part_raw(self, result: PartResult) -> None:
        pool, s = self.workers(), self.seconds
        figures = result.figures
        wrapped_index = 1
        if self.is_mario():
            figures["raw_frames_per_s"], _ = pool.frames_per_s([0], s)
        else:
            result.details["note"] = "Catch-v0 has no emulator: only the wrapped env is measured"
        figures["wrapped_frames_per_s"], figures["wrapped_steps_per_s"] = pool.frames_per_s([wrapped_index], s)
        if "raw_frames_per_s" in figures:
            figures["wrapper_efficiency"] = figures["wrapped_frames_per_s"] / figures["raw_frames_per_s"]

    def part_collector(self, result: PartResult) -> None:
        pool, s = self.workers(), self.seconds
        before, _ = pool.frames_per_s([1], s)
        cfg = self.part_config(
            "collector", num_processes=1, epsilon_start=0.0, epsilon_end=0.0, **self._collect_only_sizes(1)
        )
        window = self._collect(cfg, "collector")
        after, _ = pool.frames_per_s([1], s)
        f = result.figures
        f["collector_frames_per_s"] = window["frames_per_s"]
        f["collector_steps_per_s"] = window["steps_per_s"]
        f["wrapped_before_frames_per_s"], f["wrapped_after_frames_per_s"] = before, after
        f["collector_efficiency"] = window["frames_per_s"] / ((before + after) / 2)
        f["env_share"] = window["env_share"]
        for name in PHASE_MEANING:
            f[f"{name}_pct"] = window[f"{name}_pct"]
        f["infer_ms_per_step"] = window["infer_ms_per_step"]
        f["collector_cpu_pct"] = window["collectors_cpu_pct"]
        f["learner_cpu_pct"] = window["learner_cpu_pct"]
        result.details["epsilon"] = 0.0
        result.details["window_s"] = window["window_s"]

    def part_pipeline(self, result: PartResult) -> None:
        n = self.cfg.num_processes
        pool, s = self.workers(), self.seconds
        indices = list(range(1, n + 1))
        before, _ = pool.frames_per_s(indices, s)
        epsilon = self.cfg.epsilon_end
        cfg = self.part_config("pipeline", epsilon_start=epsilon, epsilon_end=epsilon, **self._collect_only_sizes(n))
        window = self._collect(cfg, "pipeline")
        after, _ = pool.frames_per_s(indices, s)
        f = result.figures
        f["collectors"] = float(n)
        f["epsilon"] = epsilon
        f["pipeline_frames_per_s"] = window["frames_per_s"]
        f["pipeline_steps_per_s"] = window["steps_per_s"]
        f["wrapped_before_frames_per_s"], f["wrapped_after_frames_per_s"] = before, after
        f["pipeline_efficiency"] = window["frames_per_s"] / ((before + after) / 2)
        f["env_share"] = window["env_share"]
        for name in PHASE_MEANING:
            f[f"{name}_pct"] = window[f"{name}_pct"]
        f["collectors_cpu_pct"] = window["collectors_cpu_pct"]
        f["learner_cpu_pct"] = window["learner_cpu_pct"]
        result.details["window_s"] = window["window_s"]

    def _collect_only_sizes(self, collectors: int) -> dict[str, int]:
        capacity = max(64 * collectors, min(self.cfg.replay_capacity, COLLECT_REPLAY_CAPACITY))
        return {
            "replay_capacity": capacity,
            "learning_starts": min(self.cfg.learning_starts, capacity),
            "batch_size": min(self.cfg.batch_size, capacity),
        }

    def _collect(self, cfg, what: str) -> dict[str, float]:
        run = run_trainer(
            dataclasses.replace(cfg, monitor_interval_s=1.0),
            what,
            sources=self.resolved.sources,
            train=False,
            throttle=False,
            window_s=self.seconds,
            warmup_s=1.0,
            ready="collecting",
            time_limit_s=TRAINER_START_ALLOWANCE_S + self.seconds + 30,
        )
        return _window_figures(run.snaps, run.window[0], run.window[-1])

    def part_consolidator(self, result: PartResult) -> None:
        from pipeline.bench.consolidator import bench_consolidator

        seconds = max(2.0, self.seconds / 2) if self.options.quick else self.seconds
        out = bench_consolidator(seconds, producers=max(1, self.cfg.num_processes), capacity=self.cfg.ring_capacity)
        result.figures.update({k: float(out[k]) for k in ("records_per_s", "mb_per_s", "producers", "stall_pct")})
        result.details.update({k: v for k, v in out.items() if k not in result.figures})

    def part_learner(self, result: PartResult) -> None:
        import envs
        from pipeline.run.trainer import TrainingError, resolve_device

        cfg = self.cfg
        try:
            device = resolve_device(cfg.device)
        except TrainingError as exc:  # no CUDA
            raise UserError(str(exc)) from None
        threads = cfg.learner_threads or max(1, (os.cpu_count() or 1) - cfg.num_processes)
        variants = ["eager", "compiled_amp"] if self.options.quick else list(LEARNER_VARIANTS)
        rounds = 2 if self.options.quick else 4
        per_variant = max(2.0, self.seconds / 2)
        spec = {
            "variants": variants,
            "rounds": rounds,
            "round_s": per_variant / rounds,
            "threads": threads,
            "device": str(device),
            "replay_device": str(device if cfg.replay_device == "auto" else resolve_device(cfg.replay_device)),
            "batch_size": cfg.batch_size,
            "num_actions": envs.num_actions(cfg.env_id, cfg.action_set),
            "streams": max(1, cfg.num_processes),
            "capacity": min(cfg.replay_capacity, LEARNER_REPLAY_CAPACITY),
            "frame_stack": cfg.frame_stack,
            "n_step": cfg.n_step,
            "gamma": cfg.gamma,
            "seed": cfg.seed,
            "settings": dict(
                learning_rate=cfg.learning_rate,
                adam_eps=cfg.adam_eps,
                gamma=cfg.gamma,
                grad_clip=cfg.grad_clip,
                grad_accum=cfg.grad_accum,
                target_sync_updates=cfg.target_sync_updates,
                dueling=cfg.dueling,
                frame_stack=cfg.frame_stack,
            ),
        }
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_learner_worker, args=(child, spec), name="bench-learner", daemon=True)
        proc.start()
        child.close()
        try:
            limit = 900 + len(variants) * (per_variant + 60)
            if not parent.poll(limit):
                raise RuntimeError(f"learner benchmark did not finish in {limit:.0f} s")
            reply = parent.recv()
        except EOFError:
            raise RuntimeError(f"learner benchmark process died (exit code {proc.exitcode})") from None
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            parent.close()
        if not reply["ok"]:
            result.details["traceback"] = reply["error"]
            raise RuntimeError("learner benchmark failed: " + reply["error"].strip().splitlines()[-1])
        out = reply["result"]
        result.figures.update({"threads": float(threads), "batch_size": float(cfg.batch_size)})
        result.figures.update({k: v for k, v in out.items() if k in FIGURES["learner"]})
        result.details.update(
            {
                "device": str(device),
                "variants": variants,
                "rounds": rounds,
                "seconds_per_variant": per_variant,
                **{k: v for k, v in out.items() if k not in FIGURES["learner"]},
            }
        )

    def _learning_starts(self, capacity: int) -> int:
        wanted = 500 if self.options.quick else 2_000
        return max(self.cfg.batch_size * 4, min(wanted, self.cfg.learning_starts, capacity // 2))

    def _training_window(
        self, name: str, eval_interval_s: float = 0.0, window_s: float | None = None
    ) -> dict[str, Any]:
        """One whole-system training run, measured for ``window_s`` (default ``--seconds``)
        from 2 s after the first update (with an evaluator: and its first evaluation).

        No evaluator unless ``eval_interval_s > 0`` (the evaluator part compares both).
        """
        window_s = self.seconds if window_s is None else window_s
        capacity = self.cfg.replay_capacity
        cfg = self.part_config(
            name,
            learning_starts=self._learning_starts(capacity),
            monitor_interval_s=1.0,
            eval_interval_s=eval_interval_s,
        )
        ready = "evaluating" if eval_interval_s > 0 else "training"
        run = run_trainer(
            cfg,
            name,
            sources=self.resolved.sources,
            train=True,
            throttle=True,
            window_s=window_s,
            warmup_s=2.0,
            ready=ready,
            time_limit_s=TRAINER_START_ALLOWANCE_S + window_s + 30,
        )
        summary = run.summary
        return {
            "window": _window_figures(run.snaps, run.window[0], run.window[-1]),
            "startup": summary.get("startup_s", run.startup),
            "learning_starts": cfg.learning_starts,
            "replay_ratio": cfg.replay_ratio,
            "batch_size": cfg.batch_size,
            "compiled": summary.get("compiled"),
            "amp_dtype": summary.get("amp_dtype"),
            "collectors": cfg.num_processes,
        }

    def _train_run(self) -> dict[str, Any]:
        """The training part's run (shared with the startup and evaluator parts)."""
        if self._training is None:
            self._training = self._training_window("training")
        return self._training

    def part_training(self, result: PartResult) -> None:
        run = self._train_run()
        w = run["window"]
        f = result.figures
        for key in (
            "frames_per_s",
            "steps_per_s",
            "updates_per_s",
            "samples_per_s",
            "replay_ratio",
            "collectors_cpu_pct",
            "learner_cpu_pct",
        ):
            f[key] = w[key]
        f["replay_ratio_target"] = run["replay_ratio"]
        f["machine_cpu_pct"] = (w["collectors_cpu_pct"] + w["learner_cpu_pct"]) / (os.cpu_count() or 1)
        for name in ("wait", "sample", "update", "publish", "consolidate"):
            f[f"learner_{name}_pct"] = w[f"learner_{name}_pct"]
        for name in PHASE_MEANING:
            f[f"{name}_pct"] = w[f"{name}_pct"]
        result.details.update(
            {k: run[k] for k in ("learning_starts", "batch_size", "compiled", "amp_dtype", "collectors")}
        )
        result.details["window_s"] = w["window_s"]

    def part_startup(self, result: PartResult) -> None:
        run = self._train_run()
        startup = run["startup"]
        f = result.figures
        f["compile_s"] = float(startup.get("compile+warm-up", float("nan")))
        f["first_transition_s"] = float(startup.get("first transition", float("nan")))
        f["first_update_s"] = float(startup.get("first update", float("nan")))
        f["learning_starts"] = float(run["learning_starts"])

    def part_evaluator(self, result: PartResult) -> None:
        seconds = self.seconds if self.options.quick else max(self.seconds, EVALUATOR_MIN_WINDOW_S)
        before = self._training_window("no-evaluator", window_s=seconds)["window"]
        with_evaluator = self._training_window("evaluator", eval_interval_s=EVALUATOR_BACK_TO_BACK_S, window_s=seconds)[
            "window"
        ]
        after = self._training_window("no-evaluator-again", window_s=seconds)["window"]
        f = result.figures
        f["frames_per_s_without"] = (before["frames_per_s"] + after["frames_per_s"]) / 2
        f["frames_per_s_with"] = with_evaluator["frames_per_s"]
        f["frames_ratio"] = f["frames_per_s_with"] / f["frames_per_s_without"]
        f["updates_ratio"] = with_evaluator["updates_per_s"] / ((before["updates_per_s"] + after["updates_per_s"]) / 2)
        f["evaluations"] = with_evaluator["evaluations"]
        f["evaluator_cpu_pct"] = with_evaluator["evaluator_cpu_pct"]
        # Per evaluation, as the evaluator timed them: every evaluation of the run (the window
        # opens after the first, so there is at least one), not only those inside the window.
        done = with_evaluator["evaluations_run"]
        nan = float("nan")
        f["wall_s_per_evaluation"] = with_evaluator["eval_wall_s_total"] / done if done else nan
        f["cpu_s_per_evaluation"] = with_evaluator["eval_cpu_s_total"] / done if done else nan
        # At the configured interval the evaluator is busy for one evaluation's wall time
        # per interval and idle (asleep) otherwise, so it costs that fraction of the
        # back-to-back slowdown.
        interval = self.cfg.eval_interval_s
        f["eval_interval_s"] = interval
        if interval > 0 and done:
            f["busy_share_at_interval"] = min(1.0, f["wall_s_per_evaluation"] / interval)
            f["frames_ratio_at_interval"] = 1.0 - (1.0 - f["frames_ratio"]) * f["busy_share_at_interval"]
            f["machine_pct_at_interval"] = 100.0 * f["cpu_s_per_evaluation"] / interval / (os.cpu_count() or 1)
        result.details.update(
            {
                "frames_per_s": {
                    "before": before["frames_per_s"],
                    "with": with_evaluator["frames_per_s"],
                    "after": after["frames_per_s"],
                },
                "updates_per_s": {
                    "before": before["updates_per_s"],
                    "with": with_evaluator["updates_per_s"],
                    "after": after["updates_per_s"],
                },
                "eval_episodes": self.cfg.eval_episodes,
                "eval_max_steps": self.cfg.eval_max_steps,
                "window_s": with_evaluator["window_s"],
            }
        )
        result.details["evaluations_in_run"] = done

    def part_soak(self, result: PartResult) -> None:
        minutes = self.options.soak_minutes
        n = self.cfg.num_processes
        capacity = max(64 * n, self.cfg.batch_size, min(self.cfg.replay_capacity, SOAK_REPLAY_CAPACITY))
        capacity -= capacity % n  # so "full" is exactly capacity
        cfg = self.part_config(
            "soak",
            replay_capacity=capacity,
            learning_starts=max(self.cfg.batch_size * 4, min(1_000, capacity // 4)),
            monitor_interval_s=min(5.0, self.cfg.monitor_interval_s),
            checkpoint_interval_s=self.cfg.checkpoint_interval_s,  # as in a real run
            # No evaluator: its evaluations every few minutes would make the
            # minutes unequal (the first ones come before its first evaluation);
            # what it costs is the evaluator part's figure.
            eval_interval_s=0.0,
        )
        run = run_trainer(
            cfg,
            "soak",
            sources=self.resolved.sources,
            train=True,
            throttle=True,
            window_s=float("inf"),
            warmup_s=0.0,
            ready="training",
            time_limit_s=minutes * 60.0,
        )
        result.figures.update(soak_figures(run.snaps, capacity, minutes))
        result.details.update(soak_details(run.snaps))
        if math.isnan(result.figures.get("frames_ratio", math.nan)):
            result.details["note"] = (
                "the minute ratios need two full minutes after the replay is full; use a longer --soak"
            )
            _log(f"soak: {result.details['note']}")
        result.details["learning_starts"] = cfg.learning_starts


def _counter_at(snaps: list[Any], t: float, key: str) -> float:
    """A cumulative counter at time ``t``, linearly interpolated between snapshots."""
    previous = snaps[0]
    for snap in snaps:
        if snap.time >= t:
            if snap.time == previous.time:
                return snap.counters.get(key, 0.0)
            share = (t - previous.time) / (snap.time - previous.time)
            a, b = previous.counters.get(key, 0.0), snap.counters.get(key, 0.0)
            return a + share * (b - a)
        previous = snap
    return snaps[-1].counters.get(key, 0.0)


def _rate(snaps: list[Any], start: float, end: float, key: str) -> float:
    return (_counter_at(snaps, end, key) - _counter_at(snaps, start, key)) / (end - start)


def soak_figures(snaps: list[Any], capacity: int, minutes: float) -> dict[str, float]:
    """First and last full minute after the replay is full, and the RSS growth since then."""
    nan = float("nan")
    out = {"minutes": minutes, "replay_capacity": float(capacity)}
    full = next(
        (s for s in snaps if s.gauges.get("replay_size", 0) >= capacity and s.counters.get("updates", 0) > 0), None
    )
    if full is None:
        out.update(replay_full_s=nan, frames_ratio=nan, updates_ratio=nan, rss_growth_pct=nan)
        return out
    out["replay_full_s"] = full.time
    end = snaps[-1].time
    if end - full.time >= 120:  # two minutes that do not overlap
        last_start = end - 60
        for key in ("frames", "updates"):
            first = _rate(snaps, full.time, full.time + 60, key)
            last = _rate(snaps, last_start, last_start + 60, key)
            out[f"{key}_per_s_first"], out[f"{key}_per_s_last"] = first, last
            out[f"{key}_ratio"] = last / first if first else nan
    else:
        out.update(frames_ratio=nan, updates_ratio=nan)
    for prefix, gauge in (("", "learner_rss_mb"), ("collectors_", "collectors_rss_mb")):
        rss_full = full.gauges.get(gauge, nan)
        rss_end = snaps[-1].gauges.get(gauge, nan)
        out[f"{prefix}rss_full_mb"], out[f"{prefix}rss_end_mb"] = rss_full, rss_end
        out[f"{prefix}rss_growth_pct"] = 100.0 * (rss_end - rss_full) / rss_full if rss_full else nan
    return out


def soak_details(snaps: list[Any]) -> dict[str, Any]:
    """Per-minute rates and RSS since the start of the soak run (for the JSON)."""
    end = snaps[-1].time
    start = snaps[0].time
    minutes = []
    t = start
    while t + 60 <= end + 1e-9:
        minutes.append(
            {
                "from_s": t,
                "frames_per_s": _rate(snaps, t, t + 60, "frames"),
                "updates_per_s": _rate(snaps, t, t + 60, "updates"),
                "rss_mb": next(
                    (s.gauges.get("learner_rss_mb") for s in snaps if s.time >= t + 60),
                    snaps[-1].gauges.get("learner_rss_mb"),
                ),
            }
        )
        t += 60
    return {"per_minute": minutes}


# ============================================================================ output


def _format(spec: FigureSpec | None, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return (spec.fmt if spec else "{:.3g}").format(value)


def table_rows(results: dict[str, PartResult]) -> list[tuple[str, str, str, str, str]]:
    """(part, figure, value, target, meaning) rows in the suite's order."""
    rows = []
    for part, result in results.items():
        specs = FIGURES.get(part, {})
        if result.error:
            rows.append((part, "ERROR", "-", "", result.error))
            continue
        for key, value in result.figures.items():
            spec = specs.get(key)
            target = ""
            if spec is not None and spec.target is not None:
                met = target_met(spec, value)
                op, threshold = spec.target
                verdict = "?" if met is None else ("ok" if met else "MISS")
                target = f"{op} {threshold:g} {verdict}"
            rows.append((part, spec.label if spec else key, _format(spec, value), target, spec.meaning if spec else ""))
    return rows


def render_table(results: dict[str, PartResult], header: str, *, rich_output: bool | None = None) -> None:
    rows = table_rows(results)
    if rich_output is None:
        rich_output = sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
    if rich_output:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=header, show_header=True, header_style="bold")
        for name, justify in (
            ("part", "left"),
            ("figure", "left"),
            ("value", "right"),
            ("target", "left"),
            ("meaning", "left"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        previous = None
        for part, *rest in rows:
            style = "red" if rest[2].endswith("MISS") or rest[0] == "ERROR" else None
            table.add_row(part if part != previous else "", *rest, style=style, end_section=False)
            previous = part
        Console().print(table)
        return
    print(header)
    widths = [max(len(r[i]) for r in rows + [("part", "figure", "value", "target", "meaning")]) for i in range(4)]
    line = f"{'part':<{widths[0]}}  {'figure':<{widths[1]}}  {'value':>{widths[2]}}  {'target':<{widths[3]}}  meaning"
    print(line)
    print("-" * len(line))
    for part, figure, value, target, meaning in rows:
        print(f"{part:<{widths[0]}}  {figure:<{widths[1]}}  {value:>{widths[2]}}  {target:<{widths[3]}}  {meaning}")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def results_json(
    results: dict[str, PartResult], options: BenchOptions, resolved, argv: Sequence[str], elapsed_s: float
) -> dict[str, Any]:
    import torch

    cfg = resolved.config
    targets = []
    for part, result in results.items():
        for key, value in result.figures.items():
            spec = FIGURES.get(part, {}).get(key)
            if spec is not None and spec.target is not None:
                targets.append(
                    {
                        "part": part,
                        "figure": key,
                        "value": value,
                        "op": spec.target[0],
                        "threshold": spec.target[1],
                        "met": target_met(spec, value),
                    }
                )
    return _json_safe(
        {
            "command": "python main.py bench " + " ".join(argv),
            "quick": options.quick,
            "seconds_per_part": options.seconds,
            "elapsed_s": elapsed_s,
            "machine": {
                "cores": os.cpu_count(),
                "torch": torch.__version__,
                "loadavg_1m_at_end": os.getloadavg()[0],
                "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            },
            "config": {
                "preset": resolved.preset,
                **{
                    k: getattr(cfg, k)
                    for k in (
                        "env_id",
                        "num_processes",
                        "batch_size",
                        "replay_capacity",
                        "replay_ratio",
                        "ring_capacity",
                        "frame_skip",
                        "action_set",
                        "device",
                        "compile",
                        "amp",
                        "learner_threads",
                    )
                },
                "num_processes_source": resolved.sources.get("num_processes"),
            },
            "parts": {
                part: {"figures": r.figures, "details": r.details, "error": r.error or None, "seconds": r.seconds}
                for part, r in results.items()
            },
            "targets": targets,
        }
    )


# ============================================================================ command


def bench_command(argv: list[str]) -> int:
    """``python main.py bench [...]``: run the suite, print one table; 0, or 1 if a part failed."""
    options, resolved = parse_options(argv)
    cfg = resolved.config
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    started = time.monotonic()
    suite = Suite(options, resolved)
    interrupted = False
    try:
        results = suite.run()
    except KeyboardInterrupt:
        interrupted = True
        results = suite.results
        _log("interrupted" + ("; the results so far:" if results else ""))
    elapsed = time.monotonic() - started
    header = (
        f"mario-dqn bench{' --quick' if options.quick else ''}: {cfg.env_id}, preset {resolved.preset}, "
        f"{cfg.num_processes} collectors, {options.seconds:g} s per part, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f}), {elapsed:.0f} s"
    )
    if results:
        render_table(results, header)
    if options.json_path is not None:
        payload = results_json(results, options, resolved, argv, elapsed)
        options.json_path.write_text(json.dumps(payload, indent=2) + "\n")
    if options.keep_runs is not None:
        _log(f"run directories kept in {options.keep_runs}")
    if interrupted:
        return 130
    return 1 if any(r.error for r in results.values()) else 0


if __name__ == "__main__":  # python -m pipeline.bench.suite [...]
    try:
        sys.exit(bench_command(sys.argv[1:]))
    except UserError as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
