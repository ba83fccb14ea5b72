"""Back-pressure is never a hang: a real collector held back by a full ring stays alive and
visibly stalled, at its CPU priority below the learner's."""

from __future__ import annotations

import os
import time

from config import Config
from pipeline.learning.policy import network_of
from pipeline.run.collector import supervisor as S
from pipeline.transport import ring as R
from tests.pipeline import producers as P
from tests.pipeline.run.collector.one_collector import one_collector

TAG = P.new_tag("backpressure")
HEARTBEAT_TIMEOUT_S = 2.0


def test_a_collector_stalled_on_another_envs_ring_is_not_restarted_and_its_stall_shows(tmp_path):
    cfg = Config(env_id="Catch-v0", reward_scale=1.0, envs_per_collector=2, ring_capacity=16, seed=3)
    net = network_of(cfg, 3)
    with one_collector(
        cfg,
        net,
        tag=TAG,
        log_path=str(tmp_path / "collector.log"),
        epsilon=1.0,
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        episode_cells=8,
    ) as (ring, _, supervisor):
        check_the_stall_shows(cfg, ring, supervisor)


def check_the_stall_shows(cfg: Config, ring: R.TransitionRing, supervisor: S.Supervisor) -> None:
    home, other = ring.slots

    def drain_home() -> None:  # the home slot keeps flowing; only the other env's ring is full
        count, _ = home.transitions.peek(None)
        home.transitions.release(count)
        home.episodes.release(home.episodes.peek(None)[0])

    supervisor.start_all()
    process = supervisor.states[0].process
    deadline = time.monotonic() + 180  # safety net: importing torch on a loaded machine
    while not (home.counters.state == R.STATE_RUNNING and other.transitions.pending() == cfg.ring_capacity):
        assert time.monotonic() < deadline, "the collector never filled its second ring"
        drain_home()
        supervisor.check()
        time.sleep(0.05)
    stall_at_full = home.counters.phase_ns("stall")
    held = time.monotonic()
    readings = []
    while time.monotonic() - held < 3 * HEARTBEAT_TIMEOUT_S:
        drain_home()
        supervisor.check()
        readings.append(home.counters.phase_ns("stall"))
        time.sleep(0.1)
    held_s = time.monotonic() - held

    assert supervisor.restarts == 0, supervisor.events
    assert supervisor.states[0].process is process and process.is_alive()
    # The collector yields its core to the learner: collector_niceness below this process.
    assert cfg.collector_niceness == 15
    assert os.getpriority(os.PRIO_PROCESS, process.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 15)
    assert other.transitions.pending() == cfg.ring_capacity  # still held back the whole time
    # The stall is counted while it lasts: it grew through the wait, not only at its end.
    assert readings[-1] - stall_at_full >= 0.8 * held_s * 1e9
    assert readings[len(readings) // 2] - stall_at_full >= 0.3 * held_s * 1e9
    # The stalled env's own slot takes no stall time: the collector's home slot has it.
    assert other.counters.phase_ns("stall") == 0
