"""``python main.py export``: write a run's acting network as a small file that ``play`` and ``eval`` load.

    python main.py export --checkpoint RUN_OR_FILE [--out FILE.pt] [--dtype float16|bfloat16|float32]
                          [--trained-with "COMMAND"] [--figures EVAL.json]

The export (:mod:`pipeline.learning.shipped`) holds the weights the run acted with (the
averaged acting copy with its calibrated BatchNorm statistics, as a mark or a checkpoint
holds them), the config that rebuilds the network and the env, and a provenance record:
a few MB instead of a checkpoint's target network, optimizer and RNG states. Without
``--out`` it goes to ``models/trained/<env id>.pt``, the network a plain
``python main.py play`` plays. ``--trained-with`` records the command that trained it,
``--figures`` the figures of ``python main.py eval --json`` played with the same
checkpoint (its frames must match).

The weights are stored in float32 by default: exactly the source's, so the export plays
the source's greedy episodes step for step (6.8 MB for the default network).
``--dtype float16`` halves the file, but rounding moves the values by up to 0.01 (of
|Q| up to 4) and changed the greedy action on 0.1-0.5 % of replay states of four Mario
networks (bfloat16: 3-4 %), enough to turn a greedy episode elsewhere; the network acts
in float32 either way. The command prints what the storage type changes on random
observations.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipeline.common.errors import OneLineParser, UserError
from pipeline.run.evaluator.protocol import FIGURE_KEYS as PROTOCOL_FIGURES

__all__ = ["FIGURE_KEYS", "build_parser", "export_command"]

# What an `eval --json` file says about the protocol (epsilon, seeds, step cap) and the
# figures it reports, kept in the provenance.
FIGURE_KEYS = ("epsilon", "seed", "max_steps", *PROTOCOL_FIGURES)


# Random observations the export compares the stored weights with the source's on.
PROBES = 64


def build_parser() -> argparse.ArgumentParser:
    from pipeline.learning.shipped import EXPORT_DTYPES

    parser = OneLineParser(
        prog="main.py export",
        description="Write a checkpoint's acting network, its config and provenance as a small file for play/eval.",
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="checkpoint or mark file, or a run directory (its newest checkpoint)",
    )
    parser.add_argument("--out", help="file to write, .pt (default: models/trained/<env id>.pt, what play plays)")
    parser.add_argument(
        "--dtype",
        choices=EXPORT_DTYPES,
        default="float32",
        help="storage type of the weights (default float32: exact; float16 halves the file but can change "
        "greedy actions where two values are close)",
    )
    parser.add_argument("--trained-with", metavar="COMMAND", help="the command that trained it, for the record")
    parser.add_argument(
        "--figures",
        metavar="EVAL_JSON",
        help="a `python main.py eval --json` file of this checkpoint: its protocol and figures go into the record",
    )
    return parser


def read_figures(path: str, frames: int) -> dict[str, Any]:
    """The protocol and figures of an ``eval --json`` file, checked to be of ``frames``' weights."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(
            f"--figures {path}: cannot read it as JSON ({exc}); give a python main.py eval --json file"
        ) from None
    if not isinstance(data, dict) or any(key not in data for key in FIGURE_KEYS):
        raise UserError(f"--figures {path}: not a python main.py eval --json file (it lacks the figures)")
    if data.get("action") is not None or data.get("recalibrated"):
        raise UserError(
            f"--figures {path}: not the network's own play (--action or --recalibrate); evaluate it plainly"
        )
    if int(data.get("frames", -1)) != frames:
        raise UserError(
            f"--figures {path}: evaluated weights of {data.get('frames')} frames, the checkpoint has {frames}; "
            "evaluate this checkpoint"
        )
    return {key: data[key] for key in FIGURE_KEYS}


def storage_effect(
    source: dict[str, Any], exported: dict[str, Any], config: Any, num_actions: int
) -> tuple[float, int]:
    """What the storage type changes on 64 random observations: the largest change of a
    Q-value, and on how many of them the greedy action stays the same."""
    import torch

    from pipeline.learning.policy import network_of

    nets = []
    for state in (source, exported):
        net = network_of(config, num_actions)
        net.load_state_dict(state)
        nets.append(net.eval())
    generator = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (PROBES, config.frame_stack, 84, 84), generator=generator, dtype=torch.uint8)
    with torch.inference_mode():
        before, after = (net(obs) for net in nets)
    return float((before - after).abs().max()), int((before.argmax(1) == after.argmax(1)).sum())


def export_command(argv: list[str]) -> int:
    """``python main.py export ...``: write the export and print what it holds."""
    from config import Config
    from pipeline.common.files import check_output_path
    from pipeline.learning.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
    from pipeline.learning.policy import load_policy
    from pipeline.learning.shipped import acting_weights, export_payload, shipped_path

    args = build_parser().parse_args(argv)
    if args.out:  # a bad path fails before anything is loaded
        check_output_path(args.out, (".pt",), "export")
    # The one loader play and eval use: a file it cannot play is refused here, not later.
    policy = load_policy(args.checkpoint)
    payload = load_checkpoint(policy.path)
    figures = read_figures(args.figures, policy.frames) if args.figures else None
    out = check_output_path(args.out or shipped_path(policy.env_id), (".pt",), "export")
    if out.resolve() == policy.path.resolve():
        raise UserError(f"--out {out} is the checkpoint being exported; write the export to another file")
    config = Config.from_dict(dict(payload["config"])).to_dict()
    exported = export_payload(
        payload,
        config=config,
        dtype=args.dtype,
        source=_source_name(policy.path),
        trained_with=args.trained_with,
        figures=figures,
    )
    try:
        save_checkpoint(out, exported)
    except CheckpointError as exc:
        raise UserError(str(exc)) from None
    drift, same = storage_effect(
        acting_weights(payload), exported["learner"]["acting"], policy.config, policy.num_actions
    )
    record = exported["provenance"]
    print(
        f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {args.dtype}): the {record['weights']} of "
        f"{policy.path} ({record['frames']} frames, {record['updates']} updates) for {record['env_id']}"
    )
    print(
        f"{args.dtype} storage on {PROBES} random observations: the same greedy action on {same}, "
        f"largest Q-value change {drift:.2g}"
    )
    if figures:
        print(
            f"figures: x_pos mean {figures['mean_x_pos']:.1f}, flag rate {figures['flag_rate']:.2f} over "
            f"{figures['episodes']} episode(s) at epsilon {figures['epsilon']:g}"
        )
    sys.stdout.flush()
    return 0


def _source_name(path: Path) -> str:
    """The source file as the record keeps it: the run directory's name and the path inside it."""
    parts = path.resolve().parts
    if "checkpoints" in parts:
        return str(Path(*parts[parts.index("checkpoints") - 1 :]))
    return path.name
