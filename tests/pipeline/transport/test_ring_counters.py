"""A ring slot's named counters, its heartbeat, and the producer's back-off on a full
ring, on rings in process memory: each counter reads and stores its own header word, a
producer stalled on its episode ring still beats, and a stalled producer sleeps 0.2 ms
doubling up to 2 ms."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from pipeline.transport import ring as R

FIELD_WORDS = {
    "frames": R.FRAMES,
    "steps": R.STEPS,
    "episodes": R.EPISODES,
    "heartbeat_ns": R.HEARTBEAT_NS,
    "weights_version": R.WEIGHTS_VERSION,
    "pid": R.PID,
    "starts": R.STARTS,
    "env_errors": R.ENV_ERRORS,
    "state": R.STATE,
}


def test_slot_counters_name_exactly_their_layout_words():
    """Each named counter reads and stores its own header word and nothing else."""
    layout = R.RingLayout(num_slots=2, capacity=4, episode_cells=4)
    ring = R.TransitionRing.initialise(memoryview(bytearray(layout.total_bytes)), layout)
    try:
        _check_named_counters(ring)
    finally:
        ring.close()


def _check_named_counters(ring):
    slot, other = ring.slots
    counters = slot.counters
    for value, (name, word) in enumerate(FIELD_WORDS.items(), start=101):
        setattr(counters, name, value)
        assert int(slot.header[word]) == value and getattr(counters, name) == value
    assert R.COLLECTOR_PHASES == ("emulate", "preprocess", "infer", "write", "stall")
    for value, phase in enumerate(R.COLLECTOR_PHASES, start=1):
        counters.set_phase_ns(phase, 1000 * value)
        counters.add_phase_ns(phase, value)
        assert int(slot.header[R.PHASE_WORDS[phase]]) == counters.phase_ns(phase) == 1001 * value
    assert counters.phases_ns() == {phase: 1001 * v for v, phase in enumerate(R.COLLECTOR_PHASES, start=1)}
    # Distinct producer words, before the consumer line, apart from the sequence numbers.
    words = [*FIELD_WORDS.values(), *R.PHASE_WORDS.values()]
    assert len(set(words)) == len(words) and max(words) * 8 + 8 <= R.CONSUMER_OFFSET
    assert R.WRITE_SEQ not in words and R.READ_SEQ not in words
    assert not other.header.any() and not slot.episode_header.any()
    # The sequence numbers are read by name and moved by the rings only.
    slot.transitions.commit()
    assert (counters.write_seq, counters.read_seq, counters.pending) == (1, 0, 1)
    with pytest.raises(AttributeError):
        counters.write_seq = 5
    # A snapshot is a private copy.
    copy = counters.snapshot()
    counters.frames += 1
    assert copy.frames == 101 and counters.frames == 102 and copy.phases_ns() == counters.phases_ns()


@contextmanager
def _one_slot_in_memory():
    """A one-slot ring (4 transition cells, 2 episode cells) in process memory: its slot."""
    layout = R.RingLayout(num_slots=1, capacity=4, episode_cells=2)
    ring = R.TransitionRing.initialise(memoryview(bytearray(layout.total_bytes)), layout)
    try:
        yield ring.slots[0]
    finally:
        ring.close()


def test_a_full_episode_ring_beats_the_slot_heartbeat():
    """A producer stalled on its episode ring is alive: its heartbeat is the slot's."""
    with _one_slot_in_memory() as slot:
        for _ in range(2):
            slot.episodes.commit()
        with pytest.raises(R.RingStopped):
            slot.episodes.wait_for_space(lambda: True)
        assert slot.counters.heartbeat_ns > 0
        assert int(slot.episode_header[R.HEARTBEAT_NS]) == 0


class _FakeClock:
    """Stands in for the ring module's ``time``: sleeping advances the clock, and the
    sleep numbered ``free_after`` frees a cell (a consumer reading one record)."""

    def __init__(self, ring: R.SpscRing, free_after: int) -> None:
        self.ring, self.free_after = ring, free_after
        self.now_ns = 1_000_000_000
        self.sleeps: list[float] = []

    def monotonic_ns(self) -> int:
        return self.now_ns

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_ns += round(seconds * 1e9)
        if len(self.sleeps) == self.free_after:
            self.ring.release(1)


def test_a_stalled_producer_backs_off_from_a_fifth_of_a_millisecond_to_two(monkeypatch):
    """On a full ring the producer sleeps 0.2 ms, then twice as long each time it is still
    full, up to 2 ms; it stores its stall time and heartbeat, and asks whether to stop,
    every 10 ms, and returns the whole stall once a cell is free."""
    with _one_slot_in_memory() as slot:
        for _ in range(4):
            slot.transitions.commit()
        clock = _FakeClock(slot.transitions, free_after=12)
        monkeypatch.setattr(R, "time", clock)
        stop_checks: list[int] = []

        def should_stop() -> bool:
            stop_checks.append(clock.now_ns)
            return False

        stalled = slot.transitions.wait_for_space(should_stop)
        # By hand: 0.2, 0.4, 0.8, 1.6 ms, then 2 ms eight times: 3.0 + 16 = 19 ms in all.
        assert [round(s * 1e4) for s in clock.sleeps] == [2, 4, 8, 16] + [20] * 8
        assert stalled == 19_000_000
        # Cumulative sleep 0.2, 0.6, 1.4, 3.0, 5, 7, 9, 11 ms: the first 10 ms are passed at
        # 11 ms, where the stall is stored and the stop asked; the rest at the end.
        assert stop_checks == [1_000_000_000 + 11_000_000]
        assert slot.counters.phase_ns("stall") == 19_000_000
        assert slot.counters.heartbeat_ns == clock.now_ns
        assert slot.transitions.wait_for_space() == 0  # a free cell: no wait at all
