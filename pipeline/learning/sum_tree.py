"""A sum tree of non-negative priorities, kept as one tensor on a device and used batch-wise.

Proportional prioritized replay (Schaul et al. 2016) draws slot ``i`` with probability
``p_i / sum(p)``. The tree stores the leaf priorities and, at every inner node, the sum of
its two children, so the total is the root and a draw is one descent from the root.

Layout: a flat tensor ``tree`` of ``2 * L`` values where ``L`` is ``size`` rounded up to a
power of two. Node 1 is the root, node ``k`` has children ``2k`` and ``2k + 1``, leaf ``i``
is node ``L + i`` (padding leaves ``size .. L-1`` stay 0 and are never drawn while the
total is positive); node 0 is unused.

Every operation is batched and made of tensor ops only: a Python loop runs over the
``log2 L`` tree levels, never over the batch, and nothing reads a value back to the host,
so on CUDA the calls only enqueue kernels.

* ``update(index, values)`` (``update_range(start, values)`` for a contiguous run of leaves,
  as a replay ``add`` writes): write the leaves, then recompute the parents of the touched
  nodes level by level as ``left + right``. Duplicate indices are allowed (one of their
  values wins; which one is unspecified); parents written twice get the same value. Since
  every inner node is always exactly ``left + right`` of its current children, the tree is
  a pure function of the leaves: no drift from accumulated deltas, and a tree rebuilt
  from saved leaves (:meth:`set_leaves`) is bit-identical to the original.
* ``find(u)``: descend with ``u`` in ``[0, total)``: go right when ``u >= left sum``
  (subtracting it), else left.
* ``sample_stratified(batch_size)``: ``u_j = (j + U_j) / B * total`` with ``U_j`` uniform in
  ``[0, 1)``, one draw in each of ``B`` equal segments of the total (lower variance than
  ``B`` independent draws, as in the paper).

Values are float64: with float32 a sum over a million leaves keeps only ~7 digits, and the
rounding of ``u - left`` during a descent could step into a zero-priority neighbour. As a
second guard the descent never enters a subtree whose sum is 0 while the total is positive
(it stays left instead), so a zero-priority leaf (a FINAL record, an empty slot, padding)
is returned only when every priority is 0.
"""

from __future__ import annotations

import torch

__all__ = ["SumTree"]


class SumTree:
    """Sum tree over ``size`` leaves (all 0 initially) on ``device``."""

    def __init__(self, size: int, device: str | torch.device = "cpu") -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self.device = torch.device(device)
        self.depth = (size - 1).bit_length()  # levels below the root; 0 for a single leaf
        self.num_leaves = 1 << self.depth
        self.tree = torch.zeros(2 * self.num_leaves, dtype=torch.float64, device=self.device)
        # On the CPU a numpy view of the same memory: per-op overhead ~10x below torch's for
        # the small slices of update_range (called on every replay add).
        self._host = self.tree.numpy() if self.device.type == "cpu" else None

    # ------------------------------------------------------------------ reading
    def total(self) -> torch.Tensor:
        """Sum of all priorities: a 0-dim float64 tensor on the device (a copy, no sync)."""
        return self.tree[1].clone()

    def leaves(self) -> torch.Tensor:
        """View of the ``size`` leaf priorities (float64)."""
        return self.tree[self.num_leaves : self.num_leaves + self.size]

    def get(self, index: torch.Tensor) -> torch.Tensor:
        """Priorities of leaves ``index`` (int64 tensor of any shape)."""
        return self.tree[index + self.num_leaves]

    # ------------------------------------------------------------------ writing
    def update(self, index: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``index`` (int64 ``[B]``) to ``values`` (``[B]``, >= 0) and fix their ancestors."""
        node = index.to(device=self.device, dtype=torch.int64) + self.num_leaves
        self.tree[node] = values.to(device=self.device, dtype=torch.float64)
        tree = self.tree
        for _ in range(self.depth):
            node = node >> 1
            left = node << 1
            tree[node] = tree[left] + tree[left + 1]

    def update_range(self, start: int, values: torch.Tensor) -> None:
        """Set the contiguous leaves ``start .. start + len(values) - 1`` and fix their ancestors.

        Same result as :meth:`update` (bit for bit: each parent is ``left + right``), with one
        slice op per level instead of gathers: the touched nodes of a level are a contiguous run.
        """
        n = values.shape[0]
        if n == 0:
            return
        if start < 0 or start + n > self.size:
            raise IndexError(f"leaves [{start}, {start + n}) out of range [0, {self.size})")
        lo = start + self.num_leaves
        hi = lo + n
        if self._host is not None:
            tree = self._host
            tree[lo:hi] = values.detach().cpu().numpy()
        else:
            tree = self.tree
            tree[lo:hi] = values.to(device=self.device, dtype=torch.float64)
        for _ in range(self.depth):
            lo, hi = lo >> 1, ((hi - 1) >> 1) + 1
            tree[lo:hi] = tree[2 * lo : 2 * hi : 2] + tree[2 * lo + 1 : 2 * hi : 2]

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace all ``size`` leaves with ``values`` and rebuild every inner node."""
        if values.shape != (self.size,):
            raise ValueError(f"expected {self.size} leaf values, got shape {tuple(values.shape)}")
        tree = self.tree
        tree.zero_()
        tree[self.num_leaves : self.num_leaves + self.size] = values.to(device=self.device, dtype=torch.float64)
        lo = self.num_leaves
        while lo > 1:  # level by level: nodes [lo/2, lo) are the parents of [lo, 2lo)
            tree[lo // 2 : lo] = tree[lo : 2 * lo].view(-1, 2).sum(dim=1)
            lo //= 2

    def clear(self) -> None:
        self.tree.zero_()

    # ------------------------------------------------------------------ sampling
    def find(self, u: torch.Tensor) -> torch.Tensor:
        """Leaf index (int64, same shape as ``u``) of the prefix-sum position ``u`` (float64, >= 0)."""
        tree = self.tree
        u = u.to(dtype=torch.float64)
        node = torch.ones(u.shape, dtype=torch.int64, device=self.device)
        for _ in range(self.depth):
            left = node << 1
            left_sum = tree[left]
            # Go right past the left subtree's sum, unless the right subtree is empty: then u
            # only exceeds the left sum by rounding, and staying left avoids a 0-priority leaf.
            right = (u >= left_sum) & (tree[left + 1] > 0)
            u = torch.where(right, u - left_sum, u)
            node = left + right
        # Padding leaves (>= size) are reachable only when everything is 0: clamp for indexing.
        return torch.clamp(node - self.num_leaves, max=self.size - 1)

    def sample_stratified(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` stratified draws: ``(leaf index int64 [B], leaf priority float64 [B])``.

        When the total is 0 every draw returns some leaf of priority 0; callers treat a
        draw of priority 0 as invalid.
        """
        strata = torch.arange(batch_size, dtype=torch.float64, device=self.device)
        jitter = torch.rand(batch_size, generator=generator, dtype=torch.float64, device=self.device)
        u = (strata + jitter) * (self.tree[1] / batch_size)
        index = self.find(u)
        return index, self.get(index)
