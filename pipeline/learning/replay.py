"""Replay memory over per-stream circular buffers of records, one frame stored per record.

Every collector (stream) writes its records in order: an episode of T steps is T step
records (START on the first, TERMINATED or TRUNCATED on the last) followed by one FINAL
record carrying the last observation. A collector crash leaves an episode's step records
followed directly by the START of the next episode (a "cut"), and a stream may end in the
middle of an episode that has not been written completely yet.

Storage keeps each frame exactly once: ``frames`` is uint8 ``[num_streams, C, 84, 84]``
(``C = capacity // num_streams``) next to per-record ``actions``, ``rewards`` and
``flags``. Each stream is a ring addressed by absolute sequence number ``seq`` (the
``seq``-th record ever added to that stream lives in slot ``seq % C``); a stream holds
the records ``[max(0, count - C), count)``.

Sampling is fully vectorized on ``device``, with no host synchronisation: candidates are
drawn uniformly over all stored positions of all streams, their validity and n-step
targets are computed with loops over the small constants ``n_step`` and ``frame_stack``
only, and invalid candidates are returned with ``weight == 0`` instead of being redrawn.

Transition at position ``t`` (a step record, never a FINAL):

* ``k = min(n_step, steps to the end of t's episode)``; ``ret = sum_{j<k} gamma^j r_{t+j}``.
* If the episode ends by a TERMINATED/TRUNCATED step within the window, ``next_obs`` is the
  stack ending at the episode's FINAL record and ``discount`` is ``0`` (TERMINATED) or
  ``gamma^k`` (TRUNCATED). A FINAL record that follows a step without either flag is
  treated like TRUNCATED.
* If the episode is cut (the record after step ``t+j`` is a START), step ``t+j`` has no next
  observation: ``k = j`` and ``next_obs`` is the stack ending at ``t+j`` with
  ``discount = gamma^k`` (invalid when ``j == 0``). The cut takes precedence over any flag
  of step ``t+j``.
* Otherwise ``k = n_step`` and ``next_obs`` is the stack ending at ``t+n_step``.

A candidate is invalid when it is not stored, is a FINAL record, needs a record not yet
written (``t+k`` or the record telling whether step ``t+k-1`` was the last before a cut)
or needs a frame already overwritten (its stack reaches back before the oldest stored
record of its stream). Stacks: the stack at ``p`` is frames ``p-S+1 .. p`` of ``p``'s
episode; frames before the episode's START repeat the START frame, so a stack never
mixes episodes. A stream whose first record is not a START is treated as an episode of
unknown beginning: stacks that would need a frame before sequence number 0 are invalid.

Prioritized replay (``prioritized=True``; proportional variant of Schaul et al. 2016): a
:class:`~pipeline.learning.sum_tree.SumTree` on ``device`` holds one priority per slot
(``stream * C + seq % C``). Candidates are drawn by stratified sampling over the tree
instead of uniformly; validity, n-step targets and stacks are then computed exactly as
above. Priorities:

* A new record lands with the current maximum priority (the largest ever set, 1 at
  first), so it is sampled at least once soon; a FINAL record lands with 0 (it is never a
  transition). Writing a slot replaces whatever priority the overwritten record had.
* ``update_priorities(index, td_errors)`` sets ``(|td| + eps) ** alpha`` for the sampled
  candidates that are still stored (a candidate whose slot was overwritten since it was
  sampled is skipped, so the new record keeps its own priority) and, when told which, only
  for the valid ones: invalid candidates such as the newest records of a stream, whose
  n-step window is not written yet, keep their priority until they can be learned from.
* ``Batch.weight`` is the importance-sampling weight ``(N * P(i)) ** -beta`` divided by the
  largest weight among the batch's valid candidates, times the validity (``N`` = stored
  records, ``P(i) = p_i / sum(p)``). Normalising over the batch rather than the memory
  (Dopamine's choice too) needs no min-tree, and keeps one stale tiny priority anywhere
  in the memory from shrinking every weight towards 0. (The learner's loss,
  ``sum(w * huber) / max(sum(w), 1)``, divides by the weight sum, so a factor common to
  the batch cancels there as long as the sum stays above 1, which it does: the largest
  valid weight of a batch is 1.) ``beta`` is a settable attribute the trainer may anneal.

Everything in sampling and priority updates is tensor ops on ``device`` (loops over
``n_step``, ``frame_stack`` and the ``log2`` tree levels only), with no host sync.

Save and restore (:meth:`ReplayMemory.save`, :meth:`ReplayMemory.restore`,
:meth:`ReplayMemory.load`): the stored records of every stream, the per-stream counts,
the sampling RNG state, and the priorities with the running maximum, in a compressed
zip written atomically (format in :mod:`pipeline.learning.replay_store`). A restored
memory samples exactly what the saved one would have.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline.learning.replay_store import DEFAULT_COMPRESSLEVEL, ReplayFileError, ReplayReader, write_replay_file
from pipeline.learning.sum_tree import SumTree
from pipeline.transport.records import (
    FLAG_FINAL,
    FLAG_START,
    FLAG_TERMINATED,
    FLAG_TRUNCATED,
    FRAME_SHAPE,
    RECORD_DTYPE,
)

__all__ = ["Batch", "ReplayFileError", "ReplayMemory"]

# Priority of a record before any TD error has been seen (max priority starts here).
INITIAL_PRIORITY = 1.0


@dataclass
class Batch:
    """A sampled batch of n-step transitions (all tensors on the memory's device)."""

    obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t
    action: torch.Tensor  # int64 [B]
    ret: torch.Tensor  # float32 [B] sum_{j<k} gamma^j r_{t+j} (0 for invalid candidates)
    next_obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t+k
    discount: torch.Tensor  # float32 [B] gamma^k, 0 if TERMINATED within the k steps (0 if invalid)
    weight: torch.Tensor  # float32 [B] 1 valid sample (prioritized: IS weight in (0, 1]), 0 invalid candidate


class ReplayMemory:
    """Per-stream circular replay memory of records with vectorized n-step sampling.

    ``sample(batch_size, return_index=True)`` returns ``(batch, (stream, seq))`` where
    ``stream`` and ``seq`` are int64 ``[B]`` tensors on the device naming each candidate's
    stream and absolute sequence number within that stream (0 = first record ever added
    to it); pass it to :meth:`update_priorities` when prioritized.
    """

    def __init__(
        self,
        capacity: int,
        num_streams: int,
        *,
        frame_stack: int = 4,
        n_step: int = 3,
        gamma: float = 0.99,
        device: str | torch.device = "cpu",
        seed: int = 0,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> None:
        if num_streams < 1:
            raise ValueError("num_streams must be >= 1")
        if capacity // num_streams < 1:
            raise ValueError("capacity must be at least num_streams")
        if frame_stack < 1 or n_step < 1:
            raise ValueError("frame_stack and n_step must be >= 1")
        if alpha < 0 or eps <= 0:
            raise ValueError("alpha must be >= 0 and eps > 0")
        self.capacity_per_stream = capacity // num_streams
        self.num_streams = num_streams
        self.frame_stack = frame_stack
        self.n_step = n_step
        self.gamma = float(gamma)
        self.device = torch.device(device)

        n, c = num_streams, self.capacity_per_stream
        dev = self.device
        self._frames = torch.zeros((n, c, *FRAME_SHAPE), dtype=torch.uint8, device=dev)
        self._actions = torch.zeros((n, c), dtype=torch.uint8, device=dev)
        self._rewards = torch.zeros((n, c), dtype=torch.float32, device=dev)
        self._flags = torch.zeros((n, c), dtype=torch.uint8, device=dev)
        # Flat views used by the sampler: slot index = stream * C + seq % C.
        self._frames_flat = self._frames.view(n * c, *FRAME_SHAPE)
        self._actions_flat = self._actions.view(n * c)
        self._rewards_flat = self._rewards.view(n * c)
        self._flags_flat = self._flags.view(n * c)
        # Host numpy views for cheap single-copy writes when the storage is on the CPU.
        self._host_views = (
            (self._frames.numpy(), self._actions.numpy(), self._rewards.numpy(), self._flags.numpy())
            if dev.type == "cpu"
            else None
        )

        self._count = np.zeros(n, dtype=np.int64)  # records ever added, per stream (host)
        self._count_dev = torch.zeros(n, dtype=torch.int64, device=dev)  # same, on device
        self._gamma_pow = torch.tensor([self.gamma**i for i in range(n_step + 1)], dtype=torch.float32, device=dev)
        self._generator = torch.Generator(device=dev)
        self._generator.manual_seed(seed)

        self.prioritized = bool(prioritized)
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.beta = beta  # validated by the property setter
        # Priorities per slot, and the largest priority ever set (0-dim, on the device).
        self._tree = SumTree(n * c, dev) if self.prioritized else None
        self._max_priority = torch.tensor(INITIAL_PRIORITY, dtype=torch.float64, device=dev)

    @property
    def beta(self) -> float:
        """Importance-sampling exponent in [0, 1]; settable at any time (annealed towards 1)."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        value = float(value)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {value}")
        self._beta = value

    # ------------------------------------------------------------------ bookkeeping
    def __len__(self) -> int:
        return int(np.minimum(self._count, self.capacity_per_stream).sum())

    @property
    def inserted(self) -> int:
        return int(self._count.sum())

    @property
    def nbytes(self) -> int:
        tensors = [self._frames, self._actions, self._rewards, self._flags, self._count_dev]
        if self._tree is not None:
            tensors.append(self._tree.tree)
        return sum(t.numel() * t.element_size() for t in tensors)

    @property
    def geometry(self) -> dict[str, Any]:
        """What fixes the storage layout and the sampled transitions; a restore must match it."""
        return {
            "num_streams": self.num_streams,
            "capacity_per_stream": self.capacity_per_stream,
            "frame_stack": self.frame_stack,
            "n_step": self.n_step,
            "gamma": self.gamma,
        }

    @property
    def max_priority(self) -> torch.Tensor:
        """The priority new records get (0-dim float64 on the device; reading it is not a sync)."""
        return self._max_priority.clone()

    def priorities(self) -> torch.Tensor:
        """Priority of every slot, float64 ``[num_streams, C]`` (a copy; prioritized memories only)."""
        if self._tree is None:
            raise RuntimeError("this replay memory is not prioritized")
        return self._tree.leaves().clone().view(self.num_streams, self.capacity_per_stream)

    def can_sample(self, batch_size: int) -> bool:
        """Host-only estimate: stored positions old enough for a full n-step window.

        Per stream, the newest ``n_step`` records cannot have their next state written,
        and once the ring has wrapped the oldest ``frame_stack - 1`` may have lost frames.
        (FINAL records and episode boundaries are not accounted for; sampling never fails,
        it only returns more weight-0 candidates.)
        """
        c = self.capacity_per_stream
        fill = np.minimum(self._count, c)
        wrapped = self._count > c
        usable = fill - self.n_step - np.where(wrapped, self.frame_stack - 1, 0)
        return batch_size >= 1 and int(np.maximum(usable, 0).sum()) >= batch_size

    # ------------------------------------------------------------------ writing
    def add(self, stream: int, records: np.ndarray) -> None:
        """Append ``records`` (RECORD_DTYPE, any length) to ``stream``; they are copied."""
        if not 0 <= stream < self.num_streams:
            raise IndexError(f"stream {stream} out of range [0, {self.num_streams})")
        records = np.asarray(records)
        if records.dtype != RECORD_DTYPE:
            raise TypeError(f"records must have RECORD_DTYPE, got {records.dtype}")
        records = records.reshape(-1)
        total = len(records)
        if total == 0:
            return
        c = self.capacity_per_stream
        keep = records[-c:] if total > c else records  # only the newest C can survive
        first_seq = int(self._count[stream]) + total - len(keep)
        slot = first_seq % c
        head = min(len(keep), c - slot)
        self._write(stream, slot, keep[:head])
        if head < len(keep):
            self._write(stream, 0, keep[head:])
        if self._tree is not None:
            final = torch.from_numpy((keep["flags"] & FLAG_FINAL) != 0).to(self.device)
            new = torch.where(final, torch.zeros_like(self._max_priority), self._max_priority)
            self._tree.update_range(stream * c + slot, new[:head])
            if head < len(keep):
                self._tree.update_range(stream * c, new[head:])
        self._count[stream] += total
        self._count_dev[stream] = int(self._count[stream])

    def _write(self, stream: int, slot: int, recs: np.ndarray) -> None:
        end = slot + len(recs)
        fields = (recs["frame"], recs["action"], recs["reward"], recs["flags"])
        if self._host_views is not None:
            for dst, src in zip(self._host_views, fields):
                dst[stream, slot:end] = src
            return
        for dst, src in zip((self._frames, self._actions, self._rewards, self._flags), fields):
            # Gather the strided field into a private contiguous host array, then one H2D copy.
            src = np.require(src, requirements=("C", "W"))
            dst[stream, slot:end].copy_(torch.from_numpy(src))

    # ------------------------------------------------------------------ sampling
    def _slot(self, stream: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        return stream * self.capacity_per_stream + torch.remainder(seq, self.capacity_per_stream)

    def _stack(
        self, stream: torch.Tensor, pos: torch.Tensor, oldest: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames of the stacks ending at ``pos`` and whether all of them are still stored."""
        s = self.frame_stack
        idx = torch.empty((pos.shape[0], s), dtype=torch.int64, device=self.device)
        cur = pos
        ok = pos >= oldest
        idx[:, s - 1] = self._slot(stream, cur)
        for j in range(1, s):
            at_start = (self._flags_flat[self._slot(stream, cur)] & FLAG_START) != 0
            cur = torch.where(at_start, cur, cur - 1)  # stay on the START frame: repeat it
            ok &= cur >= oldest
            idx[:, s - 1 - j] = self._slot(stream, cur)
        return self._frames_flat[idx], ok

    def sample(self, batch_size: int, return_index: bool = False):
        """Draw ``batch_size`` candidates uniformly over all stored positions (by priority
        when prioritized).

        Returns a :class:`Batch`; invalid candidates carry ``weight == 0`` (and zero
        ``ret`` and ``discount``). With ``return_index=True`` returns
        ``(batch, (stream, seq))`` identifying each candidate's position.
        """
        if self._tree is None:
            stream, seq = self._draw_uniform(batch_size)
            batch, _ = self._transitions(stream, seq)
        else:
            stream, seq, priority = self._draw_prioritized(batch_size)
            # A 0-priority slot comes out only of an all-zero tree: never a transition.
            batch, valid = self._transitions(stream, seq, drawable=priority > 0)
            batch.weight = self._importance_weights(priority, valid)
        if return_index:
            return batch, (stream, seq)
        return batch

    def _draw_uniform(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.capacity_per_stream
        count = self._count_dev
        fill = torch.clamp(count, max=c)
        cum = torch.cumsum(fill, 0)
        total = cum[-1]
        u = torch.rand(b, generator=self._generator, device=self.device, dtype=torch.float64)
        flat = (u * total.to(torch.float64)).to(torch.int64)
        flat = torch.minimum(flat, torch.clamp(total - 1, min=0))
        stream = torch.searchsorted(cum, flat, right=True).clamp_(max=self.num_streams - 1)
        offset = flat - (cum[stream] - fill[stream])
        oldest = count[stream] - fill[stream]
        return stream, oldest + offset

    def _draw_prioritized(self, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Stratified draws from the sum tree: ``(stream, seq, priority)``."""
        assert self._tree is not None
        c = self.capacity_per_stream
        slot, priority = self._tree.sample_stratified(b, self._generator)
        stream = torch.div(slot, c, rounding_mode="floor")
        pos = slot - stream * c
        # The newest record in slot ``pos``: the largest seq < count with seq % C == pos.
        # Negative (hence invalid) for a slot never written; such slots have priority 0.
        last = self._count_dev[stream] - 1
        seq = last - torch.remainder(last - pos, c)
        return stream, seq, priority

    def _importance_weights(self, priority: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``(N * P(i)) ** -beta / max_batch_w``, 0 where invalid (see the module docstring).

        ``N`` and the total cancel in the ratio, which leaves ``(p_i / min_valid p) ** -beta``;
        computing it that way avoids overflow for tiny probabilities.
        """
        p_min = torch.where(valid, priority, torch.full_like(priority, math.inf)).amin()
        ratio = torch.where(valid, priority / p_min, torch.ones_like(priority))
        w = ratio.pow(-self._beta)
        return torch.where(valid, w, torch.zeros_like(w)).to(torch.float32)

    def _transitions(
        self, stream: torch.Tensor, seq: torch.Tensor, drawable: torch.Tensor | None = None
    ) -> tuple[Batch, torch.Tensor]:
        """The batch for candidates ``(stream, seq)`` (weight = validity) and the validity mask.

        ``drawable`` (bool ``[B]``), when given, marks further candidates invalid.
        """
        dev = self.device
        b = stream.shape[0]

        s_count = self._count_dev[stream]
        oldest = s_count - torch.clamp(s_count, max=self.capacity_per_stream)

        valid = (seq >= oldest) & (seq < s_count)
        if drawable is not None:
            valid &= drawable
        flags_t = self._flags_flat[self._slot(stream, seq)]
        valid &= (flags_t & FLAG_FINAL) == 0

        ret = torch.zeros(b, dtype=torch.float32, device=dev)
        k = torch.zeros(b, dtype=torch.int64, device=dev)
        next_pos = seq.clone()
        terminal = torch.zeros(b, dtype=torch.bool, device=dev)
        active = valid.clone()
        for j in range(self.n_step):
            pj = seq + j
            pn = pj + 1
            written = pn < s_count  # needed: next frame, or to know whether t+j is cut
            valid &= written | ~active
            active &= written
            f_j = self._flags_flat[self._slot(stream, pj)]
            f_n = self._flags_flat[self._slot(stream, pn)]
            cut = active & ((f_n & FLAG_START) != 0)
            if j == 0:
                valid &= ~cut  # last record before a cut: no next observation
            else:
                next_pos = torch.where(cut, pj, next_pos)
                k = torch.where(cut, j, k)
            active &= ~cut
            r = self._rewards_flat[self._slot(stream, pj)]
            ret = ret + torch.where(active, r * (self.gamma**j), torch.zeros_like(r))
            terminal |= active & ((f_j & FLAG_TERMINATED) != 0)
            if j == self.n_step - 1:
                ends = active
            else:
                ends = active & (((f_j & (FLAG_TERMINATED | FLAG_TRUNCATED)) != 0) | ((f_n & FLAG_FINAL) != 0))
            next_pos = torch.where(ends, pn, next_pos)
            k = torch.where(ends, j + 1, k)
            active &= ~ends

        obs, ok_obs = self._stack(stream, seq, oldest)
        next_obs, ok_next = self._stack(stream, next_pos, oldest)
        valid &= ok_obs & ok_next

        zero = torch.zeros(b, dtype=torch.float32, device=dev)
        discount = torch.where(terminal, zero, self._gamma_pow[k])
        batch = Batch(
            obs=obs,
            action=self._actions_flat[self._slot(stream, seq)].to(torch.int64),
            ret=torch.where(valid, ret, zero),
            next_obs=next_obs,
            discount=torch.where(valid, discount, zero),
            weight=valid.to(torch.float32),
        )
        return batch, valid

    # ------------------------------------------------------------------ priorities
    def update_priorities(
        self,
        index: tuple[torch.Tensor, torch.Tensor],
        td_errors: torch.Tensor,
        valid: torch.Tensor | None = None,
    ) -> None:
        """Set the priorities of sampled candidates to ``(|td_errors| + eps) ** alpha``.

        ``index`` is the ``(stream, seq)`` pair ``sample(..., return_index=True)`` returned and
        ``td_errors`` has one value per candidate. Left unchanged: candidates whose slot has
        been overwritten since they were sampled (the slot belongs to a newer record now),
        FINAL records (they stay at 0), non-finite TD errors (a NaN would poison the whole
        tree), and, when ``valid`` (bool ``[B]``, e.g. ``batch.weight > 0``) is given, the
        invalid candidates, whose TD error is meaningless. Pass ``valid``: without it the
        newest records of a stream, sampled before their n-step window is written, get a
        priority from a garbage TD error. The max priority grows with the kept values.
        For a slot listed twice, one of its values wins (unspecified which). Tensor ops on
        the device only: no host sync.
        """
        if self._tree is None:
            raise RuntimeError("update_priorities needs a prioritized replay memory")
        dev = self.device
        stream, seq = (x.to(device=dev, dtype=torch.int64).reshape(-1) for x in index)
        td = td_errors.detach().to(device=dev, dtype=torch.float64).reshape(-1)
        if not stream.shape == seq.shape == td.shape:
            raise ValueError(f"index and td_errors differ in length: {stream.shape[0]}, {seq.shape[0]}, {td.shape[0]}")
        if td.numel() == 0:
            return
        count = self._count_dev[stream]
        slot = self._slot(stream, seq)
        keep = (seq >= count - self.capacity_per_stream) & (seq >= 0) & (seq < count)
        keep &= torch.isfinite(td) & ((self._flags_flat[slot] & FLAG_FINAL) == 0)
        if valid is not None:
            keep &= valid.to(device=dev, dtype=torch.bool).reshape(-1)
        new = (td.abs() + self.eps).pow(self.alpha)
        new = torch.where(keep, new, self._tree.get(slot))
        self._tree.update(slot, new)
        kept_max = torch.where(keep, new, torch.zeros_like(new)).amax()
        self._max_priority = torch.maximum(self._max_priority, kept_max)

    # ------------------------------------------------------------------ save / restore
    def save(self, path: str | os.PathLike[str], *, compresslevel: int = DEFAULT_COMPRESSLEVEL) -> None:
        """Write the whole memory state to ``path`` (atomically; see :mod:`~pipeline.learning.replay_store`).

        Members: ``count`` (int64 ``[num_streams]``: records ever added per stream, which fixes
        every stream's stored range ``[max(0, count - C), count)`` and its slots), ``rng_state``
        (uint8, the sampling generator), and per stream ``s`` the stored slots ``[0, fill)``
        (``fill = min(count, C)``) in slot order: ``frames_s`` (uint8 ``[fill, 84, 84]``),
        ``actions_s`` (uint8), ``rewards_s`` (float32), ``flags_s`` (uint8) and, when
        prioritized, ``priorities_s`` (float64) plus ``max_priority`` (float64 scalar). The JSON
        header holds the geometry, ``prioritized``, ``alpha``, ``beta``, ``eps``, ``inserted``
        and the RNG's device type. Only stored slots are written, so a part-filled memory
        saves small. Must not run concurrently with :meth:`add`. A CUDA memory is copied to
        the host one stream and field at a time.
        """
        n, c = self.num_streams, self.capacity_per_stream
        count = self._count.copy()
        header = dict(
            self.geometry,
            prioritized=self.prioritized,
            alpha=self.alpha,
            beta=self._beta,
            eps=self.eps,
            inserted=int(count.sum()),
            rng_device=self.device.type,
        )

        def arrays() -> Iterator[tuple[str, np.ndarray]]:
            yield "count", count
            yield "rng_state", self._generator.get_state().numpy()
            leaves = None
            if self._tree is not None:
                yield "max_priority", self._max_priority.cpu().numpy()
                leaves = self._tree.leaves()
            for s in range(n):
                fill = int(min(count[s], c))
                # On the CPU .cpu() is the tensor itself and .numpy() a view: no copy.
                yield f"frames_{s}", self._frames[s, :fill].cpu().numpy()
                yield f"actions_{s}", self._actions[s, :fill].cpu().numpy()
                yield f"rewards_{s}", self._rewards[s, :fill].cpu().numpy()
                yield f"flags_{s}", self._flags[s, :fill].cpu().numpy()
                if leaves is not None:
                    yield f"priorities_{s}", leaves[s * c : s * c + fill].cpu().numpy()

        write_replay_file(path, header, arrays(), compresslevel=compresslevel)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Replace this memory's whole state with the one saved in ``path``.

        The file's geometry (:attr:`geometry`) must equal this memory's. ``prioritized`` may
        differ: a uniform file restored into a prioritized memory gives every record the
        initial priority (FINAL records 0); a prioritized file restored into a uniform memory
        drops its priorities. ``alpha``, ``beta`` and ``eps`` stay this memory's (the trainer
        owns their schedule). The sampling RNG state is restored when the file was saved
        from a memory on the same device type (CPU and CUDA generators have different
        states); otherwise this memory keeps its own generator.

        Raises :class:`ReplayFileError` for a missing, corrupt or truncated file or a
        geometry mismatch. A geometry or header error leaves the memory untouched; an error
        while reading the records leaves it empty.
        """
        with ReplayReader(path) as reader:
            self._restore_from(reader)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        prioritized: bool | None = None,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
    ) -> ReplayMemory:
        """A new memory with the geometry saved in ``path``, restored from it.

        ``prioritized=None`` takes the file's. Raises :class:`ReplayFileError` like :meth:`restore`.
        """
        with ReplayReader(path) as reader:
            geo = _file_geometry(reader)
            memory = cls(
                geo["num_streams"] * geo["capacity_per_stream"],
                geo["num_streams"],
                frame_stack=geo["frame_stack"],
                n_step=geo["n_step"],
                gamma=geo["gamma"],
                device=device,
                seed=seed,
                prioritized=reader.header_value("prioritized", bool) if prioritized is None else prioritized,
                alpha=alpha,
                beta=beta,
                eps=eps,
            )
            memory._restore_from(reader)
        return memory

    def _restore_from(self, reader: ReplayReader) -> None:
        geo = _file_geometry(reader)
        if geo != self.geometry:
            raise reader.error(
                f"geometry mismatch: the file holds a replay of {_describe(geo)}, "
                f"this memory is {_describe(self.geometry)}"
            )
        n, c = self.num_streams, self.capacity_per_stream
        count = reader.read("count", np.int64, (n,))
        if (count < 0).any() or int(count.sum()) != reader.header_value("inserted", int):
            raise reader.error(f"inconsistent record counts {count.tolist()}")
        file_prioritized = reader.header_value("prioritized", bool)
        rng_state = None
        if reader.header_value("rng_device", str) == self.device.type:
            current = self._generator.get_state()
            rng_state = torch.from_numpy(reader.read("rng_state", np.uint8, tuple(current.shape)))
        max_priority = INITIAL_PRIORITY
        if self._tree is not None and file_prioritized:
            max_priority = float(reader.read("max_priority", np.float64, ()))
            if not (math.isfinite(max_priority) and max_priority > 0):
                raise reader.error(f"bad max_priority {max_priority}")

        # From here on an error leaves the memory empty, never half-restored. Storage is not
        # zeroed up front: the stored slots are overwritten and only the rest is zeroed below.
        self._reset_counters()
        try:
            fills = np.minimum(count, c)
            leaves = np.zeros(n * c, dtype=np.float64) if self._tree is not None else None
            for s in range(n):
                fill = int(fills[s])
                for name, storage in (
                    ("frames", self._frames),
                    ("actions", self._actions),
                    ("rewards", self._rewards),
                    ("flags", self._flags),
                ):
                    _read_tensor(reader, f"{name}_{s}", storage[s, :fill])
                    storage[s, fill:].zero_()  # as in a new memory: sampled stacks may read it
                if leaves is not None:
                    mine = leaves[s * c : s * c + fill]
                    if file_prioritized:
                        reader.read_into(f"priorities_{s}", mine)
                        if not (np.isfinite(mine).all() and (mine >= 0).all()):
                            raise reader.error(f"bad priorities in stream {s}")
                    else:
                        final = (self._flags[s, :fill].cpu().numpy() & FLAG_FINAL) != 0
                        mine[:] = np.where(final, 0.0, INITIAL_PRIORITY)
            if self._tree is not None:
                self._tree.set_leaves(torch.from_numpy(leaves))
                self._max_priority = torch.tensor(max_priority, dtype=torch.float64, device=self.device)
            self._count[:] = count
            self._count_dev.copy_(torch.from_numpy(count))
            if rng_state is not None:
                self._generator.set_state(rng_state)
        except BaseException:
            self._clear()
            raise

    def _reset_counters(self) -> None:
        """No records, no priorities, the initial max priority; the storage keeps its bytes."""
        self._count[:] = 0
        self._count_dev.zero_()
        if self._tree is not None:
            self._tree.clear()
        self._max_priority = torch.tensor(INITIAL_PRIORITY, dtype=torch.float64, device=self.device)

    def _clear(self) -> None:
        """Back to the state of a new memory (except the RNG): no records, zeroed storage."""
        self._reset_counters()
        for t in (self._frames, self._actions, self._rewards, self._flags):
            t.zero_()


def _file_geometry(reader: ReplayReader) -> dict[str, Any]:
    """The geometry in a replay file's header, type- and range-checked."""
    geo = {
        key: reader.header_value(key, int) for key in ("num_streams", "capacity_per_stream", "frame_stack", "n_step")
    }
    geo["gamma"] = float(reader.header_value("gamma", (int, float)))
    if min(geo["num_streams"], geo["capacity_per_stream"], geo["frame_stack"], geo["n_step"]) < 1:
        raise reader.error(f"bad geometry {_describe(geo)}")
    return geo


def _describe(geometry: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in geometry.items())


def _read_tensor(reader: ReplayReader, name: str, dst: torch.Tensor) -> None:
    """Read member ``name`` into the contiguous storage view ``dst`` (straight into it on the CPU)."""
    if dst.device.type == "cpu":
        reader.read_into(name, dst.numpy())
    else:
        dst.copy_(torch.from_numpy(reader.read(name, _NUMPY_DTYPES[dst.dtype], tuple(dst.shape))))


_NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float32: np.float32}
