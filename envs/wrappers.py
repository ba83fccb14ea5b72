"""Gymnasium wrappers that turn the raw Mario adapter into the agent's environment.

Stack order (built by :func:`envs.make_env`)::

    MarioEnv [-> StickyActions] -> ActionSet -> MaxAndSkip -> Grayscale -> Resize
             [-> FlagReward] -> RewardScale -> NoProgressTruncation -> TimeLimit

giving ``(84, 84)`` uint8 observations (frames are stacked later, by the replay
memory). ``TimeLimit`` is gymnasium's own and is re-exported here.
"""

from __future__ import annotations

import time
from typing import Any, SupportsFloat

import cv2
import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import ResizeObservation, TimeLimit

from envs.actions import DEFAULT_ACTION_SET, action_bytes, button_lists

__all__ = [
    "ActionSet",
    "FlagReward",
    "Grayscale",
    "MaxAndSkip",
    "NoProgressTruncation",
    "Resize",
    "RewardScale",
    "StickyActions",
    "TimeLimit",
]

STICKY_STREAM = 2  # the second number of the sticky draws' seed sequence (epsilon's is 1)


class StickyActions(gymnasium.Wrapper[np.ndarray, int, np.ndarray, int]):
    """Each emulator frame keeps the previous frame's buttons with probability ``p``.

    The stochastic protocol of Machado et al. 2018 (the ALE's v5 default, p = 0.25): a
    fixed stage replays identically from the same actions, so a policy can learn one
    trajectory by heart, and an open-loop trap (a greedy policy pushing at a wall forever)
    stays hidden; sticky frames make every start a little different, as a player's
    timing is. The draws come from a generator of their own, reseeded by
    ``reset(seed=s)`` with ``(s, STICKY_STREAM)``, so an episode from a seed is
    reproducible and its draws are independent of the env's and the epsilon's. A reset
    releases every button (the previous frame's buttons are NOOP's). Wraps the byte-level
    env (one frame per step), below :class:`ActionSet` and the frame skip.
    """

    def __init__(self, env: gymnasium.Env[np.ndarray, int], p: float, seed: int | None = None) -> None:
        super().__init__(env)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"sticky action probability must be in [0, 1), got {p!r}")
        self.p = float(p)
        self._rng = np.random.default_rng(None if seed is None else (seed, STICKY_STREAM))
        self._previous = 0  # the byte sent on the previous frame

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the emulator with every button released; a seed reseeds the sticky draws."""
        if seed is not None:
            self._rng = np.random.default_rng((seed, STICKY_STREAM))
        self._previous = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Send ``action``, or with probability ``p`` the previous frame's byte again."""
        if self._rng.random() >= self.p:
            self._previous = int(action)
        return self.env.step(self._previous)


class ActionSet(gymnasium.ActionWrapper[np.ndarray, int, int]):
    """Map discrete actions to NES controller bytes (a gymnasium JoypadSpace).

    Action ``i`` presses the buttons of entry ``i`` of the chosen list:
    "right_jump" (right, right+A), or one of ``gym_super_mario_bros.actions``:
    "right_only" (5 actions), "simple" (SIMPLE_MOVEMENT, 7) or "complex" (12).
    """

    def __init__(self, env: gymnasium.Env[np.ndarray, int], name: str = DEFAULT_ACTION_SET) -> None:
        super().__init__(env)
        self.name = name
        self._bytes = action_bytes(name)
        self._meanings = [" ".join(buttons) for buttons in button_lists(name)]
        self.action_space = spaces.Discrete(len(self._bytes))

    def action(self, action: int) -> int:
        """Return the controller byte of discrete ``action``."""
        # Explicit check: a negative index would otherwise silently pick from the end.
        if not 0 <= action < len(self._bytes):
            raise ValueError(f"action {action!r} out of range for action set {self.name!r} (0-{len(self._bytes) - 1})")
        return self._bytes[int(action)]

    def get_action_meanings(self) -> list[str]:
        """Return the buttons of each action, e.g. "right A" for action 2 of "simple"."""
        return list(self._meanings)


class MaxAndSkip(gymnasium.Wrapper[np.ndarray, Any, np.ndarray, Any]):
    """Repeat an action ``skip`` frames; sum rewards; max the last two frames.

    The NES flickers sprites on alternate frames when too many share a scanline, so the
    elementwise max of the last two frames keeps every sprite visible. Stops early when
    the episode ends; the observation is then the max of the last two frames actually
    produced (just that frame if the episode ended on the first one).

    Unlike ``gymnasium.wrappers.MaxAndSkipObservation``, which on an early stop maxes
    frames left over from the previous agent step, the terminal observation here is
    always from this step. Requires the wrapped env to return a fresh array per step
    (as :class:`envs.mario.MarioEnv` does), except that an env with a
    ``skip_frame_copy`` attribute is told which frames' pixels are discarded (all but
    the last two) and may skip copying them. A terminal observation produced right after
    such a frame is that frame alone (terminal observations are never bootstrapped from).
    """

    def __init__(self, env: gymnasium.Env[np.ndarray, Any], skip: int = 4) -> None:
        super().__init__(env)
        if not isinstance(skip, (int, np.integer)) or skip < 1:
            raise ValueError(f"frame skip must be an integer >= 1, got {skip!r}")
        self.skip = int(skip)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step ``skip`` frames (fewer if the episode ends) with the same action."""
        total_reward = 0.0
        previous: np.ndarray | None = None
        obs: np.ndarray | None = None
        inner = self.env.unwrapped
        can_skip_copies = hasattr(inner, "skip_frame_copy")
        discarded = False  # whether obs is a view whose pixels we promised not to keep
        try:
            for index in range(self.skip):
                previous = None if discarded else obs
                discarded = can_skip_copies and index < self.skip - 2
                if can_skip_copies:
                    inner.skip_frame_copy = discarded
                obs, reward, terminated, truncated, info = self.env.step(action)
                total_reward += float(reward)
                if terminated or truncated:
                    break
        finally:
            if can_skip_copies:
                inner.skip_frame_copy = False
        if previous is not None:
            obs = np.maximum(previous, obs)
        return obs, total_reward, terminated, truncated, info


class Grayscale(gymnasium.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """RGB ``(H, W, 3)`` uint8 -> luma ``(H, W)`` uint8 via OpenCV (ITU-R 601 weights)."""

    def __init__(self, env: gymnasium.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        height, width, _ = env.observation_space.shape
        self.observation_space = spaces.Box(low=0, high=255, shape=(height, width), dtype=np.uint8)

        self.elapsed_ns = 0  # time spent converting, read by preprocess_ns()

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """Convert one frame."""
        start = time.perf_counter_ns()
        gray = cv2.cvtColor(observation, cv2.COLOR_RGB2GRAY)
        self.elapsed_ns += time.perf_counter_ns() - start
        return gray


class Resize(ResizeObservation):
    """Resize frames to ``(height, width)`` with OpenCV area interpolation.

    A named-argument front for ``gymnasium.wrappers.ResizeObservation``, which already
    uses ``cv2.resize(..., interpolation=cv2.INTER_AREA)``; area averaging (rather than
    nearest/bilinear sampling) keeps thin sprites and edges from aliasing away.
    """

    def __init__(self, env: gymnasium.Env[np.ndarray, Any], height: int = 84, width: int = 84) -> None:
        super().__init__(env, (int(height), int(width)))
        self.elapsed_ns = 0  # time spent resizing, read by preprocess_ns()

    def observation(self, observation: np.ndarray) -> np.ndarray:
        start = time.perf_counter_ns()
        resized = super().observation(observation)
        self.elapsed_ns += time.perf_counter_ns() - start
        return resized


def preprocess_ns(env: gymnasium.Env) -> int:
    """Nanoseconds the preprocessing wrappers of ``env`` have spent so far.

    The collector subtracts this from the time of ``env.step`` to report emulation and
    preprocessing as separate phases.
    """
    total = 0
    while isinstance(env, gymnasium.Wrapper):
        total += getattr(env, "elapsed_ns", 0)
        env = env.env
    return total


class FlagReward(gymnasium.Wrapper[np.ndarray, Any, np.ndarray, Any]):
    """Add ``bonus`` to the reward of the step that ends the stage at its goal.

    The task's reward counts x progress, the clock and deaths, and nothing for the flag
    itself: on 1-2 an episode that runs along the ceiling past the exit pipe into the warp
    zone (whose pipes need Down) and stands at its wall returns more than one that takes
    the pipe to the flag (docs/learning-history.md, "the warp zone"). The bonus (game
    units, before the scale) is paid once, on the terminal step whose info has
    ``flag_get`` (the flag, or the axe in a castle); a death or a cut pays nothing.
    """

    def __init__(self, env: gymnasium.Env[np.ndarray, Any], bonus: float) -> None:
        super().__init__(env)
        if not np.isfinite(bonus) or bonus <= 0:
            raise ValueError(f"flag reward must be a finite number > 0, got {bonus!r}")
        self.bonus = float(bonus)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, adding the bonus on the step that reaches the goal."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and info.get("flag_get"):
            reward = float(reward) + self.bonus
        return obs, reward, terminated, truncated, info


class RewardScale(gymnasium.RewardWrapper[np.ndarray, Any]):
    """Multiply every reward by ``scale``."""

    def __init__(self, env: gymnasium.Env[np.ndarray, Any], scale: float) -> None:
        super().__init__(env)
        if not np.isfinite(scale) or scale <= 0:
            raise ValueError(f"reward scale must be a finite number > 0, got {scale!r}")
        self.scale = float(scale)

    def reward(self, reward: SupportsFloat) -> float:
        """Scale one reward."""
        return float(reward) * self.scale


class NoProgressTruncation(gymnasium.Wrapper[np.ndarray, Any, np.ndarray, Any]):
    """Truncate when ``info["x_pos"]`` sets no new maximum for ``max_steps`` steps.

    Cuts episodes where the agent is stuck (e.g. pressing into a pipe) instead of
    letting it burn the stage timer. The maximum restarts whenever world, stage or
    life changes, since a respawn or a new stage starts x_pos from the left again and
    would otherwise count as no progress. ``max_steps=0`` disables the cut. A step
    that is already terminal is not also marked truncated.

    """

    def __init__(self, env: gymnasium.Env[np.ndarray, Any], max_steps: int) -> None:
        super().__init__(env)
        if not isinstance(max_steps, (int, np.integer)) or max_steps < 0:
            raise ValueError(f"no-progress steps must be an integer >= 0 (0 disables), got {max_steps!r}")
        self.max_steps = int(max_steps)
        self._best_x = 0
        self._stalled = 0
        self._attempt: tuple[Any, ...] = ()

    @staticmethod
    def _attempt_key(info: dict[str, Any]) -> tuple[Any, ...]:
        return (info.get("world"), info.get("stage"), info.get("life"))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset and start counting from the starting x position."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._best_x = info["x_pos"]
        self._stalled = 0
        self._attempt = self._attempt_key(info)
        return obs, info

    def state(self) -> tuple[int, int, tuple[Any, ...]]:
        """The counters the cut depends on (for a snapshot of the env)."""
        return self._best_x, self._stalled, self._attempt

    def set_state(self, state: tuple[int, int, tuple[Any, ...]]) -> None:
        """Put back a :meth:`state`."""
        self._best_x, self._stalled, self._attempt = state

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step, and truncate after ``max_steps`` consecutive steps without a new maximum."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        x_pos = info["x_pos"]
        attempt = self._attempt_key(info)
        if attempt != self._attempt or x_pos > self._best_x:
            self._attempt = attempt
            self._best_x = x_pos
            self._stalled = 0
        else:
            self._stalled += 1
        if self.max_steps and self._stalled >= self.max_steps and not terminated:
            truncated = True
        return obs, reward, terminated, truncated, info
