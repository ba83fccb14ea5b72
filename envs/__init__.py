"""Environments for the DQN: Super Mario Bros (gym-super-mario-bros 9 on nes-py 9) and Catch.

Public API::

    make_env(env_id, *, action_set="right_only", frame_skip=4, reward_scale=1.0,
             no_progress_steps=0, sticky_actions=0.0, flag_reward=0.0, max_episode_steps=0, stages="", seed=None,
             preprocess=True)
    validate_env_id(env_id)          # raises EnvIdError
    num_actions(env_id, action_set)  # no emulator built
    parse_stages(text), check_stages(env_id, text)  # raise StagesError
    evaluation_stages(env_id, stages)  # (stage name, env id) pairs an evaluation plays
    STAGE_ENDS, along(stage, x_pos)  # where World 1's stages end, how far along an x_pos is
    EnvIdError, ENV_IDS, ENV_ID_HELP, ACTION_SET_NAMES

Importing this package is cheap: the emulator packages are imported only when a Mario
env or action set is needed.
"""

from envs.actions import ACTION_SET_NAMES, DEFAULT_ACTION_SET
from envs.factory import make_env, num_actions
from envs.ids import CATCH_ID, ENV_ID_HELP, ENV_IDS, EnvIdError, validate_env_id
from envs.stages import STAGE_ENDS, StagesError, along, check_stages, evaluation_stages, parse_stages
from envs.wrappers import preprocess_ns

__all__ = [
    "ACTION_SET_NAMES",
    "CATCH_ID",
    "DEFAULT_ACTION_SET",
    "ENV_IDS",
    "ENV_ID_HELP",
    "EnvIdError",
    "STAGE_ENDS",
    "StagesError",
    "along",
    "check_stages",
    "evaluation_stages",
    "make_env",
    "num_actions",
    "parse_stages",
    "preprocess_ns",
    "validate_env_id",
]
