"""Synthetic producers for the shared-memory pipeline tests.

Every function here is a ``spawn`` target (or a helper shared by the targets and the
tests), so this module must stay importable without torch, an emulator, or a model:
children start in a fraction of a second.

Record content is a pure function of ``(producer, seq)``: the frame comes from a
per-producer pool of random frames (``seq % POOL``) with the sequence number stamped in
its first and last 8 bytes and the producer id in byte 8; reward, action and flags are
derived from ``seq`` too. A consumer can therefore check every byte of every record it
receives (:func:`check_records`), and a record mixing two writes is detected.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from contextlib import contextmanager

import numpy as np

from pipeline.common.child import ParentWatch
from pipeline.transport import ring as R
from pipeline.transport.records import RECORD_DTYPE
from pipeline.transport.segments import attach_segment, create_segment, release, segment_name

POOL = 61  # frames per producer pool (prime, so neighbouring seqs never share a frame)
FRAME_BYTES = 84 * 84
HALF_ROWS = 42
# pipeline.transport.weights imports torch; the supervised targets only need the stop word, so the
# index is repeated here (test_supervisor checks it still matches pipeline.transport.weights.STOP).
WEIGHTS_STOP_WORD = 5


# ------------------------------------------------------------------------ test helpers
def new_tag(prefix: str) -> str:
    """A unique, underscore-free run tag for one test module (segment names parse it)."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@contextmanager
def ring_segment(tag: str, layout: R.RingLayout, kind: str = "ring"):
    """Create and initialise a ring block; yield (segment, ring); always unlink it."""
    segment = create_segment(segment_name(tag, kind), layout.total_bytes)
    ring = None
    try:
        ring = R.TransitionRing.initialise(segment.buf, layout)
        yield segment, ring
    finally:
        if ring is not None:
            ring.close()
        release(segment, unlink=True)


@contextmanager
def attached_ring(ring_name: str):
    """Attach to a ring block (as a collector does); close it on the way out. Callers keep
    their views in a function of their own, so none outlives the mapping."""
    segment = attach_segment(ring_name)
    ring = None
    try:
        ring = R.TransitionRing.from_buffer(segment.buf)
        yield ring
    finally:
        if ring is not None:
            ring.close()
        release(segment, unlink=False)


def kill_all(processes) -> None:
    """Best-effort cleanup of test children (SIGKILL works on SIGSTOPped ones too)."""
    for process in processes:
        if process is not None and process.is_alive():
            process.kill()
    for process in processes:
        if process is not None:
            process.join(5)


# ------------------------------------------------------------------------ record content
_pools: dict[int, np.ndarray] = {}


def frame_pool(producer: int) -> np.ndarray:
    pool = _pools.get(producer)
    if pool is None:
        pool = np.random.default_rng([20240611, producer]).integers(0, 256, (POOL, FRAME_BYTES), np.uint8)
        _pools[producer] = pool
    return pool


def expected_records(producer: int, seqs: np.ndarray) -> np.ndarray:
    """The records producer ``producer`` writes with sequence numbers ``seqs``."""
    seqs = np.asarray(seqs, np.int64)
    n = len(seqs)
    frames = frame_pool(producer)[seqs % POOL]  # fancy indexing: a fresh copy
    stamp = seqs.astype("<u8").view(np.uint8).reshape(n, 8)
    frames[:, :8] = stamp
    frames[:, 8] = producer
    frames[:, -8:] = stamp
    recs = np.zeros(n, RECORD_DTYPE)
    recs["frame"] = frames.reshape(n, 84, 84)
    recs["reward"] = (seqs % 1000).astype(np.float32) * np.float32(0.25) - np.float32(producer)
    recs["action"] = (seqs * 7 + producer) % 256
    recs["flags"] = seqs % 16
    return recs


def record_seqs(recs: np.ndarray) -> np.ndarray:
    """The sequence numbers stamped in the first 8 bytes of each record's frame."""
    head = np.ascontiguousarray(recs["frame"].reshape(len(recs), FRAME_BYTES)[:, :8])
    return head.view("<u8").ravel().astype(np.int64)


def check_records(producer: int, first_seq: int, recs: np.ndarray) -> None:
    """Assert ``recs`` are exactly producer's records ``first_seq, first_seq + 1, ...``."""
    n = len(recs)
    seqs = record_seqs(recs)
    expected_seqs = np.arange(first_seq, first_seq + n)
    if not np.array_equal(seqs, expected_seqs):
        bad = int(np.flatnonzero(seqs != expected_seqs)[0])
        raise AssertionError(
            f"producer {producer}: record {first_seq + bad} carries seq {seqs[bad]} (gap, duplicate or reordering)"
        )
    exp = expected_records(producer, expected_seqs)
    for name in ("frame", "reward", "action", "flags"):
        if not np.array_equal(recs[name], exp[name]):
            bad = int(np.flatnonzero((recs[name] != exp[name]).reshape(n, -1).any(axis=1))[0])
            raise AssertionError(f"producer {producer}: record {first_seq + bad} has a corrupt {name!r}")


# ------------------------------------------------------------------------ ring producers
def _busy(iterations: int) -> int:
    acc = 0
    for i in range(iterations):
        acc += i * i
    return acc


def ring_producer(ring_name: str, slot: int, producer: int, total: int, mode: str = "fields", work: int = 0) -> None:
    """Write records ``write_seq .. total - 1`` into ``slot`` the way a collector does.

    Continues from the slot's ``write_seq``, so a producer restarted after SIGKILL carries
    on the numbering. ``mode``:

    * ``"fields"``: wait_for_space, fill every field of next_cell(), commit (collector-like);
    * ``"halves"``: the first half of the frame, ``work`` busy iterations, the second half
      and the other fields, commit (a kill often lands between the halves);
    * ``"content_then_commit"``: the whole record, ``work`` busy iterations, commit.
    """
    with attached_ring(ring_name) as ring:
        _produce(ring.slots[slot], producer, total, mode, work)


def _produce(slot_view: R.Slot, producer: int, total: int, mode: str, work: int) -> None:
    counters = slot_view.counters
    transitions = slot_view.transitions
    counters.pid = os.getpid()
    counters.starts += 1
    seq = counters.write_seq
    chunk = 256
    while seq < total:
        block = expected_records(producer, np.arange(seq, min(total, seq + chunk)))
        for rec in block:
            transitions.wait_for_space()
            cell = transitions.next_cell()
            if mode == "fields":
                cell["frame"] = rec["frame"]
                cell["action"] = rec["action"]
                cell["reward"] = rec["reward"]
                cell["flags"] = rec["flags"]
            elif mode == "halves":
                frame = cell["frame"]
                frame[:HALF_ROWS] = rec["frame"][:HALF_ROWS]
                _busy(work)
                frame[HALF_ROWS:] = rec["frame"][HALF_ROWS:]
                cell["action"] = rec["action"]
                cell["reward"] = rec["reward"]
                cell["flags"] = rec["flags"]
            elif mode == "content_then_commit":
                cell["frame"] = rec["frame"]
                cell["action"] = rec["action"]
                cell["reward"] = rec["reward"]
                cell["flags"] = rec["flags"]
                _busy(work)
            else:
                raise ValueError(mode)
            transitions.commit()
            counters.beat()
            seq += 1


def episode_producer(ring_name: str, slot: int, producer: int, total: int, episode_every: int, bad_every: int) -> None:
    """Records like :func:`ring_producer` plus an episode summary every ``episode_every``
    records; every ``bad_every``-th summary is preceded by one malformed episode cell."""
    with attached_ring(ring_name) as ring:
        _produce_with_episodes(ring.slots[slot], producer, total, episode_every, bad_every)


def _produce_with_episodes(slot_view: R.Slot, producer: int, total: int, episode_every: int, bad_every: int) -> None:
    from pipeline.transport import episodes

    transitions = slot_view.transitions
    block = expected_records(producer, np.arange(total))
    sent = 0
    for seq in range(total):
        transitions.wait_for_space()
        cell = transitions.next_cell()
        cell["frame"] = block[seq]["frame"]
        cell["action"] = block[seq]["action"]
        cell["reward"] = block[seq]["reward"]
        cell["flags"] = block[seq]["flags"]
        transitions.commit()
        if (seq + 1) % episode_every == 0:
            if bad_every and sent % bad_every == 0:
                write_bad_episode_cell(slot_view.episodes, sent)
            episodes.send(slot_view.episodes, make_summary(producer, sent))
            sent += 1


def make_summary(collector: int, index: int):
    from pipeline.transport.episodes import EpisodeSummary

    return EpisodeSummary(
        ret=index * 1.5 - 3.0,
        length=100 + index,
        x_pos=40 * index,
        flag_get=index % 3 == 0,
        world=1 + index % 8,
        stage=1 + index % 4,
        collector=collector,
        weights_version=index,
        epsilon=1.0 / (1 + index),
        truncated=index % 2 == 1,
    )


def write_bad_episode_cell(ring: R.SpscRing, index: int) -> None:
    """One malformed episode cell, of a kind chosen by ``index`` (always counted as bad)."""
    import msgpack

    kinds = [
        (0, b""),  # zero length
        (300, b"\x81"),  # length beyond the cell
        (5, b"\xc1\xc1\xc1\xc1\xc1"),  # 0xc1 is never valid msgpack
        (None, msgpack.packb({"ret": 1.0}, use_bin_type=True)),  # wrong fields
        (None, msgpack.packb([1, 2, 3], use_bin_type=True)),  # not a map
    ]
    length, data = kinds[index % len(kinds)]
    ring.wait_for_space()
    cell = ring.next_cell()
    cell["data"][: len(data)] = np.frombuffer(data, np.uint8)
    cell["length"] = len(data) if length is None else length
    ring.commit()


# ------------------------------------------------------------------------ weights
def weights_subscriber(weights_name: str, reads: int, results) -> None:
    """Read the weights block ``reads`` times; check every copy is uniform and equals its
    version; report counts through the ``results`` queue (off the hot path).

    Every other read goes through ``read(out, max_attempts=1)`` in a loop of our own, so
    the copies the block rejected (a publish overlapped them) can be counted.
    """
    from pipeline.transport.weights import WeightsBlock

    segment = attach_segment(weights_name)
    block = WeightsBlock(segment.buf)
    out = np.empty(block.num_floats, np.float32)
    bad = zeros = backwards = retries = 0
    versions = set()
    last = 0
    first_bad = None
    done = 0
    try:
        while done < reads:
            if done % 2:
                version = block.read(out)
            else:
                while True:
                    try:
                        version = block.read(out, max_attempts=1)
                        break
                    except RuntimeError:
                        retries += 1
            if version == 0:
                zeros += 1
                if zeros > 200_000:
                    break
                continue
            done += 1
            if version < last:
                backwards += 1
            last = version
            versions.add(version)
            if not (out[0] == version and out[-1] == version and (out == np.float32(version)).all()):
                bad += 1
                if first_bad is None:
                    first_bad = (version, float(out.min()), float(out.max()))
    finally:
        block.close()
        release(segment, unlink=False)
    results.put(
        {
            "pid": os.getpid(),
            "reads": done,
            "bad": bad,
            "first_bad": first_bad,
            "distinct": len(versions),
            "backwards": backwards,
            "last": last,
            "rejected_copies": retries,
        }
    )


# ------------------------------------------------------------------------ shm
def create_segment_and_die(tag: str, size: int) -> None:
    """Create a segment named after this process, hide it from the resource tracker (as if
    this process were a learner that never got to clean up) and die by SIGKILL."""
    from multiprocessing import resource_tracker

    segment = create_segment(segment_name(tag, "ring"), size)
    segment.buf[:4] = b"dead"
    resource_tracker.unregister(segment._name, "shared_memory")
    segment.close()
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def noop() -> None:
    pass


# ------------------------------------------------------------------------ supervised targets
def supervised_target(args) -> None:
    """A Supervisor target shaped like collector_main: attaches the ring and weights
    segments, writes PID / STARTS / STATE / heartbeats into its slot's counters.

    ``args.fault`` picks its behaviour: ``""`` heartbeats (and writes a record now and then)
    until the weights stop word is set or the parent is gone; ``"fail"`` registers its
    start and exits with code 3 at once; ``"ignore_stop"`` keeps heartbeating forever.
    """
    mode = args.fault or "run"
    parent = ParentWatch(args.parent_pid)
    weights_segment = attach_segment(args.weights_name)
    try:
        with attached_ring(args.ring_name) as ring:
            exit_code = _supervised(ring.slots[args.slot], weights_segment, args.slot, parent, mode)
    finally:
        release(weights_segment, unlink=False)
    if exit_code:
        sys.exit(exit_code)


def _supervised(slot_view: R.Slot, weights_segment, slot: int, parent: ParentWatch, mode: str) -> int:
    stop_word = np.frombuffer(weights_segment.buf, np.uint64, 8, 0)
    counters = slot_view.counters
    counters.pid = os.getpid()
    counters.starts += 1
    counters.state = R.STATE_STARTING
    counters.beat()
    if mode == "fail":
        counters.state = R.STATE_FAILED
        return 3
    counters.state = R.STATE_RUNNING
    transitions = slot_view.transitions
    ticks = 0
    while True:
        counters.beat()
        if parent.gone():
            break
        if mode != "ignore_stop" and stop_word[WEIGHTS_STOP_WORD]:
            break
        ticks += 1
        if ticks % 5 == 0 and transitions.pending() < transitions.capacity:
            cell = transitions.next_cell()
            cell["frame"][0, 0] = counters.write_seq % 256
            cell["action"] = slot
            transitions.commit()
            counters.steps += 1
        time.sleep(0.01)
    counters.state = R.STATE_STOPPED
    return 0
