"""The policy of a trained run: a checkpoint, a mark or an export turned into a network
ready to act.

* :func:`load_policy` loads a checkpoint written by ``Trainer.save``, a mark or an export
  (:mod:`~pipeline.learning.shipped`; none given: the shipped network) and rebuilds its
  Q-network (eval mode, BatchNorm running statistics) and the env settings it was
  trained with; another env id may be played if it has the same number of actions.
* :func:`network_of` builds the Q-network a run's config describes (collectors, the
  evaluator and the learner's checks all use it, so their shapes agree).

:mod:`~pipeline.learning.episode_loop` plays it. Importing this module is cheap; torch loads
on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import Config, RemovedOptionError
from pipeline.common.errors import UserError

__all__ = [
    "Policy",
    "check_action_count",
    "load_policy",
    "network_of",
    "resolve_checkpoint",
    "run_dir_of",
]


# ---------------------------------------------------------------------- checkpoint -> policy


@dataclass
class Policy:
    """A Q-network ready to act, and the env settings of the run that trained it.

    Attributes:
        model: CPU ``QNetwork`` in eval mode with the checkpoint's acting weights: the
            acting copy of a run with ``acting_tau``, else the online network.
        num_actions: size of its action set.
        frame_stack: frames per observation.
        config: the run's :class:`config.Config` (fields the checkpoint lacks take today's
            defaults).
        env_id: the env to play (the checkpoint's, or the ``--env`` override).
        frames: emulator frames the run had trained for (``counters["frames"]``).
        path: the checkpoint file.
        provenance: an export's record of where it came from (None for checkpoints and marks).
    """

    model: Any
    num_actions: int
    frame_stack: int
    config: Config
    env_id: str
    frames: int
    path: Path
    provenance: dict[str, Any] | None = None


def resolve_checkpoint(text: str | os.PathLike[str] | None, env_id: str | None = None) -> Path:
    """Map ``--checkpoint`` to a file: a checkpoint, mark or export file; a run or
    checkpoints directory (its newest ``ckpt-<frames>.pt``); a shipped name (an env id,
    ``models/trained/<name>.pt``); or, for ``None``, the shipped file of ``env_id`` (default:
    ``ENV_ID`` in config.py, else the default env id)."""
    from pipeline.learning.checkpoint import CHECKPOINT_PATTERN
    from pipeline.learning.shipped import default_env_id, is_shipped_name, shipped_names, shipped_path

    if text is None:
        env_id = env_id or default_env_id()
        path = shipped_path(env_id)
        if not path.is_file():
            have = ", ".join(shipped_names()) or "none"
            raise UserError(
                f"no shipped network for {env_id} ({path} does not exist; shipped: {have}); pass --checkpoint "
                "PATH, or make one with python main.py export --checkpoint RUN"
            )
        return path
    path = Path(text)
    if not path.exists() and is_shipped_name(str(text)) and shipped_path(str(text)).is_file():
        return shipped_path(str(text))
    if not path.exists():
        have = ", ".join(shipped_names())
        raise UserError(
            f"checkpoint {str(path)!r} does not exist; pass a checkpoint file (runs/<run>/checkpoints/"
            "ckpt-<frames>.pt), a run directory" + (f" or a shipped name ({have})" if have else "")
        )
    if not path.is_dir():
        return path
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    found = [
        (int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name)) and p.is_file()
    ]
    if not found:
        raise UserError(
            f"no checkpoint (ckpt-<frames>.pt) in {str(directory)!r}; pass a checkpoint file or a run "
            "directory that has one"
        )
    return max(found)[1]


def run_dir_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to (``runs/<run>`` for ``runs/<run>/checkpoints/x.pt``)."""
    parent = Path(checkpoint).resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def check_action_count(path: Path | str, trained_actions: int, config: Config, env_id: str) -> None:
    """Raise UserError unless ``env_id`` with the run's action set has ``trained_actions`` actions."""
    import envs

    action_set = config.action_set
    try:
        envs.validate_env_id(env_id)
        env_actions = envs.num_actions(env_id, action_set)
    except ValueError as exc:  # EnvIdError is a ValueError too
        raise UserError(str(exc)) from None
    if env_actions == trained_actions:
        return
    if env_id != config.env_id:
        fix = f"pass an --env with {trained_actions} actions, e.g. the run's own {config.env_id}"
    else:
        fix = "the checkpoint's num_actions does not match its own config; use a checkpoint written by main.py"
    raise UserError(
        f"checkpoint {path} was trained with {trained_actions} actions (action_set {action_set}) "
        f"but env {env_id} with action set {action_set} gives {env_actions}; {fix}"
    )


def network_of(config: Config, num_actions: int) -> Any:
    """A fresh CPU ``QNetwork`` shaped as ``config`` says (frame stack, quantiles)."""
    from models import QNetwork

    return QNetwork(num_actions, frame_stack=config.frame_stack, quantiles=config.quantiles)


def load_policy(path: str | os.PathLike[str] | None, env_id: str | None = None) -> Policy:
    """Load a checkpoint, a mark or an export into a ready-to-act :class:`Policy`
    (``path`` as :func:`resolve_checkpoint` takes it: ``None`` is the shipped network).

    Raises:
        UserError: missing file, or the env (``env_id`` or the checkpoint's own) has a
            different number of actions than the checkpoint was trained with.
        CheckpointError: unreadable/corrupt file, not a checkpoint of this project, or
            weights that do not fit the network its config describes.
    """
    from pipeline.learning.checkpoint import CheckpointError, check_compatible, load_checkpoint
    from pipeline.learning.shipped import acting_weights

    path = resolve_checkpoint(path, env_id)
    try:
        payload = load_checkpoint(path)
    except CheckpointError as exc:
        # Its advice is about resuming training; here the user just picks another file.
        message, resume_hint, _ = str(exc).partition("; resume from")
        if not resume_hint:
            raise
        raise CheckpointError(
            f"{message}; pass another checkpoint, e.g. an older ckpt-<frames>.pt of the same run"
        ) from None
    try:
        # The weights the run acted with: its acting copy (acting_tau) when it had one.
        online = acting_weights(payload)
        config = Config.from_dict(dict(payload["config"]), source=f"checkpoint {path}")
        num_actions = int(payload["num_actions"])
    except RemovedOptionError:
        raise  # its own one line: the option, its value and the tag to check out
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {path} is not a training checkpoint of this project (missing or bad {exc}); "
            "pass a ckpt-<frames>.pt written by python main.py"
        ) from None
    env_id = env_id or config.env_id
    check_action_count(path, num_actions, config, env_id)
    frame_stack = config.frame_stack
    model = network_of(config, num_actions)
    check_compatible(model, online, path)
    model.load_state_dict(online)
    model.eval()
    model.requires_grad_(False)
    counters = payload.get("counters") or {}
    return Policy(
        model=model,
        num_actions=num_actions,
        frame_stack=frame_stack,
        config=config,
        env_id=env_id,
        frames=int(counters.get("frames", 0)),
        path=path,
        provenance=payload.get("provenance"),
    )


def constant_action_model(action: int, num_actions: int) -> Callable[..., Any]:
    """A stand-in for the Q-network whose greedy action is always ``action``.

    A reference policy for ``eval --action``: played through the same protocol as a
    network (seeds, epsilon), it says how far a fixed button press gets, e.g. whether a
    learnt policy does better than holding right+A.
    """
    import torch

    if not 0 <= action < num_actions:
        raise UserError(f"--action {action} is not an action of this set (0-{num_actions - 1}); pick one of those")
    values = torch.zeros(1, num_actions)
    values[0, action] = 1.0

    def model(observation: Any) -> Any:
        return values

    return model
