"""Stopping the learning bench: while a seed trains (a terminal's Ctrl-C, or a SIGTERM to
the bench alone), and while it evaluates marks, by a signal sent to it alone.

While a seed trains, the run stops as on its own Ctrl-C and saves, and the bench ends
with 130. While it evaluates marks, a terminal's Ctrl-C reaches the bench and its mark
workers together (one process group).
A ``kill`` (SIGTERM, or SIGINT) reaches the bench alone: it must stop the workers, which
would otherwise play their marks on for minutes, without it (SIGTERM used to end the
bench at once and leave them running).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.bench.learning_curves import EVAL_CACHE
from pipeline.bench.learning_curves import mark_workers as workers_for
from pipeline.bench.learning_runs import EXIT_INTERRUPTED, run_frames
from pipeline.transport.segments import project_segments, run_tag
from tests.conftest import wait_until
from tests.pipeline.bench.test_learning import ROOT, fake_run
from tests.pipeline.run.trainer.test_trainer import training_started


def ignore_sigint() -> None:
    """As a shell starts a background job (``command &``): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def default_sigint() -> None:
    """As a terminal starts a command: SIGINT at its default, so Python handles it, even
    where the suite itself runs as a background job (whose children inherit it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_bench(argv: list[str], *, sigint: str = "default") -> subprocess.Popen[str]:
    """``main.py bench --only learning ARGV`` in a session (process group) of its own, with
    SIGINT at its default (a terminal's command) or ignored (a background job)."""
    return subprocess.Popen(
        [sys.executable, "main.py", "bench", "--only", "learning", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint if sigint == "default" else ignore_sigint,
    )


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


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["ctrl-c", "ctrl-c-sigint-ignored", "sigterm-to-the-bench-alone"])
def test_ctrl_c_lets_the_training_run_stop_and_save_and_ends_the_bench(tmp_path: Path, stop: str) -> None:
    """A terminal's Ctrl-C (SIGINT to the whole process group) while a seed trains: the run
    stops as on its own Ctrl-C, with its final checkpoint and replay, and the bench ends
    with 130 and one line saying so, evaluating nothing. (It used subprocess.call, which
    killed the run on the bench's KeyboardInterrupt: no final checkpoint, no replay; and
    a bench that ignored SIGINT, started in the background, went on to evaluate the
    marks and train the next seed.) A SIGTERM to a background bench alone (``kill``)
    does the same: the bench passes it on to the run (it used to die at once, and the
    run trained on without it)."""
    argv = ["--name", "tiny", "--out", str(tmp_path), "--frames", "1000000", "--mark-frames", "500"]
    argv += ["--", "--preset", "tiny"]
    bench_proc = start_bench(argv, sigint="default" if stop == "ctrl-c" else "ignored")
    run = tmp_path / "tiny-s0"
    try:
        wait_until(lambda: training_started(run), 600, "training to start", proc=bench_proc)
        if stop == "sigterm-to-the-bench-alone":
            os.kill(bench_proc.pid, signal.SIGTERM)
        else:
            os.killpg(bench_proc.pid, signal.SIGINT)
        _, err = bench_proc.communicate(timeout=300)
    finally:
        if bench_proc.poll() is None:
            os.killpg(bench_proc.pid, signal.SIGKILL)
            bench_proc.wait()
    assert bench_proc.returncode == EXIT_INTERRUPTED, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    log = (tmp_path / "tiny-s0.out").read_text()
    stopped = re.findall(r"INFO stopped frames (\d+)", log)
    assert stopped, log[-3000:]
    assert run_frames(run) == int(stopped[-1])  # the final checkpoint, at the frames it stopped at
    assert (run / "checkpoints" / "replay.npz").exists()
    assert err.strip().splitlines()[-1] == (
        f"learning bench: stopped; {run} saved at {int(stopped[-1]):,} frames, and the same command resumes it "
        "(marks are evaluated once training is done)"
    )
    assert not (tmp_path / "tiny.json").exists()  # nothing evaluated
    assert not project_segments(run_tag(run))
