"""Prioritized-replay bookkeeping of a replay memory: slot priorities, draws and importance weights.

Proportional prioritized replay (Schaul et al. 2016). A :class:`ReplayPriorities` owns a
:class:`~pipeline.learning.sum_tree.SumTree` on the memory's device with one priority per
slot (``stream * C + seq % C``, the slot numbering of
:class:`~pipeline.learning.replay.ReplayMemory`) and the largest priority ever set. It
knows nothing about records beyond their FINAL flag: which candidates are still stored,
and which are valid transitions, is the memory's business, passed in as masks.

Priorities:

* A new record lands with the current maximum priority (the largest ever set, 1 at
  first), so it is sampled at least once soon; a FINAL record lands with 0 (it is never a
  transition). Writing a slot replaces whatever priority the overwritten record had.
* ``ReplayMemory.update_priorities(index, td_errors)`` sets ``(|td| + eps) ** alpha`` for
  the sampled candidates that are still stored (a candidate whose slot was overwritten
  since it was sampled is skipped, so the new record keeps its own priority) and, when
  told which, only for the valid ones: invalid candidates such as the newest records of a
  stream, whose n-step window is not written yet, keep their priority until they can be
  learned from.
* ``Batch.weight`` is the importance-sampling weight ``(N * P(i)) ** -beta`` divided by the
  largest weight among the batch's valid candidates, times the validity (``N`` = stored
  records, ``P(i) = p_i / sum(p)``). Normalising over the batch rather than the memory
  (Dopamine's choice too) needs no min-tree, and keeps one stale tiny priority anywhere
  in the memory from shrinking every weight towards 0. (The learner's loss,
  ``sum(w * huber) / max(sum(w), 1)``, divides by the weight sum, so a factor common to
  the batch cancels there as long as the sum stays above 1, which it does: the largest
  valid weight of a batch is 1.)

The exponents ``alpha``, ``beta`` and ``eps`` are passed in by the memory on every call
rather than kept here: they are the memory's public, saved settings (a uniform memory has
them too) and the trainer anneals ``beta`` on the memory. Everything is tensor ops on the
device (loops over the ``log2`` tree levels only), with no host sync.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pipeline.learning.sum_tree import SumTree
from pipeline.transport.records import FLAG_FINAL

__all__ = ["INITIAL_PRIORITY", "ReplayPriorities", "initial_priorities"]

# Priority of a record before any TD error has been seen (max priority starts here).
INITIAL_PRIORITY = 1.0


def initial_priorities(flags: np.ndarray) -> np.ndarray:
    """Priorities of records never updated, from their flags: 0 for FINAL records, else the initial one."""
    final = (flags & FLAG_FINAL) != 0
    return np.where(final, 0.0, INITIAL_PRIORITY)


class ReplayPriorities:
    """One priority per slot of a replay memory, in a sum tree on ``device``, plus the running maximum."""

    def __init__(self, num_slots: int, device: torch.device) -> None:
        self.device = device
        self.tree = SumTree(num_slots, device)
        # The largest priority ever set (0-dim float64 on the device). Replaced, never
        # updated in place, so a caller may hand it out without a copy being overwritten.
        self.max_priority = torch.tensor(INITIAL_PRIORITY, dtype=torch.float64, device=device)

    @property
    def nbytes(self) -> int:
        return self.tree.tree.numel() * self.tree.tree.element_size()

    def leaves(self) -> torch.Tensor:
        """View of every slot's priority, float64 ``[num_slots]``."""
        return self.tree.leaves()

    # ------------------------------------------------------------------ writing
    def landed(self, start: int, wrap_start: int, head: int, flags: np.ndarray) -> None:
        """Give newly written records the current max priority (FINAL records 0).

        The records with ``flags`` went to slots ``start ..`` (the first ``head``) and, where
        the ring wrapped, ``wrap_start ..`` (the rest); the overwritten records' priorities go.
        """
        final = torch.from_numpy((flags & FLAG_FINAL) != 0).to(self.device)
        new = torch.where(final, torch.zeros_like(self.max_priority), self.max_priority)
        self.tree.update_range(start, new[:head])
        if head < len(flags):
            self.tree.update_range(wrap_start, new[head:])

    def update(self, slot: torch.Tensor, td: torch.Tensor, keep: torch.Tensor, *, alpha: float, eps: float) -> None:
        """Set ``(|td| + eps) ** alpha`` at ``slot`` where ``keep``; the max priority grows with the kept values.

        ``td`` is float64 on the device. Non-finite TD errors are dropped from ``keep`` here: a
        NaN in one leaf would poison every sum above it. Slots not kept are rewritten with
        their own value, so the whole batch is one tree update (no data-dependent shapes,
        hence no host sync).
        """
        keep = keep & torch.isfinite(td)
        new = (td.abs() + eps).pow(alpha)
        new = torch.where(keep, new, self.tree.get(slot))
        self.tree.update(slot, new)
        kept_max = torch.where(keep, new, torch.zeros_like(new)).amax()
        self.max_priority = torch.maximum(self.max_priority, kept_max)

    def reset(self) -> None:
        """Every priority 0 (no records) and the initial max priority."""
        self.tree.clear()
        self.max_priority = torch.tensor(INITIAL_PRIORITY, dtype=torch.float64, device=self.device)

    def restore(self, leaves: np.ndarray, max_priority: float) -> None:
        """Replace every slot's priority with ``leaves`` and the running maximum with ``max_priority``."""
        self.tree.set_leaves(torch.from_numpy(leaves))
        self.max_priority = torch.tensor(max_priority, dtype=torch.float64, device=self.device)

    # ------------------------------------------------------------------ sampling
    def draw(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Stratified draws from the tree: ``(slot int64 [B], priority float64 [B])``.

        A 0-priority slot comes out only of an all-zero tree; callers treat it as invalid.
        """
        return self.tree.sample_stratified(batch_size, generator)

    @staticmethod
    def importance_weights(priority: torch.Tensor, valid: torch.Tensor, beta: float) -> torch.Tensor:
        """``(N * P(i)) ** -beta / max_batch_w``, 0 where invalid (see the module docstring).

        ``N`` and the total cancel in the ratio, which leaves ``(p_i / min_valid p) ** -beta``;
        computing it that way avoids overflow for tiny probabilities.
        """
        p_min = torch.where(valid, priority, torch.full_like(priority, math.inf)).amin()
        ratio = torch.where(valid, priority / p_min, torch.ones_like(priority))
        w = ratio.pow(-beta)
        return torch.where(valid, w, torch.zeros_like(w)).to(torch.float32)
