"""Stopping the learning bench while it evaluates marks, by a signal sent to it alone.

A terminal's Ctrl-C reaches the bench and its mark workers together (one process group).
A ``kill`` (SIGTERM, or SIGINT) reaches the bench alone: it must stop the workers, which
would otherwise play their marks on for minutes, without it (SIGTERM used to end the
bench at once and leave them running).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pipeline.bench.learning_curves import EVAL_CACHE
from pipeline.bench.learning_curves import mark_workers as workers_for
from pipeline.bench.learning_runs import EXIT_INTERRUPTED
from tests.conftest import wait_until
from tests.pipeline.bench.test_learning import fake_run, start_bench


def group_members(pgid: int) -> dict[int, int]:
    """pid -> parent pid of every live process in process group ``pgid``."""
    members = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces; the last ")" ends it.
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        if fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            members[int(entry.name)] = int(fields[1])
    return members


def mark_workers(bench_pid: int) -> list[int]:
    """The bench's grandchildren in its group: the pool's workers, forked by the fork
    server (the bench's own children are that server and the resource tracker)."""
    members = group_members(bench_pid)
    children = {pid for pid, parent in members.items() if parent == bench_pid}
    return [pid for pid, parent in members.items() if parent in children]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_bench_alone_stops_its_mark_workers_and_leaves_no_process(tmp_path: Path, sig) -> None:
    fake_run(tmp_path / "v-s0", {500_000: None, 1_000_000: None})
    # Far more episodes than any machine plays before the signal: the marks are still
    # being played when it comes, and none is finished (cached).
    argv = ["--out", str(tmp_path), "--name", "v", "--seeds", "0", "--frames", "1000000"]
    argv += ["--episodes", "100000", "--max-steps", "60", "--no-train"]
    # SIGINT at its default, even where this test runs as a background job (whose children
    # inherit SIGINT ignored, and would not see the kill -INT).
    bench = start_bench(argv)
    try:
        # Two marks: a worker each, or one on a one-core box (under taskset -c 0).
        workers = workers_for(2)
        wait_until(lambda: len(mark_workers(bench.pid)) == workers, 600, "the mark workers to start", proc=bench)
        time.sleep(1.0)  # well into their first episodes
        os.kill(bench.pid, sig)
        _, err = bench.communicate(timeout=120)  # a safety net: a mark alone takes far longer
        wait_until(lambda: not group_members(bench.pid), 60, "every process of the bench to end")
    finally:
        if bench.poll() is None or group_members(bench.pid):
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    assert bench.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(f"learning bench: stopped while evaluating the marks of {tmp_path / 'v-s0'}")
    )
    assert not (tmp_path / "v-s0" / EVAL_CACHE).exists()  # no mark finished, none half-kept
    assert not (tmp_path / "v.json").exists()
