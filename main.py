"""Command line: ``python main.py`` trains a DQN agent on Super Mario Bros.

    python main.py [--preset NAME] [--num-processes N] [--batch-size N] [--env ID]
                   [--total-frames N] [--run-dir DIR] [--resume PATH] [--seed N]
                   [--no-compile] [--device cpu|cuda|auto] [--print-config]

Settings resolve as: command line > knobs in config.py > preset > defaults
(``--print-config`` shows the result and where each value came from).

Every user error (a bad flag, setting, env id or checkpoint) ends with one line on
stderr and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, NoReturn

EXIT_USAGE = 2


class UsageError(Exception):
    """A user error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see python main.py --help)")


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from config import PRESET_NAMES

    parser = _Parser(prog="main.py", description="Train a DQN agent on Super Mario Bros.")
    parser.add_argument("--preset", choices=PRESET_NAMES, help="hardware preset (default: PRESET in config.py)")
    parser.add_argument("--num-processes", type=_positive_int, help="collector processes")
    parser.add_argument("--batch-size", type=_positive_int, help="learner batch size")
    parser.add_argument("--env", dest="env_id", help="environment id, e.g. SuperMarioBros-1-1-v0 or Catch-v0")
    parser.add_argument("--total-frames", type=_positive_int, help="stop after N emulator frames (0 = never)")
    parser.add_argument("--run-dir", help="directory for runs (default: runs)")
    parser.add_argument("--run-name", help="name of this run's sub-directory (default: timestamp)")
    parser.add_argument("--resume", help="checkpoint file or run directory to continue from")
    parser.add_argument("--seed", type=_positive_int, help="base random seed")
    parser.add_argument("--no-compile", dest="compile", action="store_const", const=False,
                        help="skip torch.compile (eager learner)")
    parser.add_argument("--no-amp", dest="amp", action="store_const", const=False, help="full fp32 learner")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), help="learner device")
    parser.add_argument("--monitor", choices=("auto", "table", "log", "off"), help="monitor display")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved configuration and where each value came from, then exit")
    return parser


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("num_processes", "batch_size", "env_id", "total_frames", "run_dir", "run_name", "resume", "seed",
            "compile", "amp", "device", "monitor")
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)


def run_train(argv: list[str]) -> int:
    from config import ConfigError, resolve_config

    args = build_parser().parse_args(argv)
    try:
        resolved = resolve_config(cli_overrides(args), preset=args.preset)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if args.print_config:
        print(resolved.describe())
        return 0
    _setup_logging()
    from pipeline.checkpoint import CheckpointError
    from pipeline.trainer import Trainer, TrainingError

    try:
        return Trainer(resolved.config, sources=resolved.sources).run()
    except (CheckpointError, TrainingError) as exc:
        raise UsageError(str(exc)) from None


COMMANDS = {"train": run_train}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "train"
    if argv and argv[0] in COMMANDS:
        command = argv.pop(0)
    try:
        return COMMANDS[command](argv)
    except UsageError as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    # Importing the legacy gym stack may warn; the user did not ask for that.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    sys.exit(main())
