"""``python main.py bench --only learning``: train a configuration for N frames on one or
more seeds, then measure how fast it learned.

Each seed is one ordinary training run (``python main.py`` in a child process, with the
flags after ``--`` and ``mark_interval_frames`` set), in ``<out>/<name>-s<seed>``
(``--out``, default ``runs/learning``; any folder, e.g. one outside the work tree). A
run already there is reused: finished ones are only evaluated, shorter ones are resumed
(their replay with them) up to ``--frames``, so a long benchmark can be stopped with
Ctrl-C (the training run stops as it does on its own Ctrl-C, with its final checkpoint and
replay, and the bench ends with 130) and continued later, in another session, by the same
command. A SIGTERM sent to the bench alone (``kill``, a job system; a bench started in the
background ignores SIGINT) stops it the same way: it passes the SIGTERM on to the training
run, or stops the marks being evaluated. After training,
every mark is evaluated (:mod:`~pipeline.bench.learning_curves`) by the field's
protocol: ``--episodes`` episodes (20) at ``--epsilon`` (0.05), each from a seed of its
own, the same seeds for every mark, run and variant; the greedy episode ``play`` shows
is kept beside it. The bench then

- prints every figure (:mod:`~pipeline.bench.learning_figures`) per seed and over seeds
  as mean (min..max), then per seed the per-stage table (every mark's mean x_pos, how
  far along the stage that is and flag rate on each stage the run trains on: one row per
  mark for a run on one stage, a row per stage and mark for random stages), and compares
  the variant with the others in ``<out>`` evaluated by the same protocol on the same env
  (stage or stage list), on the seeds they share, saying which differences are within
  the spread between seeds (noise);
- writes ``<out>/<name>.json`` (``<name>-eps<E>x<N>.json`` for another protocol): per
  seed the curve (mean and median x_pos, flag rate, the greedy episode and the per-stage
  figures per mark) and the figures; over seeds their mean and spread; and the
  comparisons;
- draws ``<out>/learning.png``: the protocol's mean x_pos and flag rate at each mark for
  every variant in ``<out>`` evaluated the same way on the same env (one colour each,
  seeds overlaid),
  after the runs, never during them.

Learning per frame does not depend on the machine (the replay ratio is enforced), so
curves are in frames; wall time is reported beside them with the CPU model.
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pipeline.bench.learning_curves import (
    BENCH_EPISODES,
    BENCH_EPSILON,
    EVAL_CACHE,
    MarkResult,
    bench_protocol,
    evaluate_marks,
    plot_curves,
    stage_rows,
    x_pos_at,
)
from pipeline.bench.learning_figures import (
    REPORT_FRAMES,
    compare,
    comparison_lines,
    over_seeds,
    run_figures,
    table_lines,
)
from pipeline.bench.learning_runs import (
    EXIT_INTERRUPTED,
    raise_terminated,
    run_frames,
    train,
    wall_and_ratio,
)
from pipeline.bench.learning_steadiness import steadiness_at_marks
from pipeline.common.errors import OneLineParser, UserError
from pipeline.common.files import atomic_write_text
from pipeline.run.evaluator.protocol import EvaluationProtocol
from pipeline.run.evaluator.stage_report import ends_lines, stage_table

PLOT_NAME = "learning.png"
DEFAULT_MAX_STEPS = 2000


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="main.py bench --only learning",
        description="Train for N frames on each seed, then evaluate every frame mark over --episodes episodes "
        "at --epsilon (distinct, fixed seeds) beside the greedy episode, and report the learning curve, "
        "its spread over seeds and how it compares with the other variants in --out. Training flags go "
        "after --, e.g. -- --set gamma=0.9.",
    )
    parser.add_argument("--name", default="default", help="variant name: runs are <out>/<name>-s<seed>")
    parser.add_argument("--frames", type=int, default=2_000_000, help="emulator frames per seed (default 2,000,000)")
    parser.add_argument("--seeds", default="0", help="comma-separated training seeds (default 0)")
    parser.add_argument("--mark-frames", type=int, default=100_000, help="frames between marks (default 100,000)")
    parser.add_argument(
        "--episodes",
        type=int,
        default=BENCH_EPISODES,
        help=f"evaluation episodes per mark, each from its own seed (default {BENCH_EPISODES})",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        default=BENCH_EPSILON,
        help=f"random-action rate of the evaluation episodes (default {BENCH_EPSILON:g}; 0 is greedy, and a "
        "fixed stage then plays the same episode every time)",
    )
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS, help="agent steps per evaluation episode")
    parser.add_argument(
        "--sticky",
        type=float,
        help="play the evaluation episodes with sticky actions of this probability (0.25 is the field's "
        "stochastic protocol; default: without, as every run trains)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/learning"),
        help="where runs and results go (default runs/learning); the same command with the same --out "
        "resumes a benchmark, in this session or a later one",
    )
    parser.add_argument(
        "--compare",
        metavar="NAMES",
        help="comma-separated variants in --out to compare with and draw beside it (default: every other "
        "variant there evaluated by the same protocol)",
    )
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
    if args.sticky is not None and not 0.0 <= args.sticky < 1.0:
        raise UserError(f"--sticky {args.sticky}: must be in [0, 1), e.g. 0.25")
    if not args.seed_list:
        raise UserError("--seeds: give at least one seed, e.g. --seeds 0,1")
    if len(set(args.seed_list)) != len(args.seed_list):
        raise UserError(f"--seeds {args.seeds!r}: a seed is given twice")
    for reserved in ("--seed", "--run-name", "--run-dir", "--total-frames", "--resume"):
        if reserved in train_args:
            raise UserError(f"{reserved} after --: the learning bench sets it itself (use --seeds, --out, --frames)")
    # Absolute, so the training children (which run in the repository) write where the
    # user meant, and the same command from another directory finds the same runs.
    args.out = args.out.expanduser().resolve()
    args.compare_names = [n.strip() for n in args.compare.split(",") if n.strip()] if args.compare else None
    args.protocol = bench_protocol(args.episodes, args.epsilon, args.max_steps, args.sticky)
    return args, train_args


def results_name(name: str, protocol: EvaluationProtocol) -> str:
    """``<name>.json`` for the default protocol, ``<name>-eps<E>x<N>[-steps<S>][-sticky<P>].json``
    for another."""
    if protocol == bench_protocol():
        return f"{name}.json"
    steps = f"-steps{protocol.max_steps}" if protocol.max_steps != DEFAULT_MAX_STEPS else ""
    sticky = "" if protocol.sticky is None else f"-sticky{protocol.sticky:g}"
    return f"{name}-eps{protocol.epsilon:g}x{protocol.episodes}{steps}{sticky}.json"


def seed_result(run: Path, seed: int, curve: list[MarkResult]) -> dict[str, Any]:
    """One run's figures (:data:`~pipeline.bench.learning_figures.FIGURES`) and its curve."""
    machine = wall_and_ratio(run)
    figures = run_figures(curve, machine, steadiness_at_marks(run, curve))
    return {
        "run": str(run),
        "seed": seed,
        "frames": curve[-1].frames if curve else 0,
        "x_pos_at": {str(f): x_pos_at(curve, f) for f in REPORT_FRAMES},
        **{key: figures[key] for key in ("frames_to_x_pos_goal", "frames_to_flag", "auc_mean_x_pos")},
        "best_x_pos": max((r.max_x_pos for r in curve), default=0),
        **machine,
        "figures": figures,
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


def run_env(run: Path) -> str | None:
    """The env a run trained on, with its stage list, as its config.json has it (None
    without one): what its x_pos and flags are of."""
    try:
        config = json.loads((run / "config.json").read_text())["config"]
        return f"{config['env_id']} ({config['stages']})" if config.get("stages") else str(config["env_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def variant_env(result: dict[str, Any]) -> str | None:
    """A result's env: recorded in it, or (a result written before it was) its first run's."""
    if result.get("env"):
        return str(result["env"])
    seeds = result.get("seeds") or []
    return run_env(Path(seeds[0]["run"])) if seeds and isinstance(seeds[0], dict) and "run" in seeds[0] else None


def other_variants(out: Path, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The other variants' results in ``out`` evaluated by the same protocol on the same
    env, by name.

    Results of another protocol (or of the one-greedy-episode bench before it, which
    wrote no protocol) measure something else, and so do those of another stage (x_pos
    and the flag are each stage's own): they are neither compared nor drawn.
    """
    found = {}
    for path in sorted(out.glob("*.json")):
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (
            isinstance(other, dict)
            and other.get("protocol") == result["protocol"]
            and other.get("name") != result["name"]
            and "seeds" in other
            and variant_env(other) == result["env"]
        ):
            found[other["name"]] = other
    return found


def drawn_variants(
    result: dict[str, Any], others: dict[str, dict[str, Any]], names: list[str] | None
) -> dict[str, dict[str, Any]]:
    """The variants the figure shows: ``result`` first, then the ones named (default: all
    of ``others``). A folder of many variants draws an unreadable tangle otherwise."""
    chosen = others if names is None else {name: others[name] for name in names if name in others}
    return {result["name"]: result, **chosen}


def comparisons(result: dict[str, Any], others: dict[str, dict[str, Any]], names: list[str] | None) -> list[dict]:
    """``result`` against the variants named (default: all of ``others``)."""
    chosen = list(others) if names is None else names
    missing = [name for name in chosen if name not in others]
    if missing:
        print(
            f"learning bench: not compared with {', '.join(missing)}: no result of that name in the same folder "
            f"evaluated by {EvaluationProtocol(**result['protocol']).describe()}",
            file=sys.stderr,
        )
    return [compare(result, others[name]) for name in chosen if name in others]


def print_report(result: dict[str, Any]) -> None:
    protocol = EvaluationProtocol(**result["protocol"])
    print(
        f"learning bench {result['name']}: each mark over {protocol.describe()}, beside the greedy episode "
        f"(what play shows); runs in {Path(result['seeds'][0]['run']).parent}"
    )
    print("\n".join(table_lines(result)))
    for run in result["seeds"]:
        print(f"seed {run['seed']} per stage (along: the mean x_pos over the x_pos where the stage ends):")
        rows = stage_rows([MarkResult.from_dict(r) for r in run["curve"]])
        print("\n".join(stage_table(rows, first="mark")))
        ends = ends_lines(rows)
        if ends:  # marks evaluated before rows kept their ends have none
            print(f"seed {run['seed']} where each mark's episodes end (x_pos without the flag, grouped by obstacle):")
            print("\n".join(ends))
    for comparison in result["comparisons"]:
        print("\n".join(comparison_lines(comparison)))


def learning_command(argv: list[str]) -> int:
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return run_learning_bench(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_learning_bench(argv: list[str]) -> int:
    args, train_args = parse(argv)
    protocol: EvaluationProtocol = args.protocol
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    seeds = []
    for seed in args.seed_list:
        run = args.out / f"{args.name}-s{seed}"
        if not args.no_train and run_frames(run) < args.frames:
            try:
                train(run, seed, args, train_args)
                # A run that ends cleanly short of its frames was stopped (Ctrl-C or SIGTERM
                # sent to it, or to a bench that ignores SIGINT, as a background job does).
                stopped = run_frames(run) < args.frames
            except KeyboardInterrupt:
                stopped = True
            if stopped:
                print(
                    f"learning bench: stopped; {run} saved at {run_frames(run):,} frames, and the same command "
                    "resumes it (marks are evaluated once training is done)",
                    file=sys.stderr,
                )
                return EXIT_INTERRUPTED
        if not (run / "config.json").exists():
            raise UserError(f"no run in {run}; train it first (drop --no-train)")
        try:
            curve = evaluate_marks(run, protocol)
        except KeyboardInterrupt:
            print(
                f"learning bench: stopped while evaluating the marks of {run}; the ones evaluated are kept "
                f"({EVAL_CACHE}), and the same command goes on with the rest",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        seeds.append(seed_result(run, seed, curve))
    result: dict[str, Any] = {
        "name": args.name,
        "protocol": protocol.to_dict(),
        "train_args": train_args,
        "frames": args.frames,
        "mark_frames": args.mark_frames,
        "episodes_per_mark": protocol.episodes,
        "eval_epsilon": protocol.epsilon,
        "env": run_env(Path(seeds[0]["run"])),
        "cpu": cpu_model(),
        "bench_s": time.monotonic() - started,
        "seeds": seeds,
        "mean": summarise_seeds(seeds),
        "over_seeds": over_seeds(seeds),
    }
    others = other_variants(args.out, result)
    result["comparisons"] = comparisons(result, others, args.compare_names)
    results_path = args.out / results_name(args.name, protocol)
    atomic_write_text(results_path, json.dumps(result, indent=1) + "\n")
    print_report(result)
    variants = {
        name: [[MarkResult.from_dict(r) for r in s["curve"]] for s in variant["seeds"]]
        for name, variant in drawn_variants(result, others, args.compare_names).items()
    }
    # Two lines: the protocol's description is too long for one line of the figure.
    title = f"{result['env']}: mean x_pos at each mark\nover {protocol.describe()}"
    plot = plot_curves(variants, args.out / PLOT_NAME, title)
    print(f"results: {results_path}; curves: {plot}")
    return 0
