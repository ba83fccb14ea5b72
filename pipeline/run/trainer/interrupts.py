"""Ctrl-C and SIGTERM while a training run starts or waits to finish.

:class:`StartupInterrupts` keeps a Ctrl-C (or SIGTERM) of the startup from being lost;
:class:`WaitInterrupts` lets one end an optional wait of the shutdown (the final
evaluation) without tearing the shutdown itself apart.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["StartupInterrupts", "WaitInterrupts"]


class StartupInterrupts:
    """Ctrl-C and SIGTERM while a run starts: remembered, and raised as KeyboardInterrupt.

    Python's own SIGINT handler raises KeyboardInterrupt wherever the main thread happens
    to be. During the learner's compile that is deep inside torch, where it can be lost:
    raised inside a finalizer it is printed and dropped, and a compile that fails because
    the same Ctrl-C killed the C++ compiler looks like a broken compiler (the learner falls
    back to eager and carries on). The flag set here survives all of that: the Trainer
    checks it once the warm-up returns and again when its event loop takes the signals
    over, so a Ctrl-C at any moment of the startup stops the run.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received = ""  # the signal's name, once one came
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StartupInterrupts:
        if threading.current_thread() is threading.main_thread():  # handlers live in the main thread only
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if a signal came, even one whose interrupt was swallowed."""
        if self.received:
            raise KeyboardInterrupt


class WaitInterrupts(StartupInterrupts):
    """Ctrl-C and SIGTERM while the shutdown waits for something optional (the final
    evaluation): remembered, never raised, so the wait ends and the shutdown goes on to
    the final checkpoint instead of being torn out of it by a KeyboardInterrupt."""

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signal.Signals(signum).name
