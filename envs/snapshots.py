"""A built Mario env's whole state, taken and put back: a return to a point of a stage
without replaying the actions that led there.

nes-py 9 snapshots the emulator (``dump_state``/``load_state``, about 20 microseconds
each, against about 1.5 ms of emulation per agent step), but the layers of
:func:`envs.make_env` above it count too: the task reward's last x and clock
(:class:`envs.mario.MarioEnv`), the no-progress cut's best x and stalled steps, and the
episode's step count (gymnasium's ``TimeLimit``, which keeps it in ``_elapsed_steps``).
A snapshot holds them all, so the episode goes on from a restored state exactly as it
would have from the state it was taken in: the same observations, rewards, cuts and
ends. The observation the state was reached with is kept beside it (the preprocessing
layers keep nothing between steps).

Sticky actions draw from a generator at every frame, so a state with them is not one
point to return to: :func:`take` refuses such an env.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium.wrappers import TimeLimit

from envs.mario import MarioEnv, MarioState
from envs.wrappers import NoProgressTruncation, StickyActions

__all__ = ["EnvSnapshot", "can_snapshot", "restore", "take"]


@dataclass(frozen=True)
class EnvSnapshot:
    """An env's state at one step, and the observation it returned there."""

    game: MarioState
    cut: tuple[Any, ...] | None  # NoProgressTruncation's counters (None: the env has no such cut)
    elapsed_steps: int | None  # TimeLimit's step count (None: no limit)
    obs: np.ndarray


def _layers(env: gymnasium.Env) -> list[gymnasium.Env]:
    """The env and every env it wraps, outermost first."""
    layers = [env]
    while isinstance(layers[-1], gymnasium.Wrapper):
        layers.append(layers[-1].env)
    return layers


def can_snapshot(env: gymnasium.Env) -> bool:
    """Whether :func:`take` accepts ``env``: a Mario env without sticky actions."""
    layers = _layers(env)
    return isinstance(layers[-1], MarioEnv) and not any(isinstance(layer, StickyActions) for layer in layers)


def take(env: gymnasium.Env, obs: np.ndarray) -> EnvSnapshot:
    """The state of ``env`` (built by :func:`envs.make_env` for a Mario id), which last
    returned ``obs``."""
    layers = _layers(env)
    game = layers[-1]
    if not isinstance(game, MarioEnv):
        raise TypeError(f"only a Mario env can be snapshot, not {type(game).__name__}")
    if any(isinstance(layer, StickyActions) for layer in layers):
        raise ValueError("an env with sticky actions has no state to return to: its next frames are drawn")
    cut = next((layer.state() for layer in layers if isinstance(layer, NoProgressTruncation)), None)
    limit = next((layer for layer in layers if isinstance(layer, TimeLimit)), None)
    elapsed = None if limit is None else int(limit._elapsed_steps)  # gymnasium keeps it there
    return EnvSnapshot(game.dump_state(), cut, elapsed, obs.copy())


def restore(env: gymnasium.Env, snapshot: EnvSnapshot) -> np.ndarray:
    """Put ``env`` (the one :func:`take` read, or another built alike) back into
    ``snapshot``'s state; return the observation it had there."""
    for layer in _layers(env):
        if isinstance(layer, NoProgressTruncation) and snapshot.cut is not None:
            layer.set_state(snapshot.cut)
        elif isinstance(layer, TimeLimit) and snapshot.elapsed_steps is not None:
            layer._elapsed_steps = snapshot.elapsed_steps
        elif isinstance(layer, MarioEnv):
            layer.load_state(snapshot.game)
    return snapshot.obs.copy()
