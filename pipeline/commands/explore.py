"""``python main.py explore``: find a way through a stage by search on the emulator, for a run to restart along.

    python main.py explore [--env ID] [--action-set NAME] [--iterations N] [--seed S] [--out FILE.npz]

Go-Explore's first phase (:mod:`pipeline.learning.trajectory_search`): no network, only
the emulator, played with the run's own env (frame skip, episode ends, cuts) from
snapshots along the kept sequence. It stops at the flag or after ``--iterations`` sequences and writes the
furthest trajectory found (default ``runs/trajectories/<env id>.npz``); training restarts
along it with

    python main.py --env ID --set frontier_start_share=0.5 --set frontier_trajectory=FILE.npz
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pipeline.common.errors import OneLineParser, UserError

__all__ = ["build_parser", "explore_command"]


def build_parser() -> argparse.ArgumentParser:
    from pipeline.learning.trajectory_search import SEARCH_SEQUENCES

    parser = OneLineParser(
        prog="main.py explore",
        description="Search a stage on the emulator for a trajectory to its flag; training restarts along it "
        "(--set frontier_start_share=0.5 --set frontier_trajectory=FILE).",
    )
    parser.add_argument("--env", help="a fixed stage, e.g. SuperMarioBros-1-3-v0 (default: SuperMarioBros-1-1-v0)")
    parser.add_argument("--action-set", help="the action set the run will use (default: right_only)")
    parser.add_argument(
        "--iterations",
        type=int,
        default=SEARCH_SEQUENCES,
        help=f"sequences played at most (default {SEARCH_SEQUENCES}; it stops at the flag)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the search's random generator (default 0)")
    parser.add_argument("--out", help="trajectory file, .npz (default: runs/trajectories/<env id>.npz)")
    return parser


def explore_command(argv: list[str]) -> int:
    """``python main.py explore ...``: search, print each improvement, write the trajectory."""
    from config import Config, ConfigError, validate
    from envs.ids import parse_env_id
    from pipeline.common.files import check_output_path
    from pipeline.learning.trajectory_search import SearchResult, search_stage

    args = build_parser().parse_args(argv)
    if args.iterations < 1:
        raise UserError(f"explore: --iterations {args.iterations}: must be >= 1; use e.g. 2000")
    settings = {}
    if args.env:
        settings["env_id"] = args.env
    if args.action_set:
        settings["action_set"] = args.action_set
    cfg = Config(**settings)
    try:
        validate(cfg)  # an unknown id or action set: one line
    except ConfigError as exc:
        raise UserError(f"explore: {exc}") from None
    if parse_env_id(cfg.env_id).kind != "mario":
        raise UserError(
            f"explore: --env {cfg.env_id}: needs a Mario stage that replays the same way from its start "
            "(no Catch, no random stages); use e.g. SuperMarioBros-1-3-v0"
        )
    out = Path(args.out or Path(cfg.run_dir) / "trajectories" / f"{cfg.env_id}.npz")
    check_output_path(out, (".npz",), "trajectory")
    started = time.perf_counter()

    def report(result: SearchResult) -> None:
        print(
            f"iteration {result.iterations}: x {result.best_x} in {len(result.actions)} steps"
            f"{' (the flag next)' if result.flag else ''}, {result.agent_steps:,} agent steps played, "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )

    result = search_stage(cfg, out, args.seed, args.iterations, report)
    if result.best_x < 0:
        raise UserError(
            f"explore: no step of {args.iterations} sequences stayed alive on {cfg.env_id}; nothing written"
        )
    ending = "its next step takes the flag" if result.flag else "no flag yet (more --iterations search further)"
    print(
        f"wrote {out}: {len(result.actions)} steps of {cfg.env_id} ({cfg.action_set}) to x {result.best_x}, {ending}; "
        f"train along it with --env {cfg.env_id} --set frontier_start_share=0.5 --set frontier_trajectory={out}"
    )
    return 0
