"""The episode loop that ``eval``, ``play``, the evaluator and the learning benchmark share.

* :func:`build_env` builds the env a run's policy plays in: the run's frame skip, action
  set and truncation limits (``no_progress_steps``, ``max_episode_steps``) but
  ``reward_scale=1``, so returns are in game units, like ``episode_return`` in
  ``metrics.csv``.
* :func:`play_episode` plays one episode and yields a :class:`Step` per agent step
  (with the raw colour frame when asked), exactly as a collector acts: the
  observation is a ``(frame_stack, 84, 84)`` uint8 stack filled with the first
  observation at reset and rolled by one frame per step, with the previous action
  ("none" at reset) for a network that sees it; the action is the network's argmax,
  or with probability ``epsilon`` a uniform random action. :func:`run_episode` plays one
  to its end; :func:`summarise` gives the figures of several.

Reproducibility: the caller resets episode ``i`` with ``seed + i`` and passes one
``numpy.random.default_rng(seed)`` for the epsilon draws; a draw is taken only when
``epsilon > 0`` (``rng.random() < epsilon`` then ``rng.integers(num_actions)``).
``x_pos`` and ``flag_get`` are read from the info of an episode's last step, as the
collectors report them.

The network to play comes from :mod:`~pipeline.learning.policy` (a checkpoint, a mark or
an export). Importing this module is cheap; torch and the emulator load on first use.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from config import Config
from pipeline.common.errors import UserError

__all__ = [
    "EpisodeResult",
    "Step",
    "build_env",
    "caption",
    "play_episode",
    "run_episode",
    "single_thread_torch",
    "summarise",
]


def build_env(config: Config, env_id: str | None = None, seed: int | None = None, *, sticky: float = 0.0):
    """The env a run's policy plays in: its settings, but the task's reward (game units,
    no scale and no flag reward).

    The run's stage list only goes with a random-stages id: another id (one stage of the
    list, played alone) is built without it. ``sticky`` > 0 plays it with sticky actions
    (``eval --sticky``: the field's stochastic protocol; runs train without them).
    """
    from envs import make_env
    from envs.ids import EnvIdError, parse_env_id

    env_id = env_id or config.env_id
    kwargs = config.env_kwargs(task_reward=True)
    if sticky:
        kwargs["sticky_actions"] = sticky
    try:
        if parse_env_id(env_id).kind != "mario_random_stages":
            kwargs["stages"] = ""
    except EnvIdError:
        pass  # make_env says what is wrong with it below
    try:
        return make_env(env_id, seed=seed, **kwargs)
    except ValueError as exc:  # EnvIdError, or a bad setting in the checkpoint's config
        raise UserError(f"cannot build env {env_id}: {exc}") from None


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
