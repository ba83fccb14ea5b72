"""How ReplayMemory samples: uniform over the stored positions (and so over the streams by
their size), the same draws for the same seed, an empty memory's batch all invalid, a
number of torch calls that does not grow with the batch (no Python loop over it), and on
CUDA no host synchronisation."""

from __future__ import annotations

import random

import pytest
import torch
from torch.overrides import TorchFunctionMode

from pipeline.learning.replay import Batch, ReplayMemory
from tests.pipeline.learning.test_replay import IdCounter, build_stream, to_array


def test_sampling_uniform_over_stored_positions_and_streams():
    ids = IdCounter()
    rng = random.Random(0)
    mem = ReplayMemory(3 * 100, 3, frame_stack=1, n_step=1, seed=3)
    mem.add(0, to_array(build_stream([(99, "trunc")], ids, rng)))  # 100 records
    mem.add(1, to_array(build_stream([(24, "trunc")], ids, rng)))  # 25 records
    # stream 2 empty
    _, (stream, seq) = mem.sample(20000, return_index=True)
    frac = torch.bincount(stream, minlength=3).double() / 20000
    assert abs(frac[0].item() - 0.8) < 0.02 and abs(frac[1].item() - 0.2) < 0.02
    assert frac[2].item() == 0.0
    hist = torch.bincount(seq[stream == 0], minlength=100).double()
    assert hist.min().item() > 0.5 * hist.mean().item()


def test_empty_memory_samples_all_invalid_and_seed_is_deterministic():
    mem = ReplayMemory(40, 2)
    assert not mem.can_sample(1)
    batch = mem.sample(8)
    assert isinstance(batch, Batch)
    assert (batch.weight == 0).all() and (batch.ret == 0).all()

    ids = IdCounter()
    arr = to_array(build_stream([(15, "term")] * 2, ids, random.Random(0)))
    outs = []
    for _ in range(2):
        m = ReplayMemory(40, 2, seed=7)
        m.add(0, arr)
        m.add(1, arr[:9])
        outs.append(m.sample(64, return_index=True)[1])
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


class CountTorchCalls(TorchFunctionMode):
    """Counts every torch function and Tensor method call made inside the ``with`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_sampling_uses_a_batch_independent_number_of_ops():
    """Vectorized: no Python loop over the candidates, whatever the batch size."""
    ids = IdCounter()
    mem = ReplayMemory(2 * 60, 2, frame_stack=4, n_step=3)
    for s in range(2):
        mem.add(s, to_array(build_stream([(12, "term"), (9, "cut"), (30, "open")], ids, random.Random(s))))
    counts = []
    for b in (16, 4096):
        with CountTorchCalls() as calls:
            batch = mem.sample(b)
        counts.append(calls.calls)
        assert batch.obs.shape[0] == b
    assert counts[0] == counts[1] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sampling_does_not_synchronize():
    mem = ReplayMemory(4000, 4, device="cuda")
    ids = IdCounter()
    for s in range(4):
        mem.add(s, to_array(build_stream([(60, "term")] * 10, ids, random.Random(s))))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            mem.sample(512)
            mem.sample_states(256)
    finally:
        torch.cuda.set_sync_debug_mode("default")
