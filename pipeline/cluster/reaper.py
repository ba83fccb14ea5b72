"""A node agent's reaper: unlinks the agent's shared-memory segments once the agent is gone.

Ray ties a node agent's life to its driver (the learner): when the driver dies, even by
SIGKILL, Ray kills its actors within seconds, and with each agent the processes it
started (its collectors and the resource tracker that would have unlinked the agent's
segments). No code in the agent runs, so a thread of its own cannot clean up; its
ring and weights blocks would stay in /dev/shm until the next run on that machine
removed them.

So each agent starts one small process that is not in Ray's process tree: started in a
session of its own (out of the agent's process group) by an intermediate that exits at
once (so it is no process's child that Ray kills). It polls the agent's pid once a
second; when the agent is gone (its pid gone, or reused by another process: the start
time in ``/proc/<pid>/stat`` differs), it unlinks whichever of the agent's segments
still exist, and exits. When the agent releases its segments itself (a normal
shutdown), the reaper sees them gone and exits too.

The file runs as a script (``python reaper.py PID PREFIX NAME...``) and uses the standard library
only: it starts in a fraction of a second and imports nothing of the project.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
POLL_S = 1.0


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` (clock ticks since boot) from /proc, or None if it is gone.

    With the pid, it names one process: a pid reused after the agent died has another.
    Where /proc is missing, "" stands for any live process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def owned_names(pid: int, prefix: str, names: list[str]) -> list[str]:
    """The names that are this project's segments (``prefix``: the agent's segment prefix)
    owned by ``pid``; nothing else is ever unlinked."""
    return [name for name in names if name.startswith(prefix) and f"_{pid}_" in name and "/" not in name]


def watch(pid: int, started: str | None, prefix: str, names: list[str], poll_s: float = POLL_S) -> list[str]:
    """Wait until ``pid`` (started at ``started``) is gone, then unlink ``names``; return those unlinked.

    Returns early, unlinking nothing, once none of ``names`` exists (the agent released them).
    """
    names = owned_names(pid, prefix, names)
    while True:
        present = [name for name in names if (SHM_DIR / name).exists()]
        if not present:
            return []
        if started is None or start_time(pid) != started:
            removed = []
            for name in present:
                try:
                    (SHM_DIR / name).unlink()
                    removed.append(name)
                except FileNotFoundError:
                    pass
            return removed
        time.sleep(poll_s)


def launch(pid: int, prefix: str, names: list[str]) -> bool:
    """Start the reaper of the agent ``pid`` and its segments ``names``, named with ``prefix``
    (the agent's :data:`pipeline.transport.segments.PREFIX`; called by the agent).

    Returns whether it started; without it the agent still runs (its segments are then
    removed only by the next run on the machine, as their owner pid is gone).
    """
    try:
        subprocess.run(
            # -I: nothing from the environment or this file's folder on the module path.
            [sys.executable, "-I", str(Path(__file__).resolve()), str(pid), prefix, *names],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of the agent's process group, which Ray kills with it
            close_fds=True,
            check=True,
            timeout=60,  # the intermediate only forks and exits
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return True


def main(argv: list[str]) -> int:
    pid, prefix, names = int(argv[0]), argv[1], argv[2:]
    started = start_time(pid)  # read while the agent waits for this intermediate: it is alive
    if os.fork():
        os._exit(0)  # the intermediate: the reaper below is now nobody's child in Ray's tree
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    os.chdir("/")  # holds no directory of the run (a test's temporary one) open
    watch(pid, started, prefix, names)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
