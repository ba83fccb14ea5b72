"""Tests of pipeline.learning.sum_tree.SumTree against brute-force prefix sums."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from pipeline.learning.sum_tree import SumTree


class CountTorchCalls(TorchFunctionMode):
    """Counts every torch function and Tensor method call made inside the ``with`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def brute_find(values: np.ndarray, u: float) -> int:
    """The leaf whose prefix-sum interval [cum_{i-1}, cum_i) contains u, skipping 0 leaves."""
    cum = np.cumsum(values)
    return int(np.searchsorted(cum, u, side="right"))


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 9, 100])
def test_update_total_and_find_match_prefix_sums(size):
    rng = np.random.default_rng(size)
    tree = SumTree(size)
    values = np.zeros(size)
    for _ in range(5):
        idx = rng.choice(size, size=rng.integers(1, size + 1), replace=False)
        # Multiples of 1/4: every sum is exact, so the interval boundaries are exact too.
        new = rng.integers(0, 12, size=len(idx)) / 4.0
        values[idx] = new
        tree.update(torch.from_numpy(idx), torch.from_numpy(new))
        assert torch.equal(tree.leaves(), torch.from_numpy(values))
        assert tree.total().item() == pytest.approx(values.sum(), rel=1e-12)
        if values.sum() == 0:
            continue
        cum = np.cumsum(values)
        # Interior points of every non-empty interval, and the interval starts themselves.
        us = np.concatenate([rng.uniform(0, values.sum(), 200), cum[:-1][values[1:] > 0]])
        found = tree.find(torch.from_numpy(us)).numpy()
        expected = np.array([brute_find(values, u) for u in us])
        assert np.array_equal(found, expected)
        assert (values[found] > 0).all()


def test_inner_nodes_are_exact_sums_and_rebuild_is_bit_identical():
    rng = np.random.default_rng(0)
    size = 37
    tree = SumTree(size)
    for _ in range(50):
        idx = torch.from_numpy(rng.integers(0, size, 8))  # with duplicates
        tree.update(idx, torch.from_numpy(rng.exponential(1.0, 8)))
    t = tree.tree
    for node in range(1, tree.num_leaves):
        assert t[node].item() == (t[2 * node] + t[2 * node + 1]).item()
    rebuilt = SumTree(size)
    rebuilt.set_leaves(tree.leaves().clone())
    assert torch.equal(rebuilt.tree, tree.tree)


def test_duplicate_indices_keep_tree_consistent():
    tree = SumTree(4)
    tree.update(torch.tensor([1, 1, 2]), torch.tensor([5.0, 7.0, 1.0]))
    leaf = tree.leaves()[1].item()
    assert leaf in (5.0, 7.0)
    assert tree.total().item() == leaf + 1.0


def test_never_returns_zero_leaf_even_at_the_top_of_the_range():
    tree = SumTree(6)
    tree.update(torch.tensor([0, 2, 3]), torch.tensor([0.1, 0.2, 0.3]))
    total = tree.total()
    # u == total (and beyond, as rounding could produce) must land on the last non-zero leaf.
    u = torch.stack([total, total * (1 + 1e-12), torch.nextafter(total, torch.tensor(0.0, dtype=torch.float64))])
    assert tree.find(u).tolist() == [3, 3, 3]


def test_empty_tree_samples_zero_priority_leaves_in_range():
    tree = SumTree(5)
    index, priority = tree.sample_stratified(16, torch.Generator().manual_seed(0))
    assert ((index >= 0) & (index < 5)).all()
    assert (priority == 0).all()


def test_stratified_sampling_is_proportional():
    rng = np.random.default_rng(1)
    values = rng.uniform(0.0, 1.0, 50)
    values[[3, 17, 40]] = 0.0
    tree = SumTree(50)
    tree.set_leaves(torch.from_numpy(values))
    gen = torch.Generator().manual_seed(2)
    draws = 100_000
    counts = np.zeros(50)
    for _ in range(draws // 1000):
        index, priority = tree.sample_stratified(1000, gen)
        assert torch.equal(priority, torch.from_numpy(values)[index])
        counts += np.bincount(index.numpy(), minlength=50)
    p = values / values.sum()
    assert (counts[values == 0] == 0).all()
    # Stratification only lowers the variance below the multinomial one used for the bound.
    sigma = np.sqrt(p * (1 - p) / draws)
    assert (np.abs(counts / draws - p) <= 5 * sigma + 1e-12).all()


def test_operation_count_does_not_depend_on_batch_size():
    tree = SumTree(1000)
    tree.set_leaves(torch.rand(1000, dtype=torch.float64))
    gen = torch.Generator().manual_seed(0)
    counts = []
    for batch in (1, 16, 4096):
        with CountTorchCalls() as sample_mode:
            tree.sample_stratified(batch, gen)
        with CountTorchCalls() as update_mode:
            tree.update(torch.randint(0, 1000, (batch,)), torch.rand(batch))
        counts.append((sample_mode.calls, update_mode.calls))
    assert counts[0] == counts[1] == counts[2]
    assert counts[0][0] > tree.depth  # the mode did see the per-level ops


@pytest.mark.parametrize("size", [1, 5, 16, 37])
def test_update_range_equals_update(size):
    rng = np.random.default_rng(size)
    by_range, by_index = SumTree(size), SumTree(size)
    for _ in range(30):
        start = int(rng.integers(0, size))
        n = int(rng.integers(0, size - start + 1))
        values = torch.from_numpy(rng.exponential(1.0, n))
        by_range.update_range(start, values)
        by_index.update(torch.arange(start, start + n), values)
        assert torch.equal(by_range.tree, by_index.tree)
    with pytest.raises(IndexError):
        by_range.update_range(size - 1, torch.ones(2, dtype=torch.float64))
