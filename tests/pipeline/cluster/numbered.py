"""A synthetic collector for the cluster tests: numbered records instead of an emulator.

:func:`numbered_collector` is shaped like ``collector_main`` (a Supervisor target taking
``CollectorArgs``): in each of its slots it writes records ``0 .. total - 1`` (``total`` is
the config's ``total_frames``) whose content is :func:`tests.pipeline.producers.expected_records`
of a producer id drawn from the ring's segment tag and the slot, so a record that reached
the wrong stream, twice, out of order or torn is caught. Then it heartbeats until asked to
stop. Importable without torch: a spawned child starts in a fraction of a second.
"""

from __future__ import annotations

import os
import signal
import time
import zlib

import numpy as np

from pipeline.common.child import ParentWatch
from pipeline.transport import ring as R
from pipeline.transport.segments import attach_segment, release
from tests.pipeline import producers as P


def producer_id(ring_tag: str, slot: int) -> int:
    """The producer id of ``slot`` of the ring whose segment tag is ``ring_tag`` (< 251)."""
    return zlib.crc32(f"{ring_tag}:{slot}".encode()) % 251


def ring_tag(ring_name: str) -> str:
    """The tag part of a segment name (``mario_<tag>_<pid>_<kind>``)."""
    return ring_name.split("_")[1]


def numbered_collector(args) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = ParentWatch(args.parent_pid)
    weights_segment = attach_segment(args.weights_name)
    try:
        with P.attached_ring(args.ring_name) as ring:
            _write(ring, np.frombuffer(weights_segment.buf, np.uint64, 8, 0), args, parent)
    finally:
        release(weights_segment, unlink=False)


def _write(ring: R.TransitionRing, words: np.ndarray, args, parent: ParentWatch) -> None:
    slots = [ring.slots[i] for i in args.slots]
    home = slots[0].counters
    for slot in slots:
        slot.counters.starts += 1
    home.pid = os.getpid()
    home.state = R.STATE_RUNNING
    total = args.config.total_frames
    tag = ring_tag(args.ring_name)
    producers = [producer_id(tag, i) for i in args.slots]
    while not words[P.WEIGHTS_STOP_WORD] and not parent.gone():
        home.beat()
        wrote = False
        for slot, producer in zip(slots, producers):
            transitions = slot.transitions
            seq = slot.counters.write_seq
            if seq >= total or transitions.pending() >= transitions.capacity:
                continue
            cell = transitions.next_cell()
            record = P.expected_records(producer, np.array([seq]))[0]
            for name in ("frame", "reward", "action", "flags"):
                cell[name] = record[name]
            transitions.commit()
            slot.counters.frames += 1
            slot.counters.steps += 1
            wrote = True
        if not wrote:
            time.sleep(0.002)
    home.state = R.STATE_STOPPED
