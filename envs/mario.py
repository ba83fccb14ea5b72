"""Gymnasium adapter around the legacy Super Mario Bros emulator env.

:class:`MarioEnv` builds ``gym_super_mario_bros.smb_env.SuperMarioBrosEnv`` directly
(never ``gym.make``, whose legacy env checker breaks on it) in ``__init__``, i.e. in the
process that will step it: the emulator is a C++ object behind ctypes pointers and must
never be pickled, so worker processes construct their own env.

The adapter speaks the gymnasium API: ``reset(seed=, options=) -> (obs, info)`` and
``step(byte) -> (obs, reward, terminated, truncated, info)``. The action is the raw NES
controller byte (0-255); :class:`envs.wrappers.ActionSet` maps discrete actions onto it.

Legacy behaviour worth knowing:

* the emulator's ``screen`` is a strided *view* of the emulator's frame buffer that the
  next frame overwrites, so every observation is copied out here;
* ``reset`` restores a snapshot taken after the start screen, so a fixed stage replays
  identically from the same actions; the legacy ``seed`` only seeds an RNG the
  emulator never uses. Only random stages consume randomness (the stage choice);
* the emulator keeps one snapshot (nes-py's ``_backup``/``_restore``), the one ``reset``
  restores; to start episodes from a point other than the level's start without losing
  that one, the adapter keeps a second emulator of the same stage whose snapshot is a
  *point* (``reset(options={"start": ...})``, :meth:`MarioEnv.save_point`);
* ``done`` covers every game-terminal event (life lost in a stage env, game over in a
  full-game env, flag, time up), so it maps to ``terminated`` and ``truncated`` is
  always False here (time/progress limits are wrappers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from envs.ids import STAGES, WORLDS, EnvIdError, parse_env_id
from envs.legacy import load_legacy
from envs.stages import parse_stage

FRAME_SHAPE: tuple[int, int, int] = (240, 256, 3)

# RAM address of the player's float state (the disassembly's Player_State): 0 while
# standing on solid ground, 1 jumping, 2 falling off a ledge, 3 on the flagpole.
PLAYER_FLOAT_STATE = 0x001D


def _plain_info(info: dict[str, Any]) -> dict[str, Any]:
    """Turn NumPy scalars read from emulator RAM into Python scalars.

    Values like ``life`` are ``np.uint8``; downstream code sums, compares, logs and
    JSON-encodes them, where uint8 wraps around or fails to serialise.
    """
    return {key: value.item() if isinstance(value, np.generic) else value for key, value in info.items()}


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
                instead of all 32 stages (as the legacy env's ``stages`` argument).
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
        self._smb_class = load_legacy().SuperMarioBrosEnv
        self._random_stages = spec.kind == "mario_random_stages"
        self._stages = [parse_stage(s) for s in stages] if stages is not None else None
        # Emulators by target. A random-stages env builds each stage's emulator on first
        # use instead of all 32 up front as the legacy SuperMarioBrosRandomStagesEnv does
        # (about 8 s of start-screen skipping per env, per worker).
        self._emulators: dict[tuple[int, int] | None, Any] = {}
        self._emulator: Any = None
        # Random stages draw their target at each reset.
        self._current_target: tuple[int, int] | None = None if self._random_stages else spec.target
        if not self._random_stages:
            self._emulator = self._build(spec.target)
        self._active: Any = self._emulator  # the emulator step() drives: the level's or the point's
        # The second emulator of a fixed stage, whose snapshot is a point (built on first use).
        self._point_emulator: Any = None
        self._point_saved = False
        self.point_frames = 0  # frames stepped to bring the point emulator back to the level's start
        self._closed = False
        self.last_rgb: np.ndarray = np.zeros(FRAME_SHAPE, dtype=np.uint8)
        # Set by MaxAndSkip around frames whose pixels it discards (see step).
        self.skip_frame_copy = False

    def _build(self, target: tuple[int, int] | None) -> Any:
        """Return the (cached) legacy emulator env for a target stage."""
        if target not in self._emulators:
            self._emulators[target] = self._smb_class(
                rom_mode=self._spec.rom_mode, lost_levels=self._spec.lost_levels, target=target
            )
        return self._emulators[target]

    def _sample_stage(self, options: dict[str, Any] | None) -> tuple[int, int]:
        """Pick the next random stage (``options["stages"]`` overrides, as in the legacy env)."""
        stages = self._stages
        if options is not None and options.get("stages"):
            stages = [parse_stage(s) for s in options["stages"]]
        if stages:
            return stages[int(self.np_random.integers(len(stages)))]
        world = int(self.np_random.integers(WORLDS.start, WORLDS.stop))
        stage = int(self.np_random.integers(STAGES.start, STAGES.stop))
        return world, stage

    @property
    def stage_target(self) -> tuple[int, int] | None:
        """The (world, stage) the current emulator is pinned to (None for full-game ids)."""
        return self._current_target

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restore the post-start-screen snapshot (of a newly drawn stage for random stages).

        ``options["start"]`` picks where the episode starts: ``"level"`` (the default), the
        level's start; ``"point"``, the point last saved by :meth:`save_point`; or
        ``"new_point"``, the level's start on the second emulator, from where the caller
        steps to a new point and saves it. Points need a fixed stage or the full game (a
        random-stages env draws another stage at each reset).
        """
        super().reset(seed=seed)
        start = (options or {}).get("start", "level")
        if self._closed:
            raise RuntimeError("MarioEnv is closed")
        if start == "level":
            if self._random_stages:
                self._current_target = self._sample_stage(options)
                self._emulator = self._build(self._current_target)
            self._active = self._emulator
            screen = self._active.reset()
        elif start in ("point", "new_point"):
            if self._random_stages:
                raise ValueError(f"start={start!r} needs a fixed stage or the full game, not {self.env_id!r}")
            if start == "point" and not self._point_saved:
                raise RuntimeError("start='point' before any save_point()")
            self._active = self._point_emulator_at_start() if start == "new_point" else self._point_emulator
            screen = self._active.reset() if start == "point" else self._active.screen
        else:
            raise ValueError(f"unknown start {start!r}: use 'level', 'point' or 'new_point'")
        self.last_rgb = np.array(screen)  # copy: the screen view changes on the next frame
        # The legacy reset returns no info; its own info builder reads the same RAM fields.
        return self.last_rgb, _plain_info(self._active._get_info())

    def save_point(self) -> None:
        """Make the point emulator's current state the point that ``start="point"`` restores."""
        if self._active is not self._point_emulator or self._active is None:
            raise RuntimeError("save_point() needs an episode begun with start='new_point'")
        self._active._backup()
        self._point_saved = True

    def _point_emulator_at_start(self) -> Any:
        """The point emulator at the level's start: new (built there), or power-cycled and
        past the start screen as its constructor does (the frames go to ``point_frames``)."""
        if self._point_emulator is None:
            self._point_emulator = self._smb_class(
                rom_mode=self._spec.rom_mode, lost_levels=self._spec.lost_levels, target=self._spec.target
            )
            return self._point_emulator
        emulator = self._point_emulator
        advance = emulator._frame_advance
        frames = 0

        def counted(action: int) -> None:
            nonlocal frames
            frames += 1
            advance(action)

        emulator._frame_advance = counted  # count the frames the start screen takes
        try:
            emulator._has_backup = False  # reset() then power-cycles instead of restoring the point
            emulator.reset()
            emulator._skip_start_screen()
        finally:
            del emulator._frame_advance
            self.point_frames += frames
        self._point_saved = False
        return emulator

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Run one NES frame with controller byte ``action``."""
        if not 0 <= action <= 255:
            raise ValueError(f"action must be an NES controller byte 0-255, got {action!r}")
        if self._active is None:
            raise RuntimeError("MarioEnv is closed")
        screen, reward, done, info = self._active.step(int(action))
        if self.skip_frame_copy and not done:
            # The caller discards this frame's pixels (frame skip keeps only the last two
            # frames): return the emulator's view, valid until the next step, and save a
            # strided 180 KB copy (about 13% of the env's time).
            return screen, float(reward), False, False, _plain_info(info)
        self.last_rgb = np.array(screen)
        return self.last_rgb, float(reward), bool(done), False, _plain_info(info)

    @property
    def on_ground(self) -> bool:
        """Whether Mario stands on solid ground in the current frame (a jump can start)."""
        if self._active is None:
            raise RuntimeError("MarioEnv is closed")
        return int(self._active.ram[PLAYER_FLOAT_STATE]) == 0

    def render(self) -> np.ndarray | None:
        """Return the latest colour frame when ``render_mode="rgb_array"``."""
        if self.render_mode == "rgb_array":
            return self.last_rgb
        return None

    def render_rgb(self) -> np.ndarray:
        """Return the latest (240, 256, 3) colour frame, whatever the render mode."""
        return self.last_rgb

    def close(self) -> None:
        """Free the emulators (safe to call more than once)."""
        for emulator in self._emulators.values():
            emulator.close()
        if self._point_emulator is not None:
            self._point_emulator.close()
        self._emulators.clear()
        self._emulator = self._active = self._point_emulator = None
        self._closed = True
