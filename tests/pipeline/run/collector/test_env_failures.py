"""Tests for pipeline.run.collector.env_failures: the log of env failures (a traceback once
per distinct error), the back-off after repeated failures, and the injected faults of the
reliability tests (the collector process around them: test_reliability.py)."""

from __future__ import annotations

import logging

import pytest

from pipeline.run.collector.env_failures import ENV_ERROR_LIMIT, EnvFailures, InjectedFaults


def fail(failures: EnvFailures, text: str, **kwargs: object) -> bool:
    try:
        raise RuntimeError(text)
    except RuntimeError:
        return failures.record(**{"should_stop": lambda: False, "beat": lambda: None, **kwargs})


def test_a_new_error_is_logged_with_its_traceback_and_a_repeat_in_one_line(caplog) -> None:
    failures = EnvFailures(3, logging.getLogger("test.env_failures"))
    with caplog.at_level(logging.ERROR, logger="test.env_failures"):
        assert fail(failures, "emulator broke")
        assert fail(failures, "emulator broke")
        assert fail(failures, "another error")
    first, repeat, other = (record.getMessage() for record in caplog.records)
    assert first.startswith("collector 3: environment raised; rebuilding it:\nTraceback")
    assert repeat == "collector 3: environment raised again (RuntimeError: emulator broke); rebuilding it"
    assert "Traceback" in other and "another error" in other


def test_the_limit_th_failure_in_the_window_backs_off_and_a_stop_ends_the_wait(caplog) -> None:
    failures = EnvFailures(0, logging.getLogger("test.env_failures"))
    for _ in range(ENV_ERROR_LIMIT - 1):
        assert fail(failures, "flapping")  # below the limit: no wait at all
    beats: list[int] = []
    stops = iter([False, False, True])
    with caplog.at_level(logging.ERROR, logger="test.env_failures"):
        assert not fail(failures, "flapping", should_stop=lambda: next(stops), beat=lambda: beats.append(1))
    assert len(beats) == 2  # the heartbeat beat while it waited, until the stop
    assert (
        f"{ENV_ERROR_LIMIT} environment failures in the last 60 s; backing off 5 s" in caplog.records[-1].getMessage()
    )


def test_injected_faults_raise_where_their_test_asks() -> None:
    with pytest.raises(RuntimeError, match="injected crash while starting"):
        InjectedFaults("crash_always")
    once = InjectedFaults("env_error:7")
    once.on_step(6)
    with pytest.raises(RuntimeError, match="at step 7"):
        once.on_step(7)
    once.on_step(7)  # once only
    always = InjectedFaults("env_error_always")
    for step in (0, 1):
        with pytest.raises(RuntimeError, match="every step"):
            always.on_step(step)
    InjectedFaults("").on_step(0)  # no fault: nothing raised
