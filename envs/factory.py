"""Build the agent's environment for an env id: adapter plus wrapper stack.

:func:`make_env` is the single entry point every command uses, so each of them accepts
every id of :mod:`envs.ids`, ``Catch-v0`` included. Call it inside the process that
steps the env (emulators cannot be pickled).
"""

from __future__ import annotations

import math
import numbers

import gymnasium
from gymnasium.utils import seeding

from envs.actions import DEFAULT_ACTION_SET, button_lists, validate_action_set
from envs.catch import ACTION_MEANINGS as CATCH_ACTION_MEANINGS
from envs.catch import CatchEnv
from envs.ids import parse_env_id
from envs.mario import MarioEnv
from envs.stages import check_stages, stage_name
from envs.wrappers import (
    ActionSet,
    FlagReward,
    Grayscale,
    MaxAndSkip,
    NoProgressTruncation,
    Resize,
    RewardScale,
    StickyActions,
    TimeLimit,
)

OBS_SIZE = 84


def _check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value`` as an int, or raise ValueError if it is not an integer >= minimum."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_positive(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise ValueError if it is not a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not value > 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def num_actions(env_id: str, action_set: str = DEFAULT_ACTION_SET) -> int:
    """Return the size of the discrete action space, without building an emulator.

    Raises:
        EnvIdError: unknown ``env_id``.
        ValueError: unknown ``action_set`` (checked for Catch too, for uniform errors).
    """
    spec = parse_env_id(env_id)
    validate_action_set(action_set)
    if spec.kind == "catch":
        return len(CATCH_ACTION_MEANINGS)
    return len(button_lists(action_set))


def make_env(
    env_id: str,
    *,
    action_set: str = DEFAULT_ACTION_SET,
    frame_skip: int = 4,
    reward_scale: float = 1.0,
    no_progress_steps: int = 0,
    sticky_actions: float = 0.0,
    flag_reward: float = 0.0,
    max_episode_steps: int | None = 0,
    stages: str = "",
    seed: int | None = None,
    preprocess: bool = True,
) -> gymnasium.Env:
    """Build the environment for ``env_id``.

    Mario: ``MarioEnv [-> StickyActions] -> ActionSet -> MaxAndSkip -> Grayscale -> Resize(84, 84)
    [-> FlagReward] -> RewardScale -> NoProgressTruncation -> TimeLimit``, observations ``(84, 84)``
    uint8. With ``preprocess=False`` only ``ActionSet -> MaxAndSkip`` are applied
    (``(240, 256, 3)`` RGB observations, e.g. for video). Either way the latest raw
    colour frame is ``env.unwrapped.last_rgb``.

    Catch (``Catch-v0``): already renders ``(84, 84)`` uint8 with 3 actions, so
    ``action_set``, ``frame_skip``, ``no_progress_steps`` and ``preprocess`` do not
    apply (``sticky_actions`` above 0 is refused: Catch has no emulator frames);
    ``reward_scale`` and ``max_episode_steps`` do.

    Args:
        env_id: see :data:`envs.ENV_ID_HELP`.
        action_set: "right_jump", "right_only", "simple" or "complex".
        frame_skip: emulator frames per agent step (1 = no skipping).
        reward_scale: factor applied to every reward (> 0).
        no_progress_steps: truncate after this many agent steps without a new
            maximum x position; 0 disables.
        sticky_actions: Mario only; the probability that an emulator frame keeps the
            previous frame's buttons (:class:`envs.wrappers.StickyActions`); 0 disables.
        flag_reward: Mario only; added (game units, before ``reward_scale``) to the
            reward of the step that reaches the flag or the axe
            (:class:`envs.wrappers.FlagReward`); 0 disables.
        max_episode_steps: truncate after this many agent steps; 0 or None disables.
        stages: random-stages ids only: the stages each reset draws from, as
            "world-stage" separated by commas ("1-1,1-2,1-3,1-4"); "" draws from all 32
            (:func:`envs.stages.parse_stages`).
        seed: seeds the env's RNG (and action space) now, so a later ``reset()``
            without a seed is reproducible. Fixed-stage Mario is deterministic given
            the actions anyway; the seed matters for random stages and Catch.
        preprocess: False returns the Mario env before grayscale/resize and the
            reward/limit wrappers.

    Raises:
        EnvIdError: unknown ``env_id`` (message names the id and how to fix it).
        StagesError: a bad stage list, or one with an id that draws no stage.
        ValueError: bad action set or numeric argument.
    """
    spec = parse_env_id(env_id)
    stage_list = check_stages(env_id, stages)
    validate_action_set(action_set)
    frame_skip = _check_int("frame_skip", frame_skip, 1)
    no_progress_steps = _check_int("no_progress_steps", no_progress_steps, 0)
    max_episode_steps = _check_int("max_episode_steps", max_episode_steps or 0, 0)
    reward_scale = _check_positive("reward_scale", reward_scale)
    if isinstance(sticky_actions, bool) or not isinstance(sticky_actions, numbers.Real) or not 0 <= sticky_actions < 1:
        raise ValueError(f"sticky_actions must be a probability in [0, 1) (0 disables), got {sticky_actions!r}")
    if sticky_actions and spec.kind == "catch":
        raise ValueError(f"sticky_actions applies to Mario ids, not {env_id!r}: use 0")
    if isinstance(flag_reward, bool) or not isinstance(flag_reward, numbers.Real) or not 0 <= flag_reward < math.inf:
        raise ValueError(f"flag_reward must be a finite number >= 0 (0 disables), got {flag_reward!r}")
    if flag_reward and spec.kind == "catch":
        raise ValueError(f"flag_reward applies to Mario ids, not {env_id!r}: use 0")

    env: gymnasium.Env
    if spec.kind == "catch":
        env = CatchEnv()
    else:
        mario: gymnasium.Env = MarioEnv(env_id, stages=[stage_name(s) for s in stage_list] or None)
        if sticky_actions:
            mario = StickyActions(mario, float(sticky_actions), seed)
        env = ActionSet(mario, action_set)
        if frame_skip > 1:
            env = MaxAndSkip(env, frame_skip)
        if preprocess:
            env = Resize(Grayscale(env), OBS_SIZE, OBS_SIZE)
    if preprocess or spec.kind == "catch":
        if flag_reward:
            env = FlagReward(env, float(flag_reward))
        if reward_scale != 1.0:
            env = RewardScale(env, reward_scale)
        if no_progress_steps and spec.kind != "catch":
            env = NoProgressTruncation(env, no_progress_steps)
        if max_episode_steps:
            env = TimeLimit(env, max_episode_steps)

    if seed is not None:
        env.unwrapped.np_random, _ = seeding.np_random(seed)
        env.action_space.seed(seed)
    return env
