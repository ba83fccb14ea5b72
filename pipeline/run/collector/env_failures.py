"""What a collector does when one of its environments raises: it logs the error (with its
traceback the first time that error is seen, one line for each repeat, so a flapping
env cannot flood the log) and, when failures keep coming, backs off before the env is
rebuilt. The collector (:mod:`~pipeline.run.collector.collector_main`) rebuilds the env and
cuts the failed episode (the replay memory never bootstraps across a cut).

:class:`InjectedFaults` raises such failures on purpose, for the reliability tests
(``CollectorArgs.fault``).
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from collections.abc import Callable

__all__ = ["ENV_ERROR_BACKOFF_S", "ENV_ERROR_LIMIT", "ENV_ERROR_WINDOW_S", "EnvFailures", "InjectedFaults"]

ENV_ERROR_LIMIT = 5  # env failures within ENV_ERROR_WINDOW_S before backing off
ENV_ERROR_WINDOW_S = 60.0
ENV_ERROR_BACKOFF_S = 5.0
# Distinct error texts remembered (each logged with its traceback once); a bound, not a history.
SEEN_ERRORS_LIMIT = 100


class EnvFailures:
    """The recent env failures of one collector (``slot`` names it in the log)."""

    def __init__(self, slot: int, logger: logging.Logger) -> None:
        self.slot = slot
        self.logger = logger
        self.recent: list[float] = []  # times of recent failures (bounded by the window)
        self.seen: set[str] = set()

    def record(self, *, should_stop: Callable[[], bool], beat: Callable[[], None]) -> bool:
        """Log the exception being handled; after :data:`ENV_ERROR_LIMIT` failures within
        :data:`ENV_ERROR_WINDOW_S`, wait :data:`ENV_ERROR_BACKOFF_S` (heartbeat beating).
        Returns False when ``should_stop`` turned true during the wait."""
        now = time.monotonic()
        self.recent = [t for t in self.recent if now - t < ENV_ERROR_WINDOW_S] + [now]
        error = traceback.format_exception_only(*sys.exc_info()[:2])[-1].strip()
        if error not in self.seen:
            if len(self.seen) < SEEN_ERRORS_LIMIT:
                self.seen.add(error)
            self.logger.error("collector %d: environment raised; rebuilding it:\n%s", self.slot, traceback.format_exc())
        else:
            self.logger.error("collector %d: environment raised again (%s); rebuilding it", self.slot, error)
        if len(self.recent) < ENV_ERROR_LIMIT:
            return True
        self.logger.error(
            "collector %d: %d environment failures in the last %.0f s; backing off %.0f s before rebuilding",
            self.slot,
            len(self.recent),
            ENV_ERROR_WINDOW_S,
            ENV_ERROR_BACKOFF_S,
        )
        deadline = time.monotonic() + ENV_ERROR_BACKOFF_S
        while time.monotonic() < deadline:
            if should_stop():
                return False
            beat()
            time.sleep(0.1)
        self.recent.clear()
        return True


class InjectedFaults:
    """Reliability tests only: failures raised as a broken emulator or a broken start would.

    ``fault`` is ``""`` (none), ``"crash_always"`` (the collector's start raises, on every
    start), ``"env_error:<step>"`` (its env raises once, at that agent step) or
    ``"env_error_always"`` (at every step).
    """

    def __init__(self, fault: str) -> None:
        self.fault = fault
        if fault == "crash_always":
            raise RuntimeError("injected crash while starting (every start)")
        self.at_step = int(fault.split(":", 1)[1]) if fault.startswith("env_error:") else -1

    def on_step(self, steps: int) -> None:
        """Called inside env stepping, with the stream's agent steps so far."""
        if self.fault == "env_error_always":
            raise RuntimeError("injected environment fault (every step)")
        if steps == self.at_step:
            self.at_step = -1  # once
            raise RuntimeError(f"injected environment fault at step {steps}")
