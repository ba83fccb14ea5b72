"""The bench's command line: its flags, the parts it knows, and the resolved configuration.

:func:`parse_options` turns ``argv`` into :class:`BenchOptions` (what to run, for how
long, where to write) and the resolved :mod:`config` the parts measure.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    "ray",
)
# soak only when asked: it runs for minutes; ray only when asked: it needs the [ray] extra.
DEFAULT_PARTS: tuple[str, ...] = tuple(p for p in PARTS if p not in ("soak", "ray"))
# The learning benchmark trains for hours with flags of its own (pipeline.bench.learning):
# it runs alone, as `--only learning`, and is not one of the suite's parts.
LEARNING = "learning"
# One line of --help per part, the suite's in the order they run, then the learning benchmark.
PART_HELP: dict[str, str] = {
    "raw": "the bare emulator's frames/s against the wrapped env's",
    "collector": "one real collector, the network on every step, against the wrapped env",
    "pipeline": "all collectors with the learner draining, against as many wrapped envs",
    "consolidator": "records/s the consolidator drains from flooding producers into the replay",
    "learner": "Learner.update per second for each compile/AMP variant",
    "training": "the whole system training: the replay ratio held, the CPU split",
    "startup": "compile and warm-up, first transition, first update (seconds)",
    "evaluator": "training frames/s with the in-training evaluator against without it",
    "soak": "only when asked: minutes of training, last minute against the first",
    "ray": "only when asked ([ray] extra): collectors through the Ray backend against local ones",
    LEARNING: "alone (hours): train seeds for N frames, evaluate every mark (--only learning --help)",
}
DEFAULT_ENV = "SuperMarioBros-1-1-v0"
DEFAULT_SECONDS = 20.0
QUICK_SECONDS = 5.0
DEFAULT_SOAK_MINUTES = 10.0


def _number(kind: type, minimum: float, what: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``kind(text)`` at least ``minimum`` and finite, else a one-line error."""

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
    """The bench's flags; errors are one-line :class:`UserError` (a :class:`OneLineParser`)."""
    from config import DEVICES, PRESET_NAMES

    width = max(len(name) for name in PART_HELP)
    parser = OneLineParser(
        prog="main.py bench",
        description=textwrap.fill(
            "Measure the training system; every headline is a ratio measured side by side in one run.", 78
        ),
        epilog="parts (--only NAME[,NAME]; without --only, all but soak, ray and learning):\n"
        + "\n".join(f"  {name:<{width}}  {text}" for name, text in PART_HELP.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short parts and fewer learner variants (the suite in ~2 minutes; a CI smoke run)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument(
        "--only", metavar="NAME", help=f"run only these parts (comma-separated): {', '.join(PART_HELP)} (alone)"
    )
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
    parser.add_argument("--device", choices=DEVICES, help="learner device")
    parser.add_argument(
        "--keep-runs", metavar="DIR", help="keep the run directories (metrics.csv, summary.json, logs) under DIR"
    )
    parser.add_argument(
        "--learner-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="the learner part also times the variant in use with this config.py setting changed, in the same "
        "rounds: the option's price in learner time (e.g. quantiles=32; repeatable, all changed at once)",
    )
    return parser


@dataclass
class BenchOptions:
    """What to run and where its output goes (the configuration is resolved separately)."""

    parts: tuple[str, ...]
    quick: bool
    seconds: float
    soak_minutes: float
    json_path: Path | None
    keep_runs: Path | None
    learner_set: tuple[str, ...] = ()  # the --learner-set pairs, as given
    changed_config: Any = None  # the configuration with them applied (None without)


def parse_options(argv: Sequence[str]) -> tuple[BenchOptions, Any]:
    """Parse the command line; returns the options and the resolved configuration."""
    from config import ConfigError
    from configuration.resolution import resolve_config

    args = build_parser().parse_args(list(argv))
    if args.only:
        parts = tuple(dict.fromkeys(p.strip() for p in args.only.split(",") if p.strip()))
        if LEARNING in parts:  # `--only learning` alone never gets here (pipeline.bench.command)
            raise UserError(
                f"bench: --only {args.only!r}: {LEARNING} runs alone, with flags of its own; "
                f"see python main.py bench --only {LEARNING} --help"
            )
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
        if args.learner_set:
            options.learner_set = tuple(args.learner_set)
            options.changed_config = _changed_config(resolved.config, args.learner_set, options.parts)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    return options, resolved


def _changed_config(cfg: Any, items: list[str], parts: tuple[str, ...]) -> Any:
    """``cfg`` with the ``--learner-set`` pairs applied and validated; refused where there
    is no learner part to time it in, or where it changes the action count (the timed
    batches are drawn once, with the run's actions)."""
    from dataclasses import replace

    import envs
    from config import validate
    from configuration.resolution import parse_field_values

    if "learner" not in parts:
        raise UserError(f"bench: --learner-set {' '.join(items)}: only the learner part uses it; add --only learner")
    changed = replace(cfg, **parse_field_values(items, "--learner-set"))
    validate(changed)
    if envs.num_actions(changed.env_id, changed.action_set) != envs.num_actions(cfg.env_id, cfg.action_set):
        raise UserError(
            f"bench: --learner-set {' '.join(items)}: changes the number of actions; "
            "time another action set with --env or a preset of its own instead"
        )
    return changed
