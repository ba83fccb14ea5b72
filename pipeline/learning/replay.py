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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pipeline.transport.records import (
    FLAG_FINAL,
    FLAG_START,
    FLAG_TERMINATED,
    FLAG_TRUNCATED,
    FRAME_SHAPE,
    RECORD_DTYPE,
)

__all__ = ["Batch", "ReplayMemory"]


@dataclass
class Batch:
    """A sampled batch of n-step transitions (all tensors on the memory's device)."""

    obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t
    action: torch.Tensor  # int64 [B]
    ret: torch.Tensor  # float32 [B] sum_{j<k} gamma^j r_{t+j} (0 for invalid candidates)
    next_obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t+k
    discount: torch.Tensor  # float32 [B] gamma^k, 0 if TERMINATED within the k steps (0 if invalid)
    weight: torch.Tensor  # float32 [B] 1 valid sample, 0 invalid candidate


class ReplayMemory:
    """Per-stream circular replay memory of records with vectorized n-step sampling.

    ``sample(batch_size, return_index=True)`` returns ``(batch, (stream, seq))`` where
    ``stream`` and ``seq`` are int64 ``[B]`` tensors on the device naming each candidate's
    stream and absolute sequence number within that stream (0 = first record ever added
    to it), for tests and diagnostics.
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
    ) -> None:
        if num_streams < 1:
            raise ValueError("num_streams must be >= 1")
        if capacity // num_streams < 1:
            raise ValueError("capacity must be at least num_streams")
        if frame_stack < 1 or n_step < 1:
            raise ValueError("frame_stack and n_step must be >= 1")
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

    # ------------------------------------------------------------------ bookkeeping
    def __len__(self) -> int:
        return int(np.minimum(self._count, self.capacity_per_stream).sum())

    @property
    def inserted(self) -> int:
        return int(self._count.sum())

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for t in (self._frames, self._actions, self._rewards, self._flags, self._count_dev)
        )

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
        """Draw ``batch_size`` candidates uniformly over all stored positions.

        Returns a :class:`Batch`; invalid candidates carry ``weight == 0`` (and zero
        ``ret`` and ``discount``). With ``return_index=True`` returns
        ``(batch, (stream, seq))`` identifying each candidate's position.
        """
        dev = self.device
        c = self.capacity_per_stream
        b = batch_size

        count = self._count_dev
        fill = torch.clamp(count, max=c)
        cum = torch.cumsum(fill, 0)
        total = cum[-1]
        u = torch.rand(b, generator=self._generator, device=dev, dtype=torch.float64)
        flat = (u * total.to(torch.float64)).to(torch.int64)
        flat = torch.minimum(flat, torch.clamp(total - 1, min=0))
        stream = torch.searchsorted(cum, flat, right=True).clamp_(max=self.num_streams - 1)
        offset = flat - (cum[stream] - fill[stream])
        s_count = count[stream]
        oldest = s_count - fill[stream]
        seq = oldest + offset

        valid = (seq >= oldest) & (seq < s_count)
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
        if return_index:
            return batch, (stream, seq)
        return batch
