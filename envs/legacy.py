"""Quiet, lazy import of the legacy gym-based Mario packages.

``gym_super_mario_bros`` and ``nes_py`` are built on the unmaintained ``gym`` package,
whose ``__init__`` prints a multi-line "Gym has been unmaintained ..." notice to stderr
(from ``gym_notices``) the first time it is imported. This module is the only place
that imports them: it does so once, on first use (so ``import envs`` stays cheap and
Catch-only processes never load gym), with stdout/stderr redirected and the
deprecation-style warnings of that import silenced.
"""

from __future__ import annotations

import contextlib
import io
import threading
import warnings
from dataclasses import dataclass
from typing import Any

_lock = threading.Lock()
_loaded: LegacyMario | None = None


@dataclass(frozen=True)
class LegacyMario:
    """The pieces of the legacy packages this project uses.

    Attributes:
        SuperMarioBrosEnv: ``gym_super_mario_bros.smb_env.SuperMarioBrosEnv``.
        right_only, simple_movement, complex_movement: the button lists of
            ``gym_super_mario_bros.actions`` (lists of button-name lists).
    """

    SuperMarioBrosEnv: Any
    right_only: list[list[str]]
    simple_movement: list[list[str]]
    complex_movement: list[list[str]]


def load_legacy() -> LegacyMario:
    """Import the legacy packages (once per process, silently) and return what we use."""
    global _loaded
    # The lock makes the redirect happen once even if threads race here: redirect_stderr
    # swaps the process-wide sys.stderr, so two overlapping imports could restore the
    # wrong stream.
    with _lock:
        if _loaded is None:
            sink = io.StringIO()
            with warnings.catch_warnings():
                for category in (DeprecationWarning, PendingDeprecationWarning, UserWarning):
                    warnings.simplefilter("ignore", category)
                with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
                    import gym  # noqa: F401  (first import prints the notice we swallow)
                    from gym_super_mario_bros import actions
                    from gym_super_mario_bros.smb_env import SuperMarioBrosEnv
            _loaded = LegacyMario(
                SuperMarioBrosEnv=SuperMarioBrosEnv,
                right_only=actions.RIGHT_ONLY,
                simple_movement=actions.SIMPLE_MOVEMENT,
                complex_movement=actions.COMPLEX_MOVEMENT,
            )
        return _loaded
