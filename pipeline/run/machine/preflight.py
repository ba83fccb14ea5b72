"""The machine's limits, checked before a run creates anything; and the run directory's lock.

A run that cannot fit must fail in its first second with one line that names what does
not fit, the numbers, and the fix, instead of dying minutes later: a /dev/shm too small
for the rings makes collectors die by SIGBUS on their first write (tmpfs allocates pages
lazily; Docker's default /dev/shm is 64 MB), a replay larger than the RAM ends in an
allocator traceback or the OOM killer, and two runs in one directory overwrite each
other's checkpoints. The estimates are deliberately simple and a little generous:

* shared memory: the ring block and the weights block, byte for byte (the segments'
  pages are also reserved at creation, see :func:`pipeline.transport.segments.create_segment`);
* memory: the replay (one 84x84 frame plus action, reward and flags per transition) in
  the learner, plus a measured resident size per collector, per evaluator and for the
  learner's own torch and model state.

More collectors than cores is allowed (it can still pay when the emulator waits on
memory) but gets a warning.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from config import Config
from pipeline.common.cores import usable_cores
from pipeline.common.errors import UserError
from pipeline.transport.records import RECORD_BYTES, TRANSITION_BYTES
from pipeline.transport.ring import RingLayout
from pipeline.transport.segments import SHM_DIR
from pipeline.transport.weights import block_bytes

MB = 2**20
# Resident sizes measured on 2-core runs (`ps -o rss`, steady state): a Mario collector
# with four emulators and its CPU Q-network ~310-370 MB, a Catch one ~250 MB; the
# evaluator ~290 MB; the learner without its replay ~500 MB (torch, model, optimizer,
# compiled graphs). Rounded up: the check must not pass a run that then swaps.
COLLECTOR_BYTES = 400 * MB
EVALUATOR_BYTES = 300 * MB
LEARNER_BYTES = 700 * MB
LOCK_NAME = "run.lock"


class PreflightError(UserError):
    """The machine cannot hold this run; the message says what, by how much, and the fix."""


@dataclass(frozen=True)
class MachineLimits:
    """What the machine offers now (tests pass their own)."""

    shm_free_bytes: int
    memory_available_bytes: int
    cores: int

    @classmethod
    def probe(cls) -> MachineLimits:
        try:
            stat = os.statvfs(SHM_DIR)
            shm_free = stat.f_bavail * stat.f_frsize
        except OSError:  # no /dev/shm (not Linux): shared_memory falls back elsewhere
            shm_free = 2**62
        return cls(shm_free, int(psutil.virtual_memory().available), usable_cores())


@dataclass(frozen=True)
class RunFootprint:
    """What a run will take: shared memory (exact) and resident memory (estimated)."""

    ring_bytes: int
    weights_bytes: int
    replay_bytes: int
    processes_bytes: int

    @property
    def shm_bytes(self) -> int:
        return self.ring_bytes + self.weights_bytes

    @property
    def memory_bytes(self) -> int:
        return self.replay_bytes + self.processes_bytes


def footprint(cfg: Config, num_floats: int) -> RunFootprint:
    """The footprint of ``cfg`` with a network of ``num_floats`` state floats."""
    ring = RingLayout(cfg.num_processes * cfg.envs_per_collector, cfg.ring_capacity).total_bytes
    replay_in_ram = cfg.replay_device == "cpu" or (cfg.replay_device == "auto" and cfg.device == "cpu")
    replay = cfg.replay_capacity * TRANSITION_BYTES if replay_in_ram else 0
    processes = cfg.num_processes * COLLECTOR_BYTES + LEARNER_BYTES
    if cfg.eval_interval_frames > 0:
        processes += EVALUATOR_BYTES
    return RunFootprint(ring, block_bytes(num_floats), replay, processes)


def _mb(n: float) -> str:
    return f"{n / MB:,.1f} MB" if n < 10 * 2**30 else f"{n / 2**30:,.1f} GB"


def check_machine(cfg: Config, num_floats: int, limits: MachineLimits | None = None) -> list[str]:
    """Raise :class:`PreflightError` if the run cannot fit; return warnings (maybe none)."""
    limits = limits or MachineLimits.probe()
    need = footprint(cfg, num_floats)
    slots = cfg.num_processes * cfg.envs_per_collector
    if need.shm_bytes > limits.shm_free_bytes:
        per_capacity = slots * RECORD_BYTES
        fits = max(0, (limits.shm_free_bytes - need.weights_bytes) * 9 // 10 // per_capacity)
        fix = (
            f"lower --set ring_capacity=N (about {fits} fits)"
            if fits >= 16
            else "run fewer collectors (--num-processes) or envs per collector"
        )
        raise PreflightError(
            f"/dev/shm has {_mb(limits.shm_free_bytes)} free but this run needs {_mb(need.shm_bytes)} of shared "
            f"memory: rings {_mb(need.ring_bytes)} ({slots} slots x {cfg.ring_capacity} records x "
            f"{RECORD_BYTES / 1024:.1f} KB) + weights {_mb(need.weights_bytes)}; give it more room "
            f"(docker run --shm-size=1g, or mount -o remount,size=1G /dev/shm) or {fix}"
        )
    if need.memory_bytes > limits.memory_available_bytes:
        spare = limits.memory_available_bytes - need.processes_bytes
        fits = max(0, spare * 9 // 10 // TRANSITION_BYTES)
        if fits >= 10_000:
            fix = f"lower --set replay_capacity=N (about {fits:,} fits) or --num-processes"
        else:
            others = need.processes_bytes - cfg.num_processes * COLLECTOR_BYTES + need.replay_bytes
            collectors = max(0, (limits.memory_available_bytes - others) * 9 // 10 // COLLECTOR_BYTES)
            fix = f"lower --num-processes (about {collectors} fit beside this replay) or replay_capacity"
        raise PreflightError(
            f"not enough memory for this run: replay {_mb(need.replay_bytes)} (replay_capacity="
            f"{cfg.replay_capacity:,} x {TRANSITION_BYTES / 1024:.1f} KB) + {cfg.num_processes} "
            f"collector(s), learner{' and evaluator' if cfg.eval_interval_frames > 0 else ''} "
            f"~{_mb(need.processes_bytes)} = {_mb(need.memory_bytes)}, but {_mb(limits.memory_available_bytes)} "
            f"is available; {fix}"
        )
    warnings = []
    if cfg.num_processes > limits.cores:
        warnings.append(
            f"{cfg.num_processes} collectors on {limits.cores} core(s): they will share cores with each other "
            f"and the learner; --num-processes {max(1, limits.cores - 1)} usually collects as fast"
        )
    return warnings


class RunLock:
    """An exclusive lock on a run directory, held for the whole run.

    ``flock`` on ``<run>/run.lock``: the kernel drops it when its holder dies however it
    dies, so a lock left by a killed run is stale by construction and the next start
    simply takes it (the file still names the dead pid, which is reported). The file
    holds the owner's pid for the error message of a second start.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._handle: IO[str] | None = None
        self.previous_owner: int | None = None  # a dead run's pid, when its lock was taken over

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for the run's lifetime
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise PreflightError(
                f"run directory {self.path.parent} is in use by a live run (pid {owner}); stop that run, "
                "or pass another --run-name (or --run-dir)"
            ) from None
        handle.seek(0)
        text = handle.read().strip()
        self.previous_owner = int(text) if text.isdigit() and int(text) != os.getpid() else None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is None:
            return
        try:
            self._handle.seek(0)
            self._handle.truncate()
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        finally:
            self._handle.close()
            self._handle = None
