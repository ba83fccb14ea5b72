"""How children start and reply: real children of the fork server that reply, hang, raise
or crash, see what the server imported, and see the process that started them die; and
the CPU time of a child's own children counted in this process tree's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pipeline.common import child as child_module
from pipeline.common.child import (
    PRELOAD,
    Child,
    ChildError,
    ChildExited,
    ChildTimeout,
    ParentWatch,
    process_state,
    run_in_child,
)
from pipeline.run.machine.load import tree_cpu_s
from tests.conftest import wait_until
from tests.pipeline.common import children

REPLY_TIMEOUT_S = 300.0  # spawning a child on a loaded 2-core box; a safety net, not a budget


def test_a_child_that_replies_is_joined():
    assert run_in_child(children.reply, ({"frames": 3},), name="t-reply", timeout_s=REPLY_TIMEOUT_S) == {"frames": 3}
    child = Child(children.reply, (None,), name="t-reply-none")
    try:
        assert child.receive(REPLY_TIMEOUT_S) is None  # None is a reply like any other
    finally:
        child.close()
    assert child.exitcode == 0


def test_a_child_that_hangs_times_out_and_is_killed():
    child = Child(children.hang, (600.0,), name="t-hang")
    try:
        with pytest.raises(ChildTimeout):
            child.receive(1.0)
    finally:
        child.close(0.1)
    assert not child.process.is_alive()
    assert child.exitcode == -signal.SIGKILL
    with pytest.raises(ChildTimeout):  # the one-reply helper: it raises, and kills the child
        run_in_child(children.hang, (600.0,), name="t-hang-2", timeout_s=1.0, join_s=0.1)


def test_a_child_that_raises_reports_its_error():
    with pytest.raises(ChildError) as info:
        run_in_child(children.fail, ("boom",), name="t-fail", timeout_s=REPLY_TIMEOUT_S)
    error = info.value
    assert error.message == "boom" and error.last_line == "ValueError: boom"
    assert "children.py" in error.traceback and "raise ValueError(message)" in error.traceback
    assert error.raised(ValueError) and error.raised(Exception) and not error.raised(KeyError)
    assert str(error) == "t-fail: ValueError: boom"


def test_a_child_that_dies_without_a_reply_is_reported_with_its_exit_code():
    with pytest.raises(ChildExited) as info:
        run_in_child(children.exit_without_reply, (3,), name="t-exit", timeout_s=REPLY_TIMEOUT_S)
    assert info.value.exitcode == 3


def test_a_worker_answers_request_after_request_until_told_to_stop():
    with Child(children.doubler, name="t-doubler") as child:
        assert child.receive(REPLY_TIMEOUT_S) == "ready"
        for number in (1, 5, 21):
            child.send(number)
            assert child.receive(REPLY_TIMEOUT_S) == 2 * number
        child.send(None)
        with pytest.raises(ChildExited):
            child.receive(REPLY_TIMEOUT_S)
    assert child.exitcode == 0


def test_a_worker_that_fails_on_a_request_reports_it_to_the_next_receive():
    with Child(children.doubler, name="t-doubler-fails") as child:
        assert child.receive(REPLY_TIMEOUT_S) == "ready"
        child.send({"not": "a number"})
        with pytest.raises(ChildError) as info:
            child.receive(REPLY_TIMEOUT_S)
        assert info.value.raised(TypeError)


def test_a_child_starts_with_what_the_fork_server_imported():
    assert "torch" in PRELOAD  # the import a child must not pay again
    assert run_in_child(children.preloaded, (PRELOAD,), name="t-preloaded", timeout_s=REPLY_TIMEOUT_S) == list(PRELOAD)


def test_a_process_state_is_read_from_proc():
    assert process_state(os.getpid()) == "R"  # this process, running the test
    with subprocess.Popen([sys.executable, "-c", "pass"]) as exited:
        wait_until(lambda: process_state(exited.pid) == "Z", 60, "the child to exit")  # not reaped yet
    assert process_state(exited.pid) is None  # reaped: no such process


def test_a_parent_watch_sees_a_live_parent_and_a_gone_one(monkeypatch):
    monkeypatch.setattr(child_module, "PARENT_CHECK_S", 0.0)
    assert not ParentWatch(os.getpid()).gone()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        watch = ParentWatch(sleeper.pid)
        assert not watch.gone()
        sleeper.kill()
        wait_until(watch.gone, 60, "the watch to see the killed process")  # a zombie first
        sleeper.wait()
        assert ParentWatch(sleeper.pid).gone()  # and gone once reaped


def test_a_child_sees_the_process_that_started_it_die(tmp_path: Path):
    """The stand-in learner is SIGKILLed while its child lives on in the fork server's
    care: the child's ParentWatch says so (collectors and the evaluator stop on it)."""
    marker = str(tmp_path / "gone")
    code = "; ".join(
        [
            f"import sys; sys.path[:0] = {sys.path!r}",
            "from tests.pipeline.common import children",
            f"children.start_watcher({marker!r})",
        ]
    )
    learner = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_until(lambda: os.path.exists(marker + ".ready"), REPLY_TIMEOUT_S, "the watcher to start", proc=learner)
        watcher = psutil.Process(int(Path(marker + ".ready").read_text()))
        assert watcher.parent().parent().pid == learner.pid  # learner -> fork server -> watcher
        learner.kill()
        learner.wait()
        wait_until(lambda: os.path.exists(marker), 60, "the watcher to see its parent gone")
    finally:
        if learner.poll() is None:
            learner.kill()
    watcher.wait(60)  # it ends once it has seen it


def test_the_cpu_of_a_childs_own_children_counts_in_this_process_tree():
    """A grandchild is a child of its parent's fork server: its CPU time reaches this tree
    only once that parent waits for the server at its end. Before it did, a bench Trainer's
    collectors read as other processes' load on a quiet machine."""
    spin_s = 1.0
    # This process's own fork server started first: its start (importing torch) is not in the window.
    assert run_in_child(children.reply, (0,), name="t-first", timeout_s=REPLY_TIMEOUT_S) == 0
    before = tree_cpu_s()
    parent = Child(children.parent_of_a_spinner, (spin_s,), name="t-parent", daemon=False)  # it starts a child
    try:
        spun, parent_own_s = parent.receive(REPLY_TIMEOUT_S)
    finally:
        parent.close()
    assert spun == spin_s and parent.exitcode == 0
    # The parent's own CPU, and the grandchild's on top (without it: the parent's alone).
    assert tree_cpu_s() - before >= parent_own_s + spin_s
