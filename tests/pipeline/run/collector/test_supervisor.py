"""The supervisor restarting synthetic collectors: crashes, hangs, failure loops, stop."""

from __future__ import annotations

import os
import signal
import time

import pytest

from config import Config
from pipeline.run.collector import supervisor as S
from pipeline.run.collector.args import CollectorArgs
from pipeline.transport import ring as R
from pipeline.transport import weights as W
from pipeline.transport.segments import create_segment, release, segment_name
from tests.pipeline import producers as P

TAG = P.new_tag("super")


class Harness:
    """A ring + weights segment pair and a Supervisor over synthetic targets."""

    def __init__(self, modes: list[str], **kwargs) -> None:
        self.modes = list(modes)
        layout = R.RingLayout(num_slots=len(modes), capacity=16, episode_cells=4)
        self.ring_segment = create_segment(segment_name(TAG, f"ring{id(self)}"), layout.total_bytes)
        self.weights_segment = create_segment(segment_name(TAG, f"weights{id(self)}"), W.block_bytes(4))
        self.ring = R.TransitionRing.initialise(self.ring_segment.buf, layout)
        self.weights = W.WeightsBlock.initialise(self.weights_segment.buf, 4)
        self.supervisor = S.Supervisor(self.ring.slots, self.make_args, target=P.supervised_target, **kwargs)

    def make_args(self, index: int) -> CollectorArgs:
        mode = self.modes[index]
        return CollectorArgs(
            slot=index,
            config=Config(),
            ring_name=self.ring_segment.name,
            weights_name=self.weights_segment.name,
            parent_pid=os.getpid(),
            fault="" if mode == "run" else mode,  # the synthetic target's behaviour
        )

    def counters(self, index: int) -> R.SlotCounters:
        return self.ring.slots[index].counters

    def process(self, index: int):
        return self.supervisor.states[index].process

    def running(self, index: int) -> bool:
        """The current process of ``index`` has registered itself and is heartbeating."""
        process = self.process(index)
        counters = self.counters(index)
        return process is not None and counters.pid == process.pid and counters.state == R.STATE_RUNNING

    def check_until(self, predicate, timeout_s: float, what: str, every_s: float = 0.05) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.supervisor.events}")
            self.supervisor.check()
            time.sleep(every_s)

    def close(self) -> None:
        processes = [s.process for s in self.supervisor.states]
        self.weights.request_stop()
        self.supervisor.stop(timeout_s=5)
        P.kill_all(processes)
        self.supervisor.slots = []  # drop the last views into the ring before closing it
        self.ring.close()
        self.weights.close()
        release(self.ring_segment, unlink=True)
        release(self.weights_segment, unlink=True)


@pytest.fixture
def harness():
    made = []

    def make(modes, **kwargs):
        h = Harness(modes, **kwargs)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_the_synthetic_target_reads_the_real_stop_word():
    assert P.WEIGHTS_STOP_WORD == W.STOP


@pytest.mark.timeout(300)
def test_sigkilled_target_is_restarted_on_its_slot(harness):
    h = harness(["run", "run"], heartbeat_timeout_s=5.0, startup_grace_s=30.0)
    h.supervisor.start_all()
    h.check_until(lambda: h.running(0) and h.running(1), 30, "targets to start")
    victim = h.process(0)
    old_pid = victim.pid
    steps_before = h.counters(0).steps
    os.kill(old_pid, signal.SIGKILL)
    h.check_until(lambda: h.supervisor.restarts >= 1 and h.running(0), 30, "a restart")
    state = h.supervisor.states[0]
    assert victim.exitcode == -signal.SIGKILL
    assert state.restarts == 1 and h.supervisor.restarts == 1
    assert "signal 9" in state.last_reason
    assert any("collector 0" in e for e in h.supervisor.events)
    new = h.process(0)
    assert new.pid != old_pid and new.is_alive()
    assert h.counters(0).pid == new.pid
    assert h.counters(0).starts == 2
    # The untouched slot kept its first process.
    assert h.supervisor.states[1].restarts == 0 and h.counters(1).starts == 1
    # The replacement carries on in the slot (it writes records and heartbeats).
    beat = h.counters(0).heartbeat_ns
    h.check_until(lambda: h.counters(0).heartbeat_ns > beat, 10, "a fresh heartbeat")
    assert h.counters(0).steps >= steps_before
    assert h.supervisor.alive() == 2


@pytest.mark.timeout(300)
def test_stopped_target_is_detected_by_heartbeat_and_replaced(harness):
    # A short heartbeat timeout, but a generous start-up grace: the timeout applies once the
    # target has registered, while spawning it may take seconds on a loaded machine.
    h = harness(["run"], heartbeat_timeout_s=2.0, startup_grace_s=60.0)
    h.supervisor.start_all()
    h.check_until(lambda: h.running(0), 60, "the target to start")
    first = h.process(0)
    # A healthy target is left alone for well over the heartbeat timeout.
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        h.supervisor.check()
        time.sleep(0.05)
    assert h.supervisor.restarts == 0 and h.process(0) is first
    os.kill(first.pid, signal.SIGSTOP)
    try:
        h.check_until(lambda: h.supervisor.restarts >= 1, 30, "the hang to be noticed")
    finally:
        if first.is_alive():
            os.kill(first.pid, signal.SIGCONT)
    state = h.supervisor.states[0]
    assert "heartbeat" in state.last_reason and "hung" in state.last_reason
    first.join(5)
    assert first.exitcode == -signal.SIGKILL  # killed by the supervisor, not by us
    h.check_until(lambda: h.running(0), 60, "the replacement to run")
    replacement = h.process(0)
    assert replacement.pid != first.pid
    assert h.counters(0).pid == replacement.pid
    assert h.counters(0).starts == 2
    assert h.supervisor.restarts == 1


@pytest.mark.timeout(300)
def test_failing_target_is_restarted_with_growing_backoff(harness):
    h = harness(["fail"], heartbeat_timeout_s=5.0, startup_grace_s=30.0)
    state = h.supervisor.states[0]
    h.supervisor.start_all()
    delays = []
    seen = 0
    deadline = time.monotonic() + 40
    while len(delays) < 4:
        assert time.monotonic() < deadline, f"failures seen: {delays}"
        h.supervisor.check()
        if state.restarts > seen:
            seen = state.restarts
            assert state.process is None  # not restarted in the same pass
            assert "exited with code 3" in state.last_reason
            delays.append(round(state.next_start_at - state.recent_failures[-1], 3))
        time.sleep(0.02)
    # The first failures restart at once, then the delay doubles.
    assert delays[:2] == [0.0, 0.0]
    assert delays[2] > 0 and delays[3] > delays[2]
    assert delays[2:] == [1.0, 2.0]
    # During the backoff, however often check() runs, nothing is started.
    starts = h.counters(0).starts
    assert starts == 4
    until = min(state.next_start_at - 0.2, time.monotonic() + 1.0)
    checks = 0
    while time.monotonic() < until:
        h.supervisor.check()
        checks += 1
        time.sleep(0.005)
    assert checks > 10
    assert state.process is None and h.counters(0).starts == starts
    assert state.restarts == 4


@pytest.mark.timeout(300)
def test_stop_ends_every_process(harness):
    h = harness(["run", "run", "ignore_stop"], heartbeat_timeout_s=5.0, startup_grace_s=30.0)
    h.supervisor.start_all()
    h.check_until(lambda: all(h.running(i) for i in range(3)), 30, "targets to start")
    processes = [h.process(i) for i in range(3)]
    assert h.supervisor.alive() == 3
    h.weights.request_stop()  # what the learner does before stop()
    h.supervisor.stop(timeout_s=2.0)
    assert h.supervisor.alive() == 0
    assert all(s.process is None for s in h.supervisor.states)
    for p in processes:
        assert not p.is_alive()
    # The cooperative ones finished cleanly; the one ignoring the flag was killed.
    assert [p.exitcode for p in processes] == [0, 0, -signal.SIGKILL]
    assert [h.counters(i).state for i in range(2)] == [R.STATE_STOPPED] * 2
    # After stop, check() starts nothing.
    h.supervisor.check()
    assert h.supervisor.alive() == 0 and all(s.process is None for s in h.supervisor.states)


@pytest.mark.timeout(600)
def test_a_slot_failing_the_same_way_on_every_start_is_given_up_with_its_cause(harness):
    h = harness(["fail"], heartbeat_timeout_s=5.0, startup_grace_s=30.0)
    state = h.supervisor.states[0]
    h.supervisor.start_all()
    h.check_until(lambda: h.supervisor.fatal, 90, "the crash loop to be given up")
    assert h.supervisor.fatal.startswith(f"collector 0 exited with code 3 on each of its last {S.CRASH_LOOP_LIMIT}")
    assert h.counters(0).starts == S.CRASH_LOOP_LIMIT
    # Never started again, however often check() runs.
    for _ in range(20):
        h.supervisor.check()
        time.sleep(0.01)
    assert state.process is None and h.counters(0).starts == S.CRASH_LOOP_LIMIT
