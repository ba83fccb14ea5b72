"""Spawn targets for the tests of :mod:`pipeline.common.child`.

Module-level functions in an importable module, as spawn needs: a child process
imports this module by name to find its target. Each runs as ``target(conn, *args)``.
Nothing heavy is imported here, so children start in a fraction of a second.
"""

from __future__ import annotations

import os
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
