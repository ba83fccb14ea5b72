"""Tests of pipeline.learning.replay.ReplayMemory against a brute-force pure-Python reference."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.learning.replay import ReplayMemory
from pipeline.transport.records import (
    FLAG_FINAL,
    FLAG_START,
    FLAG_TERMINATED,
    FLAG_TRUNCATED,
    RECORD_DTYPE,
)

# ---------------------------------------------------------------------------- helpers


def encode_frames(ids: np.ndarray) -> np.ndarray:
    """Frames whose pixels identify them: bytes 0..2 of row 0 hold the id, the rest id & 255."""
    ids = np.asarray(ids, dtype=np.int64)
    frames = np.empty((len(ids), 84, 84), dtype=np.uint8)
    frames[:] = (ids & 255).astype(np.uint8)[:, None, None]
    frames[:, 0, 0] = ids & 255
    frames[:, 0, 1] = (ids >> 8) & 255
    frames[:, 0, 2] = (ids >> 16) & 255
    return frames


def decode_frames(frames: torch.Tensor) -> np.ndarray:
    """Ids of frames [..., 84, 84] -> int array [...]."""
    f = frames.cpu().numpy().astype(np.int64)
    return f[..., 0, 0] + (f[..., 0, 1] << 8) + (f[..., 0, 2] << 16)


class IdCounter:
    def __init__(self) -> None:
        self.next = 1  # id 0 = never-written storage

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def build_stream(episodes, ids: IdCounter, rng: random.Random) -> list[tuple[int, float, int, int]]:
    """Records (frame_id, reward, action, flags) of a stream.

    ``episodes`` is a list of (steps, end) with end in 'term', 'trunc', 'cut', 'open';
    'open' (stream ends mid-episode) is only honoured for the last episode.
    """
    recs = []
    for i, (steps, end) in enumerate(episodes):
        if end == "open" and i != len(episodes) - 1:
            end = "cut"
        for k in range(steps):
            flags = FLAG_START if k == 0 else 0
            if k == steps - 1 and end == "term":
                flags |= FLAG_TERMINATED
            if k == steps - 1 and end == "trunc":
                flags |= FLAG_TRUNCATED
            reward = round(rng.uniform(-2.0, 2.0), 3)
            recs.append((ids.take(), reward, rng.randrange(256), flags))
        if end in ("term", "trunc"):
            recs.append((ids.take(), 0.0, 0, FLAG_FINAL))
    return recs


def to_array(recs) -> np.ndarray:
    arr = np.zeros(len(recs), dtype=RECORD_DTYPE)
    if recs:
        arr["frame"] = encode_frames([r[0] for r in recs])
        arr["reward"] = [r[1] for r in recs]
        arr["action"] = [r[2] for r in recs]
        arr["flags"] = [r[3] for r in recs]
    return arr


def reference(hist, t: int, cap: int, S: int, n: int, gamma: float):
    """Brute-force transition at absolute position ``t`` of the written history ``hist``.

    Returns None when the position is not a valid sample, else a dict with obs ids,
    action, ret, next ids, discount, and the episode index of every frame used.
    """
    count = len(hist)
    oldest = max(0, count - cap)
    if not oldest <= t < count:
        return None
    flags = [h[3] for h in hist]
    if flags[t] & FLAG_FINAL:
        return None

    def episode_start(p: int) -> int:
        while p > 0 and not flags[p] & FLAG_START:
            p -= 1
        return p

    def stack(p: int):
        start = episode_start(p)
        pos = [max(q, start) for q in range(p - S + 1, p + 1)]
        if min(pos) < oldest:
            return None
        return [hist[q][0] for q in pos]

    # Walk t's episode forward through the written data until it ends.
    steps = 0
    p = t
    while True:
        steps += 1
        if flags[p] & FLAG_TERMINATED:
            end = "term"
            break
        if flags[p] & FLAG_TRUNCATED:
            end = "trunc"
            break
        if p + 1 >= count:
            end = "open"
            break
        if flags[p + 1] & FLAG_START:
            end = "cut"
            break
        p += 1

    if end in ("term", "trunc"):
        final = t + steps
        if steps > n:
            k, nxt, disc = n, t + n, gamma**n
        else:
            if final >= count:
                return None  # FINAL not written yet
            k, nxt = steps, final
            disc = 0.0 if end == "term" else gamma**k
    elif end == "cut":
        k = min(n, steps - 1)  # the last step before the cut has no next observation
        if k == 0:
            return None
        nxt, disc = t + k, gamma**k
    else:  # open: records t .. count-1 are all steps of this episode
        if t + n >= count:
            return None
        k, nxt, disc = n, t + n, gamma**n

    obs = stack(t)
    next_ids = stack(nxt)
    if obs is None or next_ids is None:
        return None
    ret = sum(gamma**j * hist[t + j][1] for j in range(k))
    return dict(obs=obs, action=hist[t][2], ret=ret, next=next_ids, discount=disc)


def episode_of_ids(streams) -> dict[int, tuple[int, int]]:
    """frame id -> (stream, episode index), from the flags alone."""
    out = {}
    for s, recs in enumerate(streams):
        ep = -1
        for fid, _, _, fl in recs:
            if fl & FLAG_START:
                ep += 1
            out[fid] = (s, ep)
    return out


def check_batch(mem: ReplayMemory, hists, cap, S, n, gamma, batch, index, ep_of):
    """Every candidate's validity and, for valid ones, every field equals the reference."""
    stream, seq = (x.cpu().numpy() for x in index)
    B = len(stream)
    assert batch.obs.shape == (B, S, 84, 84) and batch.obs.dtype == torch.uint8
    assert batch.next_obs.shape == (B, S, 84, 84) and batch.next_obs.dtype == torch.uint8
    assert batch.action.dtype == torch.int64 and batch.action.shape == (B,)
    for name in ("ret", "discount", "weight"):
        t = getattr(batch, name)
        assert t.dtype == torch.float32 and t.shape == (B,), name
    obs_ids = decode_frames(batch.obs)
    next_ids = decode_frames(batch.next_obs)
    weight = batch.weight.numpy()
    action = batch.action.numpy()
    ret = batch.ret.numpy()
    disc = batch.discount.numpy()
    valid_count = 0
    for i in range(B):
        ref = reference(hists[stream[i]], int(seq[i]), cap, S, n, gamma)
        if weight[i] == 0.0:
            assert ref is None, (i, stream[i], seq[i], ref)
            assert ret[i] == 0.0 and disc[i] == 0.0
            continue
        assert weight[i] == 1.0
        assert ref is not None, (i, stream[i], seq[i])
        valid_count += 1
        assert obs_ids[i].tolist() == ref["obs"]
        assert next_ids[i].tolist() == ref["next"]
        assert action[i] == ref["action"]
        assert math.isclose(ret[i], ref["ret"], rel_tol=1e-5, abs_tol=1e-5)
        assert math.isclose(disc[i], ref["discount"], rel_tol=1e-6, abs_tol=1e-7)
        # A stack never mixes episodes; obs and next_obs come from the same episode.
        eps = {ep_of[x] for x in obs_ids[i].tolist() + next_ids[i].tolist()}
        assert len(eps) == 1 and next(iter(eps))[0] == stream[i]
    return valid_count


# ---------------------------------------------------------------------------- property test

episode_st = st.tuples(st.integers(1, 7), st.sampled_from(["term", "trunc", "term", "trunc", "cut", "open"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_streams=st.integers(1, 3),
    cap_per_stream=st.integers(1, 24),
    extra_capacity=st.integers(0, 2),
    frame_stack=st.integers(1, 4),
    n_step=st.integers(1, 4),
    gamma=st.sampled_from([0.99, 0.9, 0.5]),
    episodes=st.lists(st.lists(episode_st, max_size=8), min_size=3, max_size=3),
    seed=st.integers(0, 2**31 - 1),
)
def test_samples_match_reference(
    num_streams, cap_per_stream, extra_capacity, frame_stack, n_step, gamma, episodes, seed
):
    rng = random.Random(seed)
    ids = IdCounter()
    streams = [build_stream(episodes[s], ids, rng) for s in range(num_streams)]
    ep_of = episode_of_ids(streams)
    capacity = cap_per_stream * num_streams + extra_capacity % num_streams  # C = capacity // S
    mem = ReplayMemory(capacity, num_streams, frame_stack=frame_stack, n_step=n_step, gamma=gamma, seed=seed)
    assert mem.capacity_per_stream == cap_per_stream

    # Random chunks (sometimes larger than the per-stream capacity), interleaved across streams.
    chunks = []
    for s, recs in enumerate(streams):
        pos = 0
        while pos < len(recs):
            size = rng.randint(1, 2 * cap_per_stream + 2)
            chunks.append((s, pos, pos + size))
            pos += size
    order = sorted(range(len(chunks)), key=lambda i: (rng.random(), i))
    # keep each stream's chunks in order: assign sorted per-stream chunks to the shuffled slots
    per_stream = {s: [c for c in chunks if c[0] == s] for s in range(num_streams)}
    shuffled_streams = [chunks[i][0] for i in order]
    sequence = [per_stream[s].pop(0) for s in shuffled_streams]

    arrays = [to_array(recs) for recs in streams]
    written = [0] * num_streams
    for step, (s, lo, hi) in enumerate(sequence):
        mem.add(s, arrays[s][lo:hi])
        written[s] = min(hi, len(streams[s]))
        hists = [streams[i][: written[i]] for i in range(num_streams)]
        assert mem.inserted == sum(written)
        assert len(mem) == sum(min(w, cap_per_stream) for w in written)
        if step % 2 == 0 or step == len(sequence) - 1:
            batch, index = mem.sample(48, return_index=True)
            check_batch(mem, hists, cap_per_stream, frame_stack, n_step, gamma, batch, index, ep_of)


# ---------------------------------------------------------------------------- direct tests


def make_memory_with(streams_eps, capacity, num_streams, seed=0, **kw):
    ids = IdCounter()
    rng = random.Random(seed)
    streams = [build_stream(eps, ids, rng) for eps in streams_eps]
    mem = ReplayMemory(capacity, num_streams, seed=seed, **kw)
    for s, recs in enumerate(streams):
        mem.add(s, to_array(recs))
    return mem, streams


def test_mostly_valid_with_realistic_episodes():
    rng = random.Random(1)
    eps = [[(rng.randint(40, 120), rng.choice(["term", "trunc"])) for _ in range(8)] for _ in range(3)]
    mem, streams = make_memory_with(eps, capacity=3 * 400, num_streams=3, frame_stack=4, n_step=3)
    ep_of = episode_of_ids(streams)
    batch, index = mem.sample(512, return_index=True)
    hists = [list(s) for s in streams]
    valid = check_batch(mem, hists, 400, 4, 3, 0.99, batch, index, ep_of)
    assert valid / 512 > 0.9
    assert mem.can_sample(512)


def test_stack_never_mixes_episodes_and_repeats_start_frame():
    # Stream: episode A (3 steps, truncated) + FINAL, episode B (2 steps, terminated) + FINAL.
    recs = [
        (10, 1.0, 1, FLAG_START),
        (11, 2.0, 2, 0),
        (12, 3.0, 3, FLAG_TRUNCATED),
        (13, 0.0, 0, FLAG_FINAL),
        (20, 5.0, 4, FLAG_START),
        (21, 7.0, 5, FLAG_TERMINATED),
        (22, 0.0, 0, FLAG_FINAL),
    ]
    mem = ReplayMemory(64, 1, frame_stack=4, n_step=3, gamma=0.5)
    mem.add(0, to_array(recs))
    batch, (stream, seq) = mem.sample(256, return_index=True)
    obs = decode_frames(batch.obs)
    nxt = decode_frames(batch.next_obs)
    expected = {
        0: ([10, 10, 10, 10], 1.0 + 0.5 * 2 + 0.25 * 3, [10, 11, 12, 13], 0.125),
        1: ([10, 10, 10, 11], 2.0 + 0.5 * 3, [10, 11, 12, 13], 0.25),
        2: ([10, 10, 11, 12], 3.0, [10, 11, 12, 13], 0.5),
        4: ([20, 20, 20, 20], 5.0 + 0.5 * 7, [20, 20, 21, 22], 0.0),
        5: ([20, 20, 20, 21], 7.0, [20, 20, 21, 22], 0.0),
    }
    seen = set()
    for i in range(256):
        p = int(seq[i])
        if p in (3, 6):
            assert batch.weight[i] == 0.0  # FINAL records are not transitions
            continue
        assert batch.weight[i] == 1.0
        o, r, n_ids, d = expected[p]
        assert obs[i].tolist() == o and nxt[i].tolist() == n_ids
        assert batch.ret[i].item() == pytest.approx(r)
        assert batch.discount[i].item() == pytest.approx(d)
        assert batch.action[i].item() == recs[p][2]
        seen.add(p)
    assert seen == set(expected)


def test_crash_cut_bootstraps_from_last_record_before_cut():
    recs = [
        (1, 1.0, 0, FLAG_START),
        (2, 1.0, 0, 0),
        (3, 1.0, 0, 0),  # crash after this record: no next observation for it
        (4, 1.0, 0, FLAG_START),
        (5, 1.0, 0, 0),
    ]
    mem = ReplayMemory(16, 1, frame_stack=2, n_step=3, gamma=0.5)
    mem.add(0, to_array(recs))
    batch, (_, seq) = mem.sample(200, return_index=True)
    nxt = decode_frames(batch.next_obs)
    for i in range(200):
        p = int(seq[i])
        if p == 0:
            assert batch.weight[i] == 1.0
            assert nxt[i].tolist() == [2, 3]
            assert batch.discount[i].item() == pytest.approx(0.25)
            assert batch.ret[i].item() == pytest.approx(1.5)
        elif p == 1:
            assert batch.weight[i] == 1.0
            assert nxt[i].tolist() == [2, 3]
            assert batch.discount[i].item() == pytest.approx(0.5)
        else:  # 2: last before cut; 3, 4: next state not yet written
            assert batch.weight[i] == 0.0


def test_memory_per_transition_is_one_frame():
    mem = ReplayMemory(1000, 4, frame_stack=4, n_step=3)
    assert mem.nbytes / 1000 < 7200
    assert mem.nbytes >= 1000 * 84 * 84


def test_add_more_than_capacity_keeps_newest():
    ids = IdCounter()
    recs = build_stream([(50, "trunc")], ids, random.Random(0))  # 51 records
    mem = ReplayMemory(2 * 10, 2, frame_stack=1, n_step=1)
    mem.add(1, to_array(recs[:3]))
    mem.add(1, to_array(recs[3:]))  # 48 records into a ring of 10
    assert mem.inserted == 51 and len(mem) == 10
    stored = sorted(decode_frames(mem._frames[1]).tolist())
    assert stored == [r[0] for r in recs[-10:]]
    batch, (stream, seq) = mem.sample(100, return_index=True)
    assert (stream == 1).all()
    assert ((seq >= 41) & (seq < 51)).all()
    obs = decode_frames(batch.obs)[:, 0]
    for i in range(100):
        assert obs[i] == recs[int(seq[i])][0]
    # One add larger than the whole ring, starting from an empty stream.
    mem.add(0, to_array(recs))
    assert sorted(decode_frames(mem._frames[0]).tolist()) == [r[0] for r in recs[-10:]]


def test_add_copies_from_readonly_strided_views():
    ids = IdCounter()
    recs = build_stream([(6, "term")], ids, random.Random(0))
    arr = to_array(recs)
    ro = np.frombuffer(arr.tobytes(), dtype=RECORD_DTYPE)  # read-only, like a shared ring
    assert not ro.flags.writeable
    mem = ReplayMemory(8, 1, frame_stack=2, n_step=2)
    mem.add(0, ro[2:5])
    mem.add(0, ro[5:6])  # a single record
    arr["frame"][:] = 0  # the memory must not alias its input
    assert sorted(decode_frames(mem._frames[0, :4]).tolist()) == [r[0] for r in recs[2:6]]
