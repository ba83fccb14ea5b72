"""How much of the CPU other processes took while this one measured something.

Speed figures measured beside other work are low (a 2-core box measured its emulator at
154 frames/s per core with both cores busy, 890 when quiet), and a cache of them would
size every later run wrong. :class:`LoadMeter` brackets a measurement and reports what
the rest of the machine did meanwhile, on the cores this process may run on:

    other CPU time = busy time of those cores (``/proc/stat``, per core)
                     - the CPU time of this process and all its descendants

divided by the wall time: the mean number of cores that other processes kept busy.

Why this and not the load average: ``/proc/loadavg`` is a one-minute exponential mean,
so a measurement of half a minute sees mostly the past; it counts runnable threads, not
CPU time (a spinning process and a process waiting on the disk weigh the same); and it
includes the measurement's own processes, which would have to be guessed out. CPU time
is exact over exactly the window, and this process tree's share of it is known:
``psutil`` gives each live descendant's CPU time, and the CPU time of children already
ended and waited for is counted in their parent's ``children_*`` times. Only the cores
in this process's affinity are counted, so work pinned elsewhere (``taskset``) does not
count, and work on our cores does.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

# The machine counts as busy when other processes used at least this share of the cores
# that the measurement may use: on 2 cores one spinning process (0.5) is far past it, and
# the background of an idle box (well under 0.1 core) far below.
BUSY_SHARE = 0.25
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user, nice, system, irq, softirq, steal (guest is inside user)


@dataclass(frozen=True)
class OtherLoad:
    """What other processes used of ``cores`` cores over ``wall_s`` seconds."""

    other_cores: float  # mean cores kept busy by processes outside this process tree
    cores: int
    wall_s: float

    @property
    def share(self) -> float:
        return self.other_cores / max(1, self.cores)

    @property
    def busy(self) -> bool:
        return self.share >= BUSY_SHARE


def allowed_cpus() -> set[int]:
    """The cpu numbers this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def cores_busy_s(cpus: set[int]) -> float | None:
    """Seconds of CPU time the ``cpus`` have spent busy since boot, from /proc/stat (None where missing)."""
    try:
        lines = open("/proc/stat").read().splitlines()  # noqa: SIM115 - a one-shot read of a proc file
    except OSError:
        return None
    ticks = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            fields = rest.split()
            ticks += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(process: psutil.Process | None = None) -> float:
    """CPU seconds of ``process`` (this one by default), its live descendants, and every
    child they have waited for."""
    root = process or psutil.Process()
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended meanwhile: its time reaches its parent's children_* once reaped
        total += t.user + t.system + t.children_user + t.children_system
    return total


class LoadMeter:
    """Brackets a measurement: made when it starts, :meth:`stop` when it ends."""

    def __init__(self) -> None:
        self.cpus = allowed_cpus()
        self.start_wall = time.monotonic()
        self.start_busy = cores_busy_s(self.cpus)
        self.start_own = tree_cpu_s()

    def stop(self) -> OtherLoad | None:
        """What other processes used since the start; None where /proc/stat cannot be read."""
        busy = cores_busy_s(self.cpus)
        own = tree_cpu_s()
        wall = time.monotonic() - self.start_wall
        if busy is None or self.start_busy is None or wall <= 0:
            return None
        other = max(0.0, (busy - self.start_busy) - (own - self.start_own))
        return OtherLoad(other_cores=other / wall, cores=len(self.cpus), wall_s=wall)
