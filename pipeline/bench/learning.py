"""``python main.py bench --only learning``: train a configuration for N frames on one or
more seeds, then measure how fast it learned.

Each seed is one ordinary training run (``python main.py`` in a child process, with the
flags after ``--`` and ``mark_interval_frames`` set), in ``<out>/<name>-s<seed>``. A run
already there is reused: finished ones are only evaluated, shorter ones are resumed
(their replay with them) up to ``--frames``, so a long benchmark can be stopped with
Ctrl-C and continued later by the same command. After training, every mark is evaluated
greedily (:mod:`~pipeline.bench.learning_curves`), and the bench writes

- ``<out>/<name>.json``: per seed, the curve (x_pos and flag rate per mark), frames to
  x_pos 1,800 and to the first flag, the area under the curve, wall time, frames/s and
  the replay ratio held; and the same summed over seeds;
- ``<out>/learning.png``: every variant found in ``<out>`` (one colour each, seeds
  overlaid), drawn after the runs, never during them.

Learning per frame does not depend on the machine (the replay ratio is enforced), so
curves are in frames; wall time is reported beside them with the CPU model.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline.bench.learning_curves import (
    X_POS_GOAL,
    MarkResult,
    area_under_curve,
    evaluate_marks,
    first_frames,
    plot_curves,
    x_pos_at,
)
from pipeline.common.errors import OneLineParser, UserError
from pipeline.common.files import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
REPORT_FRAMES = (500_000, 1_000_000, 2_000_000)
PLOT_NAME = "learning.png"
REPLAY_SAVE_INTERVAL_S = 600.0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="main.py bench --only learning",
        description="Train for N frames on each seed, then evaluate the frame marks greedily and report the "
        "learning curve. Training flags go after --, e.g. -- --set gamma=0.9.",
    )
    parser.add_argument("--name", default="default", help="variant name: runs are <out>/<name>-s<seed>")
    parser.add_argument("--frames", type=int, default=2_000_000, help="emulator frames per seed (default 2,000,000)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--mark-frames", type=int, default=100_000, help="frames between marks (default 100,000)")
    parser.add_argument("--episodes", type=int, default=1, help="greedy episodes per mark (1-1 is deterministic)")
    parser.add_argument("--max-steps", type=int, default=2000, help="agent steps per evaluation episode")
    parser.add_argument(
        "--epsilon",
        type=float,
        default=0.0,
        help="random-action rate of the evaluation (default 0: greedy; with it, --episodes > 1 "
        "measures how robust the policy is, and the flag rate becomes a rate)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/learning"), help="where runs and results go")
    parser.add_argument("--no-train", action="store_true", help="only evaluate and report the runs already there")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The bench's own flags, and the training flags after ``--``."""
    split = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:split])
    train_args = argv[split + 1 :]
    try:
        args.seed_list = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--seeds {args.seeds!r}: expected comma-separated integers, e.g. 0,1") from None
    for name in ("frames", "mark_frames", "episodes", "max_steps"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    if not 0.0 <= args.epsilon <= 1.0:
        raise UserError(f"--epsilon {args.epsilon}: must be in [0, 1], e.g. 0.05")
    if not args.seed_list:
        raise UserError("--seeds: give at least one seed, e.g. --seeds 0,1")
    for reserved in ("--seed", "--run-name", "--run-dir", "--total-frames", "--resume"):
        if reserved in train_args:
            raise UserError(f"{reserved} after --: the learning bench sets it itself (use --seeds, --out, --frames)")
    return args, train_args


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
        code = subprocess.call(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        raise UserError(f"training run {run} exited with code {code}; see {log}")


def wall_and_ratio(run: Path) -> dict[str, float]:
    """Training wall time summed over the run's processes (a resumed run's clock restarts),
    frames/s over it, and the replay ratio held, from ``metrics.csv``."""
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
        return {"wall_s": 0.0, "frames_per_s": 0.0, "replay_ratio_held": math.nan}
    frames, samples, records = (float(last[key]) for key in ("frames", "samples", "records"))
    ratio = samples / max(1.0, records - config["learning_starts"])
    return {
        "wall_s": wall,
        "frames_per_s": frames / wall if wall else 0.0,
        "replay_ratio": ratio,
        "replay_ratio_held": ratio / config["replay_ratio"],
    }


def seed_result(run: Path, curve: list[MarkResult]) -> dict[str, Any]:
    return {
        "run": str(run),
        "frames": curve[-1].frames if curve else 0,
        "x_pos_at": {str(f): x_pos_at(curve, f) for f in REPORT_FRAMES},
        "frames_to_x_pos_goal": first_frames(curve, x_pos=X_POS_GOAL),
        "frames_to_flag": first_frames(curve, flag=True),
        "auc_mean_x_pos": area_under_curve(curve),
        "best_x_pos": max((r.max_x_pos for r in curve), default=0),
        **wall_and_ratio(run),
        "curve": [asdict(r) for r in curve],
    }


def _mean(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def summarise_seeds(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds; frames to a goal only counts seeds that reached it (and says how many)."""
    return {
        "x_pos_at": {str(f): _mean([s["x_pos_at"][str(f)] for s in seeds]) for f in REPORT_FRAMES},
        "seeds_reaching_x_pos_goal": sum(s["frames_to_x_pos_goal"] is not None for s in seeds),
        "seeds_reaching_flag": sum(s["frames_to_flag"] is not None for s in seeds),
        "frames_to_x_pos_goal": _mean([s["frames_to_x_pos_goal"] for s in seeds]),
        "frames_to_flag": _mean([s["frames_to_flag"] for s in seeds]),
        "auc_mean_x_pos": _mean([s["auc_mean_x_pos"] for s in seeds]),
        "wall_s": _mean([s["wall_s"] for s in seeds]),
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value / 1e6:.2f}M" if unit == "frames" else f"{value:,.0f}"


def print_report(name: str, seeds: list[dict[str, Any]]) -> None:
    header = ["seed run", *(f"x@{f / 1e6:g}M" for f in REPORT_FRAMES), "to x 1800", "to flag", "AUC", "wall", "ratio"]
    print(f"learning bench {name}: " + " | ".join(header))
    for s in seeds:
        cells = [Path(s["run"]).name, *(_fmt(s["x_pos_at"][str(f)]) for f in REPORT_FRAMES)]
        cells += [_fmt(s["frames_to_x_pos_goal"], "frames"), _fmt(s["frames_to_flag"], "frames")]
        cells += [_fmt(s["auc_mean_x_pos"]), f"{s['wall_s'] / 60:.0f} min", f"{s['replay_ratio_held']:.2f}"]
        print("  " + " | ".join(cells))


def learning_command(argv: list[str]) -> int:
    args, train_args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    label = args.name + (f" (epsilon {args.epsilon:g})" if args.epsilon else "")
    started = time.monotonic()
    seeds = []
    for seed in args.seed_list:
        run = args.out / f"{args.name}-s{seed}"
        if not args.no_train and run_frames(run) < args.frames:
            train(run, seed, args, train_args)
        if not (run / "config.json").exists():
            raise UserError(f"no run in {run}; train it first (drop --no-train)")
        curve = evaluate_marks(run, episodes=args.episodes, max_steps=args.max_steps, epsilon=args.epsilon)
        seeds.append(seed_result(run, curve))
    result = {
        "name": label,
        "train_args": train_args,
        "frames": args.frames,
        "mark_frames": args.mark_frames,
        "episodes_per_mark": args.episodes,
        "eval_epsilon": args.epsilon,
        "cpu": cpu_model(),
        "bench_s": time.monotonic() - started,
        "seeds": seeds,
        "mean": summarise_seeds(seeds),
    }
    results_path = args.out / f"{args.name}{f'-eps{args.epsilon:g}' if args.epsilon else ''}.json"
    atomic_write_text(results_path, json.dumps(result, indent=1) + "\n")
    print_report(label, seeds)
    variants = {}
    for path in sorted(args.out.glob("*.json")):
        other = json.loads(path.read_text())
        if isinstance(other, dict) and "seeds" in other:
            variants[other["name"]] = [[MarkResult(**r) for r in s["curve"]] for s in other["seeds"]]
    env_id = json.loads((Path(seeds[0]["run"]) / "config.json").read_text())["config"]["env_id"]
    plot = plot_curves(variants, args.out / PLOT_NAME, f"{env_id}: greedy evaluation at each mark")
    print(f"results: {results_path}; curves: {plot}")
    return 0
