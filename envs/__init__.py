"""Environments for the DQN: Super Mario Bros (via the legacy emulator) and Catch.

Public API::

    make_env(env_id, *, action_set="simple", frame_skip=4, reward_scale=1.0,
             no_progress_steps=0, jump_retrigger=False, max_episode_steps=0,
             seed=None, preprocess=True)
    validate_env_id(env_id)          # raises EnvIdError
    num_actions(env_id, action_set)  # no emulator built
    EnvIdError, ENV_IDS, ENV_ID_HELP, ACTION_SET_NAMES

Importing this package is cheap and silent: the legacy gym-based packages are only
imported (quietly, see :mod:`envs.legacy`) when a Mario env or action set is needed.
"""

from envs.actions import ACTION_SET_NAMES, DEFAULT_ACTION_SET
from envs.factory import make_env, num_actions
from envs.ids import CATCH_ID, ENV_ID_HELP, ENV_IDS, EnvIdError, validate_env_id
from envs.wrappers import preprocess_ns

__all__ = [
    "ACTION_SET_NAMES",
    "CATCH_ID",
    "DEFAULT_ACTION_SET",
    "ENV_IDS",
    "ENV_ID_HELP",
    "EnvIdError",
    "make_env",
    "num_actions",
    "preprocess_ns",
    "validate_env_id",
]
