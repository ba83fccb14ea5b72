"""The policy of a trained run, and the episode loop that ``eval``, ``play`` and the evaluator share.

* :func:`load_policy` loads a checkpoint written by ``Trainer.save``, a mark or an export
  (:mod:`~pipeline.learning.shipped`; none given: the shipped network) and rebuilds its
  Q-network (eval mode, BatchNorm running statistics) and the env settings it was
  trained with; another env id may be played if it has the same number of actions.
* :func:`play_episode` plays one episode and yields a :class:`Step` per agent step
  (with the raw colour frame when asked), exactly as a collector acts: the
  observation is a ``(frame_stack, 84, 84)`` uint8 stack filled with the first
  observation at reset and rolled by one frame per step, with the previous action
  ("none" at reset) for a network that sees it; the action is the network's argmax,
  or with probability ``epsilon`` a uniform random action.
* :func:`network_of` builds the Q-network a run's config describes (collectors, the
  evaluator and the learner's checks all use it, so their shapes agree).

Reproducibility: the caller resets episode ``i`` with ``seed + i`` and passes one
``numpy.random.default_rng(seed)`` for the epsilon draws; a draw is taken only when
``epsilon > 0`` (``rng.random() < epsilon`` then ``rng.integers(num_actions)``).
Environments are built with the run's frame skip, action set and truncation limits
(``no_progress_steps``, ``max_episode_steps``) but ``reward_scale=1``, so returns are in
game units, like ``episode_return`` in ``metrics.csv``. ``x_pos`` and ``flag_get`` are
read from the info of an episode's last step, as the collectors report them.

Importing this module is cheap; torch and the emulator load on first use.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import Config, RemovedOptionError
from pipeline.common.errors import UserError

__all__ = [
    "EpisodeResult",
    "Policy",
    "Step",
    "build_env",
    "caption",
    "check_action_count",
    "load_policy",
    "network_of",
    "play_episode",
    "resolve_checkpoint",
    "run_dir_of",
    "run_episode",
    "single_thread_torch",
    "summarise",
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


def build_env(config: Config, env_id: str | None = None, seed: int | None = None):
    """The env a run's policy plays in: its settings, but rewards unscaled (game units).

    The run's stage list only goes with a random-stages id: another id (one stage of the
    list, played alone) is built without it.
    """
    from envs import make_env
    from envs.ids import EnvIdError, parse_env_id

    env_id = env_id or config.env_id
    kwargs = config.env_kwargs(reward_scale=1.0)
    try:
        if parse_env_id(env_id).kind != "mario_random_stages":
            kwargs["stages"] = ""
    except EnvIdError:
        pass  # make_env says what is wrong with it below
    try:
        return make_env(env_id, seed=seed, **kwargs)
    except ValueError as exc:  # EnvIdError, or a bad setting in the checkpoint's config
        raise UserError(f"cannot build env {env_id}: {exc}") from None


# ---------------------------------------------------------------------- playing


@contextlib.contextmanager
def single_thread_torch() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block (restored afterwards).

    Acting is one batch-1 forward pass per step: extra threads do not speed it up, and
    on a busy machine their spin-waiting made each step ~100x slower (measured: 0.6 ms
    with one thread, 100 ms with two on a loaded 2-core machine).
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@dataclass
class EpisodeResult:
    """One finished episode. ``ret`` is in game units; ``actions`` replay it from ``seed``."""

    ret: float
    length: int
    x_pos: int
    flag_get: bool
    world: int
    stage: int
    seed: int | None
    truncated: bool
    actions: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "return": self.ret,
            "length": self.length,
            "x_pos": self.x_pos,
            "flag_get": self.flag_get,
            "world": self.world,
            "stage": self.stage,
            "seed": self.seed,
            "truncated": self.truncated,
        }


@dataclass
class Step:
    """One agent step. ``frame`` is the raw colour frame after it (when recording);
    ``result`` is set on the episode's last step."""

    index: int  # 1 for the first step of an episode
    action: int
    reward: float
    episode_return: float
    info: dict[str, Any]
    done: bool
    frame: Any = None
    result: EpisodeResult | None = None


def play_episode(
    env: Any,
    model: Any,
    *,
    frame_stack: int,
    num_actions: int,
    seed: int | None,
    epsilon: float = 0.0,
    rng: Any = None,
    max_steps: int = 0,
    record: bool = False,
    actions: Sequence[int] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[Step]:
    """Play one episode, yielding a :class:`Step` per agent step.

    Args:
        env: from :func:`build_env` (observations ``(84, 84)`` uint8).
        model: the Q-network (eval mode).
        seed: passed to ``env.reset``.
        epsilon: probability of a uniform random action (drawn from ``rng``).
        max_steps: end the episode (as truncated) after this many steps; 0 = only the
            env's own limits.
        record: attach ``env.unwrapped.last_rgb`` (raw colour frame) to every step.
        actions: replay these actions instead of asking the network (the episode ends
            when they run out); used to re-render a recorded episode.
        should_stop: checked every 64 steps; True ends the episode (as truncated).
    """
    import numpy as np
    import torch

    if epsilon > 0 and rng is None:
        raise ValueError("epsilon > 0 needs an rng")
    obs, info = env.reset(seed=seed)
    stack = np.zeros((frame_stack, *np.shape(obs)), np.uint8)
    stack[:] = obs
    stack_tensor = torch.from_numpy(stack).unsqueeze(0)  # shares memory with stack
    taken: list[int] = []
    episode_return = 0.0
    steps = 0
    while True:
        if actions is not None:
            action = int(actions[steps])
        elif epsilon > 0 and rng.random() < epsilon:
            action = int(rng.integers(num_actions))
        else:
            with torch.inference_mode():
                action = int(model(stack_tensor).argmax(1))
        next_obs, reward, terminated, truncated, info = env.step(action)
        steps += 1
        taken.append(action)
        episode_return += float(reward)
        stack[:-1] = stack[1:]
        stack[-1] = next_obs
        if not (terminated or truncated) and (
            (max_steps and steps >= max_steps)
            or (actions is not None and steps >= len(actions))
            or (should_stop is not None and steps % 64 == 0 and should_stop())
        ):
            truncated = True
        done = bool(terminated or truncated)
        step = Step(
            index=steps,
            action=action,
            reward=float(reward),
            episode_return=episode_return,
            info=info,
            done=done,
            frame=env.unwrapped.last_rgb if record else None,
        )
        if done:
            step.result = EpisodeResult(
                ret=episode_return,
                length=steps,
                x_pos=int(info.get("x_pos", 0)),
                flag_get=bool(info.get("flag_get", False)),
                world=int(info.get("world", 0)),
                stage=int(info.get("stage", 0)),
                seed=seed,
                truncated=bool(truncated and not terminated),
                actions=taken,
            )
        yield step
        if done:
            return


def run_episode(env: Any, model: Any, **kwargs: Any) -> EpisodeResult:
    """Play one episode without recording; return its result (arguments of :func:`play_episode`)."""
    for step in play_episode(env, model, **kwargs):
        if step.result is not None:
            return step.result
    raise AssertionError("play_episode ended without a result")  # pragma: no cover


def caption(step: Step, label: str) -> str:
    """The overlay text of a video frame: label (e.g. "ep 1"), step, return, x position, world-stage."""
    info = step.info
    stage = f"  {info.get('world')}-{info.get('stage')}" if info.get("world") else ""
    return f"{label}  t {step.index}  R {step.episode_return:.0f}  x {info.get('x_pos', 0)}{stage}"


def summarise(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Aggregate statistics plus per-episode lists (JSON-ready)."""
    if not results:
        raise ValueError("no episodes to summarise")
    xs = [r.x_pos for r in results]
    return {
        "episodes": len(results),
        "mean_x_pos": float(statistics.fmean(xs)),
        "median_x_pos": float(statistics.median(xs)),
        "max_x_pos": int(max(xs)),
        "flag_rate": float(statistics.fmean(float(r.flag_get) for r in results)),
        "mean_return": float(statistics.fmean(r.ret for r in results)),
        "mean_length": float(statistics.fmean(r.length for r in results)),
        "per_episode": {
            "return": [r.ret for r in results],
            "x_pos": xs,
            "flag_get": [r.flag_get for r in results],
            "length": [r.length for r in results],
            "world": [r.world for r in results],
            "stage": [r.stage for r in results],
            "seed": [r.seed for r in results],
            "truncated": [r.truncated for r in results],
        },
    }
