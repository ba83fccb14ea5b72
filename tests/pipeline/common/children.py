"""Child-process targets for the tests of :mod:`pipeline.common.child`.

Module-level functions in an importable module: a child process imports this module by
name to find its target. Each runs as ``target(conn, *args)``. Nothing heavy is
imported here (torch least of all: :func:`preloaded` reports what the fork server
imported), so children start in a fraction of a second.
"""

from __future__ import annotations

import os
import sys
import time
from multiprocessing.connection import Connection
from typing import Any


def reply(conn: Connection, value: Any) -> None:
    """Answer once with ``value``."""
    conn.send(value)


def hang(conn: Connection, seconds: float) -> None:
    """Never answer (within the test)."""
    time.sleep(seconds)


def fail(conn: Connection, message: str) -> None:
    """Raise before answering: the helper reports the error."""
    raise ValueError(message)


def exit_without_reply(conn: Connection, code: int) -> None:
    """End the process at once, as a crash would: no reply, no error report."""
    os._exit(code)


def doubler(conn: Connection) -> None:
    """Answer ``ready``, then twice every request, until ``None``; a request that cannot be
    doubled (a dict) raises, and the error reaches the parent's next receive."""
    conn.send("ready")
    while (number := conn.recv()) is not None:
        conn.send(2 * number)


def preloaded(conn: Connection, names: tuple[str, ...]) -> None:
    """Answer which of ``names`` this process has imported without importing them itself."""
    conn.send([name for name in names if name in sys.modules])


def watch_parent(conn: Connection, parent_pid: int, marker: str) -> None:
    """Answer whether ``parent_pid`` is gone (not yet), then wait until it is (ParentWatch)
    and write ``marker``."""
    from pipeline.common.child import ParentWatch

    parent = ParentWatch(parent_pid)
    conn.send(parent.gone())  # False: its parent started it and lives
    while not parent.gone():
        time.sleep(0.02)
    with open(marker, "w") as out:
        out.write("gone")


def start_watcher(marker: str) -> None:
    """In a process of its own (the test's stand-in for a learner): start a
    :func:`watch_parent` child, wait for its first answer, write ``marker.ready``, and sleep
    until killed."""
    from pipeline.common.child import Child

    child = Child(watch_parent, (os.getpid(), marker), name="watcher", daemon=False)
    assert child.receive(300.0) is False
    with open(marker + ".ready", "w") as out:
        out.write(str(child.process.pid))
    time.sleep(600)


def spin_cpu(conn: Connection, seconds: float) -> None:
    """Keep a core busy for ``seconds`` of this process's CPU time, then answer."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    conn.send(seconds)


def parent_of_a_spinner(conn: Connection, seconds: float) -> None:
    """Start a child of its own that spins ``seconds`` of CPU (as a Trainer starts its
    collectors), wait for it, answer with the spinner's answer and this process's own CPU
    seconds so far."""
    from pipeline.common.child import Child

    spinner = Child(spin_cpu, (seconds,), name="t-spinner")
    try:
        spun = spinner.receive(300.0)
    finally:
        spinner.close()
    conn.send((spun, time.process_time()))
