"""Tests of prioritized sampling in pipeline.learning.replay.ReplayMemory against brute force.

Priorities are set through the public API (``update_priorities`` with ``alpha = 1`` makes a
slot's priority ``|td| + eps``), then sampled frequencies, importance weights and stored
priorities are compared with what the definitions in the module docstring give.
"""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.learning.replay import Batch, ReplayMemory
from pipeline.transport.records import FLAG_FINAL, FLAG_START
from tests.pipeline.learning.test_replay import (
    IdCounter,
    build_stream,
    check_batch,
    episode_of_ids,
    reference,
    to_array,
)
from tests.pipeline.learning.test_sum_tree import CountTorchCalls

EPS = 1e-6


def stored_index(mem: ReplayMemory) -> tuple[torch.Tensor, torch.Tensor]:
    """(stream, seq) of every stored record, stream by stream, oldest first."""
    streams, seqs = [], []
    for s in range(mem.num_streams):
        count = int(mem._count[s])
        lo = max(0, count - mem.capacity_per_stream)
        streams += [s] * (count - lo)
        seqs += range(lo, count)
    return torch.tensor(streams, dtype=torch.int64), torch.tensor(seqs, dtype=torch.int64)


def slot_of(mem: ReplayMemory, stream, seq) -> np.ndarray:
    c = mem.capacity_per_stream
    return np.asarray(stream) * c + np.asarray(seq) % c


def binary_weight(batch: Batch) -> Batch:
    """The batch with weight = validity, for check_batch (which expects 0/1 weights)."""
    return dataclasses.replace(batch, weight=(batch.weight > 0).float())


def mixed_memory(seed: int = 0, **kw) -> tuple[ReplayMemory, list, list]:
    """Two streams of C = 40: stream 0 wrapped (several episodes, a cut), stream 1 part filled."""
    ids = IdCounter()
    rng = random.Random(seed)
    streams = [
        build_stream([(12, "term"), (9, "trunc"), (15, "cut"), (6, "term"), (20, "open")], ids, rng),
        build_stream([(10, "term"), (5, "open")], ids, rng),
    ]
    assert len(streams[0]) > 40 and len(streams[1]) < 40
    mem = ReplayMemory(80, 2, frame_stack=2, n_step=2, gamma=0.9, seed=seed, prioritized=True, **kw)
    for s, recs in enumerate(streams):
        arr = to_array(recs)
        for lo in range(0, len(arr), 7):  # several adds, so the ring wraps across adds
            mem.add(s, arr[lo : lo + 7])
    return mem, streams, [list(r) for r in streams]


def set_random_priorities(mem: ReplayMemory, rng: np.random.Generator) -> np.ndarray:
    """Give every stored non-FINAL record a random priority (alpha = 1); returns all slot priorities."""
    assert mem.alpha == 1.0
    stream, seq = stored_index(mem)
    td = torch.from_numpy(rng.uniform(0.05, 5.0, len(seq)) * rng.choice([-1, 1], len(seq)))
    mem.update_priorities((stream, seq), td)
    expected = np.zeros(mem.num_streams * mem.capacity_per_stream)
    flags = mem._flags_flat.numpy()
    slots = slot_of(mem, stream.numpy(), seq.numpy())
    expected[slots] = np.where(flags[slots] & FLAG_FINAL, 0.0, np.abs(td.numpy()) + EPS)
    assert np.allclose(mem.priorities().reshape(-1).numpy(), expected, rtol=1e-12, atol=0)
    return expected


# ---------------------------------------------------------------------------- (a) distribution


def test_sampled_slots_follow_priorities():
    mem, _, _ = mixed_memory(alpha=1.0, eps=EPS)
    p = set_random_priorities(mem, np.random.default_rng(0))
    draws, batch = 200_704, 4096  # 49 batches
    counts = np.zeros(len(p))
    for _ in range(draws // batch):
        _, (stream, seq) = mem.sample(batch, return_index=True)
        stream, seq = stream.numpy(), seq.numpy()
        count = mem._count[stream]
        assert ((seq >= count - mem.capacity_per_stream) & (seq < count)).all()  # the slot's current record
        counts += np.bincount(slot_of(mem, stream, seq), minlength=len(p))
    prob = p / p.sum()
    assert (counts[prob == 0] == 0).all()  # FINAL records and never-written slots
    pos = prob > 0
    # Per slot, within 5 multinomial standard deviations (stratified draws vary less).
    sigma = np.sqrt(prob * (1 - prob) / draws)
    assert (np.abs(counts / draws - prob) <= 5 * sigma).all()
    # And overall: Pearson chi-square below df + 6 sqrt(2 df) (far in the upper tail).
    expected = prob[pos] * draws
    chi2 = float((((counts[pos] - expected) ** 2) / expected).sum())
    df = int(pos.sum()) - 1
    assert chi2 < df + 6 * math.sqrt(2 * df)


# ---------------------------------------------------------------------------- (b) IS weights


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_equal_brute_force(beta):
    mem, streams, hists = mixed_memory(seed=1, alpha=1.0, eps=EPS, beta=beta)
    p = set_random_priorities(mem, np.random.default_rng(1))
    batch, (stream, seq) = mem.sample(1024, return_index=True)
    n_stored = len(mem)
    total = p.sum()
    slots = slot_of(mem, stream.numpy(), seq.numpy())
    valid = np.array(
        [reference(hists[s], int(q), 40, 2, 2, 0.9) is not None for s, q in zip(stream.tolist(), seq.tolist())]
    )
    assert 0 < valid.sum() < len(valid)  # the batch has both kinds
    w = (n_stored * p[slots] / total) ** -beta
    expected = np.where(valid, w / w[valid].max(), 0.0)
    assert np.allclose(batch.weight.numpy(), expected, rtol=1e-6, atol=0)
    assert batch.weight.dtype == torch.float32 and batch.weight.max().item() == 1.0


def test_beta_is_settable_and_validated():
    mem, _, _ = mixed_memory(alpha=1.0, eps=EPS, beta=0.4)
    set_random_priorities(mem, np.random.default_rng(2))
    mem.beta = 0.0
    w = mem.sample(256).weight
    assert set(w.unique().tolist()) <= {0.0, 1.0}
    mem.beta = 1.0
    w = mem.sample(256).weight
    assert ((w > 0) & (w < 0.999)).any()
    with pytest.raises(ValueError, match="beta"):
        mem.beta = 1.5


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cap_per_stream=st.integers(2, 20),
    frame_stack=st.integers(1, 3),
    n_step=st.integers(1, 3),
    episodes=st.lists(
        st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["term", "trunc", "cut", "open"])), max_size=6),
        min_size=2,
        max_size=2,
    ),
    seed=st.integers(0, 2**31 - 1),
)
def test_prioritized_transitions_match_reference(cap_per_stream, frame_stack, n_step, episodes, seed):
    rng = random.Random(seed)
    ids = IdCounter()
    streams = [build_stream(eps, ids, rng) for eps in episodes]
    mem = ReplayMemory(
        2 * cap_per_stream, 2, frame_stack=frame_stack, n_step=n_step, gamma=0.9, seed=seed, prioritized=True
    )
    for s, recs in enumerate(streams):
        arr = to_array(recs)
        for lo in range(0, len(arr), 5):
            mem.add(s, arr[lo : lo + 5])
            if rng.random() < 0.5:
                batch, index = mem.sample(16, return_index=True)
                td = torch.from_numpy(np.random.default_rng(seed).normal(size=16))
                mem.update_priorities(index, td, valid=batch.weight > 0)
    batch, index = mem.sample(64, return_index=True)
    check_batch(
        mem, streams, cap_per_stream, frame_stack, n_step, 0.9, binary_weight(batch), index, episode_of_ids(streams)
    )
    stream, seq = index
    drawn = mem.priorities().reshape(-1)[torch.from_numpy(slot_of(mem, stream.numpy(), seq.numpy()))]
    assert (drawn > 0).all() or mem.priorities().sum() == 0


# ---------------------------------------------------------------------------- (c) updates


def one_long_episode(length: int = 100, **kw) -> ReplayMemory:
    ids = IdCounter()
    mem = ReplayMemory(length, 1, frame_stack=1, n_step=1, prioritized=True, seed=5, **kw)
    mem.add(0, to_array(build_stream([(length, "open")], ids, random.Random(0))))
    return mem


def sampled_fraction(mem: ReplayMemory, draws: int, pick) -> float:
    hits = 0
    for _ in range(draws // 4096):
        _, (_, seq) = mem.sample(4096, return_index=True)
        hits += int(pick(seq).sum())
    return hits / (draws // 4096 * 4096)


def test_update_priorities_changes_the_distribution():
    mem = one_long_episode(alpha=1.0, eps=EPS, beta=1.0)
    first = lambda seq: seq < 10  # noqa: E731
    assert sampled_fraction(mem, 40960, first) == pytest.approx(0.1, abs=0.01)  # all at max priority 1
    stream, seq = stored_index(mem)
    td = torch.where(seq < 10, 3.0, 1.0).double()
    mem.update_priorities((stream, seq), td)
    expected = 10 * (3 + EPS) / (10 * (3 + EPS) + 90 * (1 + EPS))
    draws = 81920
    sigma = math.sqrt(expected * (1 - expected) / draws)
    assert abs(sampled_fraction(mem, draws, first) - expected) < 5 * sigma
    # High-priority samples are down-weighted by (p_high / p_low) ** -beta.
    batch, (_, seq) = mem.sample(512, return_index=True)
    valid = batch.weight > 0
    low = valid & (seq >= 10)
    high = valid & (seq < 10)
    assert low.any() and high.any()
    assert torch.allclose(batch.weight[low], torch.ones(int(low.sum())))
    assert torch.allclose(batch.weight[high], torch.full((int(high.sum()),), (1 + EPS) / (3 + EPS)))
    # alpha applies: (|td| + eps) ** alpha
    mem2 = one_long_episode(alpha=0.5, eps=0.01)
    mem2.update_priorities((torch.tensor([0]), torch.tensor([4])), torch.tensor([-2.0]))
    assert mem2.priorities()[0, 4].item() == pytest.approx((2.0 + 0.01) ** 0.5)


def test_update_skips_invalid_nonfinite_final_and_overwritten():
    ids = IdCounter()
    recs = build_stream([(5, "term"), (20, "open")], ids, random.Random(0))  # FINAL at seq 5
    mem = ReplayMemory(12, 1, frame_stack=1, n_step=1, prioritized=True, alpha=1.0, eps=EPS)
    arr = to_array(recs)
    mem.add(0, arr[:10])
    before = mem.priorities().clone()
    assert before[0, 5].item() == 0.0 and (before[0, :10][np.arange(10) != 5] == 1.0).all()
    index = (torch.zeros(4, dtype=torch.int64), torch.tensor([1, 2, 3, 5]))
    mem.update_priorities(
        index, torch.tensor([7.0, float("nan"), 9.0, 4.0]), valid=torch.tensor([True, True, False, True])
    )
    after = mem.priorities()
    assert after[0, 1].item() == pytest.approx(7.0 + EPS)  # kept
    assert after[0, 2].item() == 1.0  # NaN: unchanged
    assert after[0, 3].item() == 1.0  # invalid: unchanged
    assert after[0, 5].item() == 0.0  # FINAL: stays 0
    assert mem.max_priority.item() == pytest.approx(7.0 + EPS)
    # Sample index of seq 0..3, then overwrite their slots: the update must not touch them.
    stale = (torch.zeros(4, dtype=torch.int64), torch.tensor([0, 1, 2, 3]))
    mem.add(0, arr[10:16])  # seq 10..15: slots 10, 11, 0, 1, 2, 3
    fresh = mem.priorities().clone()
    assert fresh[0, [0, 1, 2, 3]].tolist() == pytest.approx([7.0 + EPS] * 4)  # new records at max priority
    mem.update_priorities(stale, torch.tensor([100.0, 100.0, 100.0, 100.0]))
    assert torch.equal(mem.priorities(), fresh)
    assert mem.max_priority.item() == pytest.approx(7.0 + EPS)


def test_update_priorities_needs_prioritized_memory():
    mem = ReplayMemory(10, 1)
    with pytest.raises(RuntimeError, match="prioritized"):
        mem.update_priorities((torch.tensor([0]), torch.tensor([0])), torch.tensor([1.0]))


# ---------------------------------------------------------------------------- (d) new records


def test_new_records_get_max_priority_final_zero_overwrite_resets():
    ids = IdCounter()
    recs = build_stream([(4, "term"), (4, "trunc"), (30, "open")], ids, random.Random(3))  # FINALs at 4, 9
    arr = to_array(recs)
    mem = ReplayMemory(2 * 8, 2, frame_stack=1, n_step=1, prioritized=True, alpha=1.0, eps=EPS)
    assert mem.max_priority.item() == 1.0
    mem.add(0, arr[:6])
    pri = mem.priorities()
    assert pri[0, :6].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert (pri[0, 6:] == 0).all() and (pri[1] == 0).all()  # never written
    # A larger TD error raises the max priority that later records land with.
    mem.update_priorities((torch.tensor([0]), torch.tensor([2])), torch.tensor([-6.0]))
    mem.update_priorities((torch.tensor([0]), torch.tensor([3])), torch.tensor([0.5]))  # lower: max stays
    assert mem.max_priority.item() == pytest.approx(6.0 + EPS)
    mem.add(0, arr[6:10])  # seq 6..9, FINAL at 9
    pri = mem.priorities()
    assert pri[0, 6:8].tolist() == pytest.approx([6.0 + EPS] * 2) and pri[0, 3].item() == pytest.approx(0.5 + EPS)
    assert pri[0, 9 % 8].item() == 0.0  # FINAL wrapped into slot 1
    # Wrap: seq 10..13 land in slots 2..5; slot 2 had 6.0, slot 3 had 0.5, slot 4 a FINAL's 0.
    mem.update_priorities((torch.tensor([0]), torch.tensor([5])), torch.tensor([0.25]))
    mem.add(0, arr[10:14])
    pri = mem.priorities()
    assert pri[0, 2:6].tolist() == pytest.approx([6.0 + EPS] * 4)
    # Sampling never returns an overwritten record.
    _, (stream, seq) = mem.sample(2048, return_index=True)
    assert (stream == 0).all() and ((seq >= 14 - 8) & (seq < 14)).all()


# ---------------------------------------------------------------------------- (e) vectorized


def test_sampling_and_updates_use_a_batch_independent_number_of_ops():
    mem, _, _ = mixed_memory(alpha=1.0, eps=EPS)
    set_random_priorities(mem, np.random.default_rng(4))
    counts = []
    for b in (16, 4096):
        with CountTorchCalls() as sample_calls:
            batch, index = mem.sample(b, return_index=True)
        with CountTorchCalls() as update_calls:
            mem.update_priorities(index, torch.randn(b), valid=batch.weight > 0)
        counts.append((sample_calls.calls, update_calls.calls))
        assert batch.obs.shape[0] == b
    assert counts[0] == counts[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sampling_and_updates_do_not_synchronize():
    mem = ReplayMemory(4000, 4, prioritized=True, device="cuda")
    ids = IdCounter()
    for s in range(4):
        mem.add(s, to_array(build_stream([(60, "term")] * 10, ids, random.Random(s))))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            batch, index = mem.sample(512, return_index=True)
            mem.update_priorities(index, torch.randn(512, device="cuda"), valid=batch.weight > 0)
            mem.beta = 0.7
    finally:
        torch.cuda.set_sync_debug_mode("default")


# ---------------------------------------------------------------------------- (f) uniform path


def test_default_is_uniform_with_binary_weights():
    ids = IdCounter()
    mem = ReplayMemory(64, 2)
    assert not mem.prioritized
    mem.add(0, to_array(build_stream([(10, "term")] * 3, ids, random.Random(0))))
    assert set(mem.sample(512).weight.unique().tolist()) == {0.0, 1.0}
    with pytest.raises(RuntimeError):
        mem.priorities()


def test_fresh_prioritized_memory_samples_like_uniform_over_non_final_records():
    ids = IdCounter()
    recs = build_stream([(9, "term")] * 4, ids, random.Random(0))  # 40 records, 4 FINAL
    mem = ReplayMemory(40, 1, frame_stack=1, n_step=1, prioritized=True)
    mem.add(0, to_array(recs))
    _, (_, seq) = mem.sample(36 * 1000, return_index=True)
    counts = np.bincount(seq.numpy(), minlength=40)
    final = np.array([r[3] & FLAG_FINAL != 0 for r in recs])
    assert (counts[final] == 0).all()
    # Stratified draws over equal priorities: every record exactly 1000 times.
    assert (counts[~final] == 1000).all()
    assert recs[0][3] & FLAG_START
