"""CPU and memory of a process, for the monitor (psutil, cached per pid).

psutil's ``cpu_percent`` measures since the previous call on the same Process object,
so the objects are kept between monitor ticks (bounded: one per live pid).
"""

from __future__ import annotations

from typing import TypedDict

import psutil

_processes: dict[int, psutil.Process] = {}
MAX_TRACKED = 1024


class ProcessStats(TypedDict):
    """One process's figures; these keys go into the monitor's per-collector rows as they are."""

    cpu_pct: float  # percent of one core since the previous call for the same pid
    rss_mb: float


def process_stats(pid: int | None) -> ProcessStats:
    """CPU and resident memory of ``pid`` since the previous call (zeros if it is gone)."""
    if pid is None:
        return {"cpu_pct": 0.0, "rss_mb": 0.0}
    try:
        process = _processes.get(pid)
        if process is None:
            if len(_processes) >= MAX_TRACKED:
                _processes.clear()
            process = _processes[pid] = psutil.Process(pid)
            process.cpu_percent(None)  # first call primes the measurement
        return {"cpu_pct": process.cpu_percent(None), "rss_mb": process.memory_info().rss / 2**20}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        _processes.pop(pid, None)
        return {"cpu_pct": 0.0, "rss_mb": 0.0}
