"""The supervisor: starts the collector processes, watches them, restarts them, stops them.

Collectors are forked from the fork server of
:func:`~pipeline.common.child.process_context` (never from a process that holds torch's
threads or an emulator). A collector that exits, crashes, or whose heartbeat in its slot header
goes stale (a hung or SIGSTOPped process) is logged, killed if needed, and restarted
on the same slot, where it carries on from the slot's ``write_seq``. A slot that keeps
failing is restarted with a growing delay instead of in a tight loop, and one that fails
the same way :data:`CRASH_LOOP_LIMIT` times in a row, each time within a minute of its
start, is not restarted again: :attr:`Supervisor.fatal` names the cause (the reason and
the last line of its log) and the trainer ends the run with it. A cause that every start
meets (a broken install, a /dev/shm that cannot back the ring) never heals by restarting.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pipeline.common.child import process_context
from pipeline.run.collector.args import CollectorArgs
from pipeline.run.collector.collector_main import collector_main
from pipeline.transport import ring as R

logger = logging.getLogger("mario.supervisor")

STARTUP_GRACE_S = 120.0  # importing torch and booting an emulator on a busy machine
RESTART_WINDOW_S = 60.0
# Fault injection for reliability tests: "SLOT:FAULT[,SLOT:FAULT]" with FAULT one of the
# CollectorArgs.fault values; applied once, at the first start of that slot.
FAULTS_ENV = "MARIO_INJECT_FAULTS"
RESTARTS_BEFORE_BACKOFF = 3
MAX_BACKOFF_S = 30.0
CRASH_LOOP_LIMIT = 5


@dataclass
class SlotState:
    process: mp.process.BaseProcess | None = None
    started_at: float = 0.0
    restarts: int = 0
    recent_failures: list[float] = field(default_factory=list)
    next_start_at: float = 0.0
    last_reason: str = ""
    same_in_row: int = 0  # consecutive failures with last_reason, each soon after its start


class Supervisor:
    def __init__(
        self,
        slots: list[R.Slot],
        make_args: Callable[[int], CollectorArgs],
        *,
        heartbeat_timeout_s: float,
        startup_grace_s: float = STARTUP_GRACE_S,
        target: Callable[[CollectorArgs], None] = collector_main,
    ) -> None:
        self.slots = slots
        self.make_args = make_args
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.startup_grace_s = startup_grace_s
        self.target = target
        self.context = process_context()
        self.states = [SlotState() for _ in slots]
        self.faults: dict[int, str] = parse_faults(os.environ.get(FAULTS_ENV, ""))  # slot -> fault, tests
        self.events: list[str] = []  # bounded log of restart reasons for the monitor
        self.stopping = False
        self.fatal = ""  # set when a collector is in a crash loop: the run must end

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self.states)

    def start_all(self) -> None:
        for index in range(len(self.slots)):
            self._start(index)

    def _start(self, index: int) -> None:
        args = self.make_args(index)
        if index in self.faults:
            # Applied once, at the slot's first start; an "_always" fault at every start.
            fault = self.faults[index] if self.faults[index].endswith("_always") else self.faults.pop(index)
            args = replace(args, fault=fault)
        # The collector sets its one torch thread itself: the fork server's children have
        # the server's environment, not variables set here.
        process = self.context.Process(target=self.target, args=(args,), name=f"collector-{index}", daemon=True)
        process.start()
        state = self.states[index]
        state.process, state.started_at = process, time.monotonic()

    def _record_failure(self, index: int, reason: str) -> None:
        state = self.states[index]
        now = time.monotonic()
        soon = now - state.started_at < RESTART_WINDOW_S
        state.same_in_row = state.same_in_row + 1 if soon and reason == state.last_reason else 1
        if state.same_in_row >= CRASH_LOOP_LIMIT:
            state.restarts += 1
            state.last_reason = reason
            state.next_start_at = float("inf")  # never again: it is not going to heal
            self.fatal = (
                f"collector {index} {reason} on each of its last {state.same_in_row} starts"
                f"{self._last_log_line(index)}; the run cannot collect, so it stops"
            )
            logger.error(self.fatal)
            self.events = (self.events + [self.fatal])[-50:]
            return
        state.recent_failures = [t for t in state.recent_failures if now - t < RESTART_WINDOW_S] + [now]
        extra = len(state.recent_failures) - RESTARTS_BEFORE_BACKOFF
        delay = 0.0 if extra < 0 else min(MAX_BACKOFF_S, 2.0**extra)
        state.next_start_at = now + delay
        state.restarts += 1
        state.last_reason = reason
        message = f"collector {index}: {reason}; restarting" + (f" in {delay:.0f} s" if delay else "")
        logger.warning(message)
        self.events = (self.events + [message])[-50:]

    def _last_log_line(self, index: int) -> str:
        path = self.make_args(index).log_path
        try:
            with open(path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 4096))
                lines = [line.strip() for line in log.read().decode(errors="replace").splitlines() if line.strip()]
        except (OSError, TypeError):
            return ""
        return f" (last line of {path}: {lines[-1][:300]})" if lines else ""

    def check(self) -> None:
        """One supervision pass: restart what died or hung. Cheap; call every ~0.5 s."""
        if self.stopping:
            return
        now = time.monotonic()
        now_ns = time.monotonic_ns()
        for index, state in enumerate(self.states):
            process = state.process
            if process is None:
                if now >= state.next_start_at:
                    self._start(index)
                continue
            if process.exitcode is not None:
                code = process.exitcode
                process.join(0)
                state.process = None
                reason = f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"
                self._record_failure(index, reason)
                continue
            counters = self.slots[index].counters
            age_s = (now_ns - counters.heartbeat_ns) / 1e9
            # The process has registered itself in the slot and is past its start-up.
            started_here = counters.pid == process.pid and counters.state == R.STATE_RUNNING
            limit = self.heartbeat_timeout_s if started_here else self.startup_grace_s + self.heartbeat_timeout_s
            if now - state.started_at > limit and age_s > self.heartbeat_timeout_s:
                process.kill()
                process.join(5)
                state.process = None
                self._record_failure(index, f"heartbeat silent for {age_s:.1f} s (hung); killed")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Wait for collectors to finish (the caller set the stop flag), then kill stragglers."""
        self.stopping = True
        deadline = time.monotonic() + timeout_s
        for state in self.states:
            if state.process is not None:
                state.process.join(max(0.0, deadline - time.monotonic()))
        for state in self.states:
            process = state.process
            if process is not None and process.is_alive():
                process.kill()
                process.join(5)
            state.process = None

    def alive(self) -> int:
        return sum(1 for s in self.states if s.process is not None and s.process.is_alive())


def parse_faults(spec: str) -> dict[int, str]:
    """Parse MARIO_INJECT_FAULTS ("0:env_error:50,1:env_error_always")."""
    faults: dict[int, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        slot, _, fault = item.partition(":")
        if not slot.isdigit() or not fault:
            raise ValueError(f"{FAULTS_ENV}: bad entry {item!r}; use SLOT:FAULT, e.g. 0:env_error:50")
        faults[int(slot)] = fault
    return faults
