"""Gymnasium adapter around gym-super-mario-bros's emulator env, with the project's task.

:class:`MarioEnv` builds ``gym_super_mario_bros.smb_env.SuperMarioBrosEnv`` directly
(not through ``gymnasium.make``, whose TimeLimit and order wrappers it does not need) in
``__init__``, i.e. in the process that will step it: the emulator is a native object that
cannot be pickled, so worker processes construct their own env.

The adapter speaks the gymnasium API: ``reset(seed=, options=) -> (obs, info)`` and
``step(byte) -> (obs, reward, terminated, truncated, info)``. The action is the raw NES
controller byte (0-255); :class:`envs.wrappers.ActionSet` maps discrete actions onto it.
The reward is the project's (:mod:`envs.task_reward`), not the package's.

Emulator behaviour worth knowing:

* the emulator's ``screen`` is a strided *view* of its frame buffer that the next frame
  overwrites, so every kept observation is copied out here (by the emulator's native
  contiguous copy, about 13 % cheaper than ``np.array`` of the view);
* ``reset`` restores a snapshot taken after the start screen, so a fixed stage replays
  identically from the same actions; the ``seed`` only seeds an RNG the emulator never
  uses. Only random stages consume randomness (the stage choice);
* ``terminated`` covers every game-terminal event (life lost in a stage env, game over in
  a full-game env, flag, time up), and ``truncated`` is always False here (time and
  progress limits are wrappers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from envs.ids import STAGES, WORLDS, EnvIdError, parse_env_id
from envs.stages import parse_stage
from envs.task_reward import TaskReward

FRAME_SHAPE: tuple[int, int, int] = (240, 256, 3)

# RAM address of the player's float state (the disassembly's Player_State): 0 while
# standing on solid ground, 1 jumping, 2 falling off a ledge, 3 on the flagpole.
PLAYER_FLOAT_STATE = 0x001D

# The info keys an env reports (of the ~40 the emulator builds): what the wrappers, the
# episode summaries and the evaluator read.
INFO_KEYS: tuple[str, ...] = (
    "coins",
    "flag_get",
    "life",
    "score",
    "stage",
    "status",
    "time",
    "world",
    "x_pos",
    "y_pos",
)


def _task_info(info: dict[str, Any]) -> dict[str, Any]:
    """The :data:`INFO_KEYS` of the emulator's info, as Python scalars."""
    return {key: info[key].item() if isinstance(info[key], np.generic) else info[key] for key in INFO_KEYS}


# What gym-super-mario-bros keeps in Python beside the emulator, from one frame to the
# next: the package's own reward shaping and its done flag. Its terminated does not read
# them, and this env's reward is its own, but a loaded state puts them back all the same,
# so the emulator env is left as the frames played would have left it.
EMULATOR_COUNTERS: tuple[str, ...] = (
    "_time_last",
    "_x_position_max",
    "_score_last",
    "_coins_last",
    "_status_last",
    "_completion_rewarded",
    "done",
)


@dataclass(frozen=True)
class MarioState:
    """A :meth:`MarioEnv.dump_state`: opaque but for the stage it belongs to."""

    target: tuple[int, int] | None  # the stage (world, stage) of the emulator it was taken from
    emulator: Any  # nes-py's native snapshot
    counters: dict[str, Any]  # EMULATOR_COUNTERS' values
    reward: tuple[int, int]  # the task reward's state


class MarioEnv(gymnasium.Env[np.ndarray, int]):
    """One Super Mario Bros env id as a gymnasium env with raw RGB observations.

    Observation: the emulator frame, ``(240, 256, 3)`` uint8, a fresh array each step.
    Action: the NES controller byte, ``Discrete(256)``.
    Info: ``x_pos, y_pos, flag_get, world, stage, life, score, time, coins, status``
    (Python scalars), on reset as well as on every step.

    Attributes:
        last_rgb: the colour frame of the latest reset/step (the array last returned
            as the observation), for video capture from below any wrapper stack.
        env_id: the id this env was built from.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 60}

    def __init__(
        self,
        env_id: str = "SuperMarioBros-1-1-v0",
        *,
        stages: Sequence[str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        """Build the emulator for ``env_id`` in this process.

        Args:
            env_id: a Mario id (see :data:`envs.ids.ENV_ID_HELP`).
            stages: random-stages ids only: sample from these "world-stage" strings
                instead of all 32 stages.
            render_mode: None or "rgb_array" (returns :attr:`last_rgb`).
        """
        spec = parse_env_id(env_id)
        if spec.kind == "catch":
            raise EnvIdError(f"env id {env_id!r} is not a Mario id; build it with envs.make_env")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}: use None or 'rgb_array'")
        if stages is not None and spec.kind != "mario_random_stages":
            raise ValueError(f"stages= only applies to SuperMarioBrosRandomStages ids, not {env_id!r}")
        self.env_id = env_id
        self.render_mode = render_mode
        self.observation_space = spaces.Box(low=0, high=255, shape=FRAME_SHAPE, dtype=np.uint8)
        self.action_space = spaces.Discrete(256)
        self._spec = spec
        # Imported here, not at the top: Catch-only processes never load the emulator.
        from gym_super_mario_bros.smb_env import SuperMarioBrosEnv

        self._smb_class = SuperMarioBrosEnv
        self._reward = TaskReward()
        self._random_stages = spec.kind == "mario_random_stages"
        self._stages = [parse_stage(s) for s in stages] if stages is not None else None
        # Emulators by target. A random-stages env builds each stage's emulator on first
        # use instead of all 32 up front (about 8 s of start-screen skipping per env, per
        # worker).
        self._emulators: dict[tuple[int, int] | None, Any] = {}
        self._emulator: Any = None
        # Random stages draw their target at each reset.
        self._current_target: tuple[int, int] | None = None if self._random_stages else spec.target
        if not self._random_stages:
            self._emulator = self._build(spec.target)
        self._closed = False
        self.last_rgb: np.ndarray = np.zeros(FRAME_SHAPE, dtype=np.uint8)
        # Set by MaxAndSkip around frames whose pixels it discards (see step).
        self.skip_frame_copy = False

    def _build(self, target: tuple[int, int] | None) -> Any:
        """Return the (cached) emulator env for a target stage."""
        if target not in self._emulators:
            self._emulators[target] = self._smb_class(lost_levels=self._spec.lost_levels, target=target)
        return self._emulators[target]

    def _sample_stage(self, options: dict[str, Any] | None) -> tuple[int, int]:
        """Pick the next random stage (``options["stages"]`` overrides the env's list)."""
        stages = self._stages
        if options is not None and options.get("stages"):
            stages = [parse_stage(s) for s in options["stages"]]
        if stages:
            return stages[int(self.np_random.integers(len(stages)))]
        world = int(self.np_random.integers(WORLDS.start, WORLDS.stop))
        stage = int(self.np_random.integers(STAGES.start, STAGES.stop))
        return world, stage

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restore the post-start-screen snapshot (of a newly drawn stage for random stages)."""
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("MarioEnv is closed")
        if self._random_stages:
            self._current_target = self._sample_stage(options)
            self._emulator = self._build(self._current_target)
        _, info = self._emulator.reset()
        self._reward.reset(info)
        # A copy: the screen view changes on the next frame.
        self.last_rgb = self._emulator.observation("rgb_array_contiguous")
        return self.last_rgb, _task_info(info)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run one NES frame with controller byte ``action``."""
        if not 0 <= action <= 255:
            raise ValueError(f"action must be an NES controller byte 0-255, got {action!r}")
        if self._emulator is None:
            raise RuntimeError("MarioEnv is closed")
        screen, _, terminated, _, info = self._emulator.step(int(action))
        reward = self._reward.step(info)
        if self.skip_frame_copy and not terminated:
            # The caller discards this frame's pixels (frame skip keeps only the last two
            # frames): return the emulator's view, valid until the next step, and save a
            # 180 KB copy.
            return screen, reward, False, False, _task_info(info)
        self.last_rgb = self._emulator.observation("rgb_array_contiguous")
        return self.last_rgb, reward, bool(terminated), False, _task_info(info)

    def dump_state(self) -> MarioState:
        """The whole game state: the emulator's (nes-py's native snapshot: CPU, RAM, PPU,
        ...), the counters gym-super-mario-bros keeps beside it, and the task reward's."""
        if self._emulator is None:
            raise RuntimeError("MarioEnv is closed")
        emulator = self._emulator
        counters = {name: getattr(emulator, name) for name in EMULATOR_COUNTERS}
        return MarioState(self._current_target, emulator.dump_state(), counters, self._reward.state())

    def load_state(self, state: MarioState) -> None:
        """Put back a :meth:`dump_state` of the same stage; the next step goes on from it
        exactly as from the state it was taken in."""
        if self._emulator is None:
            raise RuntimeError("MarioEnv is closed")
        if state.target != self._current_target:
            raise ValueError(f"a state of stage {state.target} cannot be loaded into stage {self._current_target}")
        self._emulator.load_state(state.emulator)
        for name, value in state.counters.items():
            setattr(self._emulator, name, value)
        self._reward.set_state(state.reward)
        self.last_rgb = self._emulator.observation("rgb_array_contiguous")

    @property
    def on_ground(self) -> bool:
        """Whether Mario stands on solid ground in the current frame (a jump can start)."""
        if self._emulator is None:
            raise RuntimeError("MarioEnv is closed")
        return int(self._emulator.ram[PLAYER_FLOAT_STATE]) == 0

    def render(self) -> np.ndarray | None:
        """Return the latest colour frame when ``render_mode="rgb_array"``."""
        if self.render_mode == "rgb_array":
            return self.last_rgb
        return None

    def close(self) -> None:
        """Free the emulators (safe to call more than once)."""
        for emulator in self._emulators.values():
            emulator.close()
        self._emulators.clear()
        self._emulator = None
        self._closed = True
