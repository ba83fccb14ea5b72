"""Command line: ``python main.py`` trains a DQN agent on Super Mario Bros.

    python main.py [--preset NAME] [--num-processes N] [--batch-size N] [--env ID]
                   [--total-frames N] [--run-dir DIR] [--resume PATH] [--seed N]
                   [--no-compile] [--device cpu|cuda|auto] [--print-config]

    python main.py tune [--env ID] [--force]             measure this machine for the auto preset
    python main.py bench [--quick] [--only NAME] [--json PATH] [--soak MINUTES]
    python main.py play [--checkpoint PATH|NAME] [--env ID] [--episodes N] [--out FILE.mp4|.gif]
    python main.py eval [--checkpoint PATH|NAME] [--env ID] [--episodes N] [--json PATH]
    python main.py export --checkpoint PATH [--out FILE.pt] [--trained-with COMMAND] [--figures EVAL.json]
    python main.py plot RUN_DIR [--out DIR]

Settings resolve as: command line > knobs in config.py > preset > defaults
(``--print-config`` shows the result and where each value came from).

Without ``--checkpoint``, play and eval use the shipped network of the env
(``models/trained/<env id>.pt``, written by ``export``); ``--checkpoint NAME`` names one.

Every user error (a bad flag, setting, env id or checkpoint) ends with one line on
stderr and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from pipeline.common.errors import OneLineParser, UserError

EXIT_USAGE = 2


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


# The commands besides training, one line each for `python main.py --help` (as git lists its own).
COMMAND_HELP = {
    "tune": "measure this machine for the auto preset and cache the figures",
    "bench": "run the benchmark suite (--quick, --only NAME) or the learning one",
    "play": "record a checkpoint (default: the shipped network) playing, as MP4 or GIF",
    "eval": "play a checkpoint (default: the shipped network) and print x_pos, flag rate and return",
    "export": "write a checkpoint's acting network as a small file for play and eval (models/trained/)",
    "explore": "search a stage on the emulator for a trajectory that training restarts along",
    "plot": "draw a run's metrics.csv as PNG figures",
}
TRAIN_USAGE = "%(prog)s [training flags]\n       %(prog)s COMMAND [flags]"
TRAIN_EPILOG = (
    "commands (python main.py COMMAND --help shows each one's flags):\n"
    + "".join(f"  {name:<7} {line}\n" for name, line in COMMAND_HELP.items())
    + "\nSettings resolve as: command line > knobs in config.py > preset > defaults\n"
    "(--print-config shows each value and where it came from)."
)
TUNE_DESCRIPTION = (
    "Measure this machine for the auto preset (emulator and learner speed), cache the figures and print the "
    "settings chosen. The flags describe the run to tune for, as for training."
)


def build_parser(prog: str = "main.py") -> argparse.ArgumentParser:
    """Training's flags; with ``prog="main.py tune"``, tune's (the same, plus --force)."""
    from config import BACKENDS, DEVICES, MONITORS, PRESET_NAMES

    if prog == "main.py":
        parser = OneLineParser(
            prog=prog,
            usage=TRAIN_USAGE,
            description="Train a DQN agent on Super Mario Bros (the training flags are below),\n"
            "or run one of the commands listed at the end.",
            epilog=TRAIN_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    else:
        parser = OneLineParser(prog=prog, description=TUNE_DESCRIPTION)
        parser.add_argument(
            "--force",
            action="store_true",
            help="cache the figures even if other processes loaded the machine while measuring",
        )
    parser.add_argument("--preset", choices=PRESET_NAMES, help="hardware preset (default: PRESET in config.py)")
    parser.add_argument("--num-processes", type=_positive_int, help="collector processes")
    parser.add_argument("--batch-size", type=_positive_int, help="learner batch size")
    parser.add_argument("--env", dest="env_id", help="environment id, e.g. SuperMarioBros-1-1-v0 or Catch-v0")
    parser.add_argument("--total-frames", type=_positive_int, help="stop after N emulator frames (0 = never)")
    parser.add_argument("--run-dir", help="directory for runs (default: runs)")
    parser.add_argument("--run-name", help="name of this run's sub-directory (default: timestamp)")
    parser.add_argument("--resume", help="checkpoint file or run directory to continue from")
    parser.add_argument("--seed", type=_positive_int, help="base random seed")
    parser.add_argument(
        "--no-compile", dest="compile", action="store_const", const="off", help="skip torch.compile (eager learner)"
    )
    parser.add_argument("--no-amp", dest="amp", action="store_const", const="off", help="full fp32 learner")
    parser.add_argument("--device", choices=DEVICES, help="learner device")
    parser.add_argument(
        "--checkpoint-interval", dest="checkpoint_interval_s", type=float, help="seconds between periodic checkpoints"
    )
    parser.add_argument("--monitor", choices=MONITORS, help="monitor display")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        help="where collectors run: local processes, or node agents on a Ray cluster (pip install -e '.[ray]')",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="with --backend ray: HOST:PORT of the head node, 'auto' for `ray start` here (default: a one-node Ray)",
    )
    parser.add_argument(
        "--eval-interval",
        dest="eval_interval_frames",
        type=int,
        metavar="FRAMES",
        help="emulator frames between evaluations of the latest weights during training (0 = none)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="set any config.py field, e.g. --set replay_ratio=4 (repeatable)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration and where each value came from, then exit",
    )
    return parser


def cli_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config values the command line sets: ``--set`` pairs, then every named flag whose
    destination is a Config field (named flags win)."""
    from config import FIELD_NAMES
    from configuration.resolution import parse_field_values

    values = parse_field_values(args.overrides, "--set")
    values.update({k: v for k, v in vars(args).items() if k in FIELD_NAMES and v is not None})
    return values


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_train(argv: list[str]) -> int:
    from config import ConfigError
    from pipeline.run.machine.tuning import resolve_for_machine

    args = build_parser().parse_args(argv)
    if args.backend == "ray":  # before any measuring or process: a missing extra is one line
        from pipeline.cluster.ray_setup import check_address, require_ray

        require_ray()
        if args.ray_address:
            # Before the auto preset's measuring (up to a minute on a new machine): a
            # wrong address is one line within seconds.
            check_address(args.ray_address)
    try:
        overrides = cli_overrides(args)
        if overrides.get("resume") and not args.print_config:
            from pipeline.run.trainer.pieces import check_resume

            # A checkpoint that cannot resume this run fails now, not after the measuring below.
            check_resume(overrides, args.preset)
        # The auto preset's tuning and compile/amp=auto are measured here (once per
        # machine, cached), so --print-config shows what a run will use, and why.
        resolved = resolve_for_machine(overrides, args.preset, _say)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    if args.print_config:
        print(resolved.describe())
        return 0
    _setup_logging()
    from pipeline.learning.checkpoint import CheckpointError
    from pipeline.run.trainer.pieces import TrainingError
    from pipeline.run.trainer.trainer import Trainer

    collection = None
    if resolved.config.backend == "ray":  # chosen by a knob or --set too
        from pipeline.cluster.ray_backend import RayBackend
        from pipeline.cluster.ray_setup import require_ray

        require_ray()
        collection = RayBackend(resolved.config)
    try:
        if collection is not None:
            # Before the Trainer makes the run directory: a wrong address is one line
            # within seconds, and leaves nothing behind.
            collection.connect()
        return Trainer(resolved.config, sources=resolved.sources, collection=collection).run()
    except (CheckpointError, TrainingError) as exc:
        raise UserError(str(exc)) from None
    except KeyboardInterrupt:
        # Ctrl-C before the event loop took over the signal (during warm-up): nothing was
        # trained yet, and Trainer.run already released what it had created.
        print("main.py: interrupted during startup; nothing to checkpoint", file=sys.stderr)
        return 130


def run_tune(argv: list[str]) -> int:
    from pipeline.commands.tune import tune_command

    args = build_parser(prog="main.py tune").parse_args(argv)
    return tune_command(cli_overrides(args), args.preset, force=args.force)


def run_bench(argv: list[str]) -> int:
    from pipeline.bench import bench_command

    return bench_command(argv)


def run_play(argv: list[str]) -> int:
    from pipeline.commands.play import play_command

    return play_command(argv)


def run_eval(argv: list[str]) -> int:
    from pipeline.commands.evaluate import eval_command

    return eval_command(argv)


def run_export(argv: list[str]) -> int:
    from pipeline.commands.export import export_command

    return export_command(argv)


def run_explore(argv: list[str]) -> int:
    from pipeline.commands.explore import explore_command

    return explore_command(argv)


def run_plot(argv: list[str]) -> int:
    from pipeline.commands.plots import plot_command

    return plot_command(argv)


COMMANDS = {
    "train": run_train,
    "tune": run_tune,
    "bench": run_bench,
    "play": run_play,
    "eval": run_eval,
    "export": run_export,
    "explore": run_explore,
    "plot": run_plot,
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "train"
    if argv and argv[0] in COMMANDS:
        command = argv.pop(0)
    from config import ConfigError
    from envs import EnvIdError
    from pipeline.learning.checkpoint import CheckpointError

    try:
        return COMMANDS[command](argv)
    except (UserError, ConfigError, EnvIdError, CheckpointError) as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    # The learner shares the cores with collectors: OpenMP threads that spin while
    # waiting would steal their time (and collapse when preempted), so they sleep.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
