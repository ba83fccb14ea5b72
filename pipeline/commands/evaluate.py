"""``python main.py eval``: play episodes with a checkpoint and print their statistics.

Loading the checkpoint and playing use :mod:`pipeline.learning.policy` and
:mod:`pipeline.learning.episode_loop`, as ``play`` and
the in-training evaluator do, and the episodes follow the evaluation protocol
(:mod:`pipeline.run.evaluator.protocol`) that the evaluator and the learning benchmark play:
episode ``i`` (counting from 0) resets its env with ``seed + i`` and draws its random
actions from a generator of its own derived from ``seed + i``. So an episode's figures
depend only on the weights and its seed, and the benchmark's figures of a mark are
reproduced by ``--episodes 20 --epsilon 0.05 --seed 5000000 --max-steps 2000``.

Command line::

    python main.py eval [--checkpoint PATH|NAME] [--env ID] [--stages LIST] [--episodes N]
                        [--epsilon E] [--seed N] [--max-steps N] [--action INDEX] [--values]
                        [--recalibrate REPLAY [--recalibrate-states N]] [--sticky P] [--json PATH]

``PATH`` is a ``ckpt-<frames>.pt`` file, a mark or an export, or a run directory (its
newest checkpoint); ``NAME`` a shipped network (``models/trained/<NAME>.pt``), and without
``--checkpoint`` the shipped network of ``--env`` (default: the default env) plays.
Every stage the policy is judged on is played with the whole protocol and reported in a
per-stage table (:mod:`pipeline.run.evaluator.stage_report`): a fixed stage is one row; random
stages are each stage of the run's ``stages`` list (or of ``--stages``; all 32 without a
list), each played as its fixed-stage id, ``--episodes`` episodes each.
``--action`` plays a reference policy in the checkpoint's env instead of its network: that
action at every step that is not random (``--epsilon 1`` is random play), so a learnt
policy's figures can be set beside those of a fixed button press under the same protocol.
``--values`` plays the same episodes and also prints how far the network's values are
from the returns its policy collects (:mod:`pipeline.run.evaluator.value_check`).
``--recalibrate`` re-estimates the network's BatchNorm statistics for its weights on a
saved replay's states before playing (:mod:`pipeline.learning.batchnorm_stats`), as a
saved copy gets them (:mod:`pipeline.run.trainer.calibration`): checkpoints saved before marks and
checkpoints were calibrated for their own weights carry statistics older than the weights,
and those saved before they were calibrated over ``SAVED_STATISTICS_STATES`` states carry
a noisier estimate (one 1-1 mark read 1,007 mean x_pos as saved, 2,187 recalibrated).
Importing this module is cheap; torch and the emulator load when a command runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any

from pipeline.common.errors import OneLineParser, UserError
from pipeline.common.files import atomic_write_text
from pipeline.learning.episode_loop import EpisodeResult, single_thread_torch, summarise
from pipeline.learning.learner_settings import SAVED_STATISTICS_STATES
from pipeline.learning.policy import Policy, constant_action_model, load_policy

__all__ = ["add_policy_arguments", "build_parser", "eval_command"]


# ---------------------------------------------------------------------- command line


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}")
        return value

    parse.__name__ = "int"
    return parse


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return value


def _sticky_probability(text: str) -> float:
    value = _probability(text)
    if value == 1.0:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to below 1 (1 never takes an action), got {text!r}")
    return value


def add_policy_arguments(parser: argparse.ArgumentParser, *, episodes: int) -> None:
    """The flags ``play`` and ``eval`` share."""
    parser.add_argument(
        "--checkpoint",
        help="checkpoint, mark or export file, a run directory (its newest checkpoint), or a shipped name "
        "(models/trained/<name>.pt, e.g. SuperMarioBros-1-1-v0); default: the shipped network of --env",
    )
    parser.add_argument(
        "--env", dest="env_id", help="env id to play (default: the checkpoint's); must have the same number of actions"
    )
    parser.add_argument(
        "--episodes", type=_int_at_least(1), default=episodes, help=f"episodes to play (default {episodes})"
    )
    parser.add_argument(
        "--epsilon", type=_probability, default=0.0, help="probability of a random action (default 0: greedy)"
    )
    parser.add_argument(
        "--seed",
        type=_int_at_least(0),
        default=0,
        help="episode i resets with seed+i and draws its random actions from a generator seeded by it (default 0)",
    )
    parser.add_argument(
        "--max-steps",
        type=_int_at_least(1),
        default=0,
        help="cap on agent steps per episode (default: the run's max_episode_steps)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="main.py eval", description="Evaluate a checkpoint: x position, flag rate, return.")
    add_policy_arguments(parser, episodes=5)
    parser.add_argument(
        "--action",
        type=_int_at_least(0),
        help="play this action index at every step that is not random, instead of the network "
        "(a reference policy in the checkpoint's env; --epsilon 1 is random play)",
    )
    parser.add_argument(
        "--values",
        action="store_true",
        help="also print the Q-value of each greedy step's action beside the discounted return that "
        "followed it (the run's gamma and reward scale), and the median gap to the second-best action",
    )
    parser.add_argument(
        "--recalibrate",
        metavar="REPLAY",
        help="first re-estimate the network's BatchNorm statistics for its weights on uniform states of "
        "this saved replay (a run's checkpoints/replay.npz), as a mark is saved: for checkpoints saved "
        "with statistics older than their weights or estimated over fewer states",
    )
    parser.add_argument(
        "--recalibrate-states",
        type=_int_at_least(1),
        help=f"states for --recalibrate (default {SAVED_STATISTICS_STATES}, as a mark is saved)",
    )
    parser.add_argument(
        "--recalibrate-seed",
        type=int,
        help="seed of the draw of those states (default: --seed); other seeds show how much a "
        "mark's play depends on which states its statistics were estimated over",
    )
    parser.add_argument(
        "--stages",
        metavar="LIST",
        help="random-stages ids: evaluate these stages (world-stage separated by commas, e.g. 1-1,1-2), "
        "each with --episodes episodes (default: the run's stages setting; '' is all 32)",
    )
    parser.add_argument(
        "--sticky",
        type=_sticky_probability,
        help="play with sticky actions: each emulator frame keeps the previous frame's buttons with this "
        "probability (0.25 is the field's stochastic protocol, Machado et al. 2018; default: without, "
        "as every run trains)",
    )
    parser.add_argument("--json", help="also write the results (and per-episode lists) to this JSON file")
    return parser


def recalibrate_policy(policy: Policy, replay_path: str, states: int | None, seed: int) -> str:
    """Re-estimate ``policy.model``'s BatchNorm statistics on ``states`` uniform states of
    the replay saved at ``replay_path`` (drawn by a generator seeded with ``seed``), in
    chunks of the run's batch size; returns what was done, for the command's output."""
    import torch

    from pipeline.learning.batchnorm_stats import recalibrate
    from pipeline.learning.replay import ReplayFileError, ReplayMemory

    config = policy.config
    count = states or SAVED_STATISTICS_STATES
    try:
        memory = ReplayMemory.load(replay_path)
    except ReplayFileError as exc:
        raise UserError(f"--recalibrate {replay_path}: {exc}") from None
    if memory.geometry["frame_stack"] != policy.frame_stack:
        raise UserError(
            f"--recalibrate {replay_path}: its states stack {memory.geometry['frame_stack']} frames, "
            f"the network takes {policy.frame_stack}; give the replay saved by this checkpoint's run"
        )
    obs = memory.sample_states(count, torch.Generator().manual_seed(seed))
    chunk = config.batch_size
    recalibrate([policy.model], obs.split(chunk))
    policy.model.eval()
    return f"BatchNorm statistics re-estimated on {count} states of {replay_path} (chunks of {chunk})"


def eval_command(argv: list[str]) -> int:
    """``python main.py eval ...``: play episodes with a checkpoint and print statistics."""
    from pipeline.common.files import check_output_path
    from pipeline.run.evaluator.protocol import EvaluationProtocol, play_protocol
    from pipeline.run.evaluator.stage_report import (
        StageRow,
        combined_values,
        ends_lines,
        play_stages,
        stage_table,
        stages_played,
    )
    from pipeline.run.evaluator.value_check import value_check

    args = build_parser().parse_args(argv)
    json_path = check_output_path(args.json, (".json",), "JSON") if args.json else None
    policy = load_policy(args.checkpoint, args.env_id)
    for given, flag in (
        (args.recalibrate_states, "--recalibrate-states"),
        (args.recalibrate_seed, "--recalibrate-seed"),
    ):
        if given is not None and args.recalibrate is None:
            raise UserError(f"{flag} needs --recalibrate REPLAY")
    draw_seed = args.seed if args.recalibrate_seed is None else args.recalibrate_seed
    recalibrated = (
        recalibrate_policy(policy, args.recalibrate, args.recalibrate_states, draw_seed) if args.recalibrate else None
    )
    protocol = EvaluationProtocol(
        episodes=args.episodes, epsilon=args.epsilon, first_seed=args.seed, max_steps=args.max_steps, sticky=args.sticky
    )
    model, player = policy.model, f"{policy.path} ({policy.frames} frames)"
    if args.action is not None:
        if args.values:
            raise UserError("--values needs the network's Q-values; drop --action to use them")
        model = constant_action_model(args.action, policy.num_actions)
    pairs = stages_played(policy.config, policy.env_id, args.stages)
    meanings: list[str] = []

    def play(env: Any) -> tuple[list[EpisodeResult], dict[str, float] | None]:
        meanings.append(env.get_wrapper_attr("get_action_meanings")()[args.action] if args.action is not None else "")
        if args.values:
            return value_check(
                env,
                model,
                protocol,
                frame_stack=policy.frame_stack,
                num_actions=policy.num_actions,
                gamma=policy.config.gamma,
                reward_scale=policy.config.reward_scale,
            )
        played = play_protocol(env, model, protocol, frame_stack=policy.frame_stack, num_actions=policy.num_actions)
        assert played is not None  # nothing interrupts it without should_stop
        return played, None

    with single_thread_torch():
        per_stage = play_stages(policy.config, pairs, play, seed=args.seed, sticky=protocol.sticky_actions)
    if args.action is not None:
        player = f"the constant action {args.action} ({meanings[0]})"
    results = [result for _, (played, _) in per_stage for result in played]
    rows = [StageRow.from_results(stage, played) for stage, (played, _) in per_stage]
    values: dict[str, float] | None = None
    if args.values:
        stage_values = [figures for _, (_, figures) in per_stage if figures is not None]
        values = stage_values[0] if len(stage_values) == 1 else combined_values(stage_values)
    summary = summarise(results)
    if recalibrated is not None:
        print(recalibrated)
    on = f"{policy.env_id}: {args.episodes} episode(s)"
    if len(pairs) > 1:
        names = ", ".join(stage for stage, _ in pairs)
        on = f"{policy.env_id}, {len(pairs)} stages ({names}): {args.episodes} episode(s) each"
    sticky = protocol.sticky_actions
    sticky_text = f", sticky actions {sticky:g}" if sticky else ""
    print(f"evaluated {player} on {on}, epsilon {args.epsilon:g}{sticky_text}, seed {args.seed}")
    print(
        f"x_pos mean {summary['mean_x_pos']:.1f} median {summary['median_x_pos']:.1f} "
        f"max {summary['max_x_pos']} | flag rate {summary['flag_rate']:.2f} | "
        f"return mean {summary['mean_return']:.1f} | length mean {summary['mean_length']:.1f} steps"
    )
    if values is not None:
        if values["greedy_steps"]:
            print(
                f"values over {values['greedy_steps']:.0f} greedy steps: Q of the action taken "
                f"{values['mean_q_taken']:.2f}, discounted return that followed {values['mean_return_followed']:.2f} "
                f"(ratio {values['q_over_return']:.2f}), median gap to the second-best action "
                f"{values['median_action_gap']:.3f}"
            )
        else:
            print("values: no greedy step (every step was random)")
        summary["values"] = values
    print("per stage (along: the mean x_pos over the x_pos where the stage ends):")
    print("\n".join(stage_table([("", row) for row in rows])))
    print("where the episodes end (the x_pos of those without the flag, grouped by obstacle):")
    print("\n".join(ends_lines([("", row) for row in rows])))
    summary["stages"] = [row.to_dict() for row in rows]
    if json_path is not None:
        atomic_write_text(
            json_path,
            json.dumps(
                {
                    "checkpoint": str(policy.path),
                    "frames": policy.frames,
                    "env_id": policy.env_id,
                    "epsilon": args.epsilon,
                    "sticky_actions": sticky,
                    "seed": args.seed,
                    "max_steps": args.max_steps,
                    "action": args.action,
                    "recalibrated": recalibrated,
                    **summary,
                },
                indent=2,
            )
            + "\n",
            "JSON",
        )
        print(f"wrote {json_path}")
    sys.stdout.flush()
    return 0
