"""The spawn-and-reply helper: real spawned children that reply, hang, raise or crash."""

from __future__ import annotations

import signal

import pytest

from pipeline.common.child import Child, ChildError, ChildExited, ChildTimeout, run_in_child
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
