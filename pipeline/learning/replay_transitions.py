"""Index arithmetic of a replay memory's rings: slots, uniform draws, frame stacks and n-step targets.

A :class:`TransitionSampler` reads the storage of a
:class:`~pipeline.learning.replay.ReplayMemory` (``C`` records per stream, the ``seq``-th
record of a stream in slot ``stream * C + seq % C``) and turns candidate positions
``(stream, seq)`` into a :class:`Batch` of n-step transitions. It never writes the
storage; the memory writes it and owns the sampling RNG. :class:`Batch` is defined here,
next to the code that fills it, and re-exported by :mod:`~pipeline.learning.replay`
(import it from there).

Sampling is fully vectorized on the device, with no host synchronisation: candidates are
drawn uniformly over all stored positions of all streams, their validity and n-step
targets are computed with loops over the small constants ``n_step`` and ``frame_stack``
only, and invalid candidates are marked invalid instead of being redrawn.

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

import torch

from pipeline.transport.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, FLAG_TRUNCATED

__all__ = ["Batch", "TransitionSampler"]


@dataclass
class Batch:
    """A sampled batch of n-step transitions (all tensors on the memory's device)."""

    obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t
    action: torch.Tensor  # int64 [B]
    ret: torch.Tensor  # float32 [B] sum_{j<k} gamma^j r_{t+j} (0 for invalid candidates)
    next_obs: torch.Tensor  # uint8 [B, S, 84, 84] stacked state at t+k
    discount: torch.Tensor  # float32 [B] gamma^k, 0 if TERMINATED within the k steps (0 if invalid)
    weight: torch.Tensor  # float32 [B] 1 valid sample, 0 invalid candidate (the loss's mask)


class TransitionSampler:
    """Vectorized n-step sampling over the per-stream rings of a replay memory.

    The tensors passed in are the memory's flat storage views (``[num_streams * C, ...]``)
    and its on-device per-stream record counts. They are held, not copied: the memory
    only ever writes them in place, so this sampler always sees the current records.
    """

    def __init__(
        self,
        *,
        frames: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        flags: torch.Tensor,
        count: torch.Tensor,
        capacity_per_stream: int,
        frame_stack: int,
        n_step: int,
        gamma: float,
        device: torch.device,
    ) -> None:
        self._frames = frames
        self._actions = actions
        self._rewards = rewards
        self._flags = flags
        self._count = count
        self.capacity_per_stream = capacity_per_stream
        self.num_streams = count.shape[0]
        self.frame_stack = frame_stack
        self.n_step = n_step
        self.gamma = gamma
        self.device = device
        # discount = gamma^k is a gather from this table (k varies per candidate).
        self._gamma_pow = torch.tensor([gamma**i for i in range(n_step + 1)], dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ positions
    def slot(self, stream: torch.Tensor, seq: torch.Tensor) -> torch.Tensor:
        """Storage slot of record ``seq`` of ``stream`` (whether or not it is still stored)."""
        return stream * self.capacity_per_stream + torch.remainder(seq, self.capacity_per_stream)

    def draw_uniform(self, b: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``b`` candidates ``(stream, seq)`` uniform over all stored positions of all streams."""
        c = self.capacity_per_stream
        count = self._count
        fill = torch.clamp(count, max=c)
        cum = torch.cumsum(fill, 0)
        total = cum[-1]
        u = torch.rand(b, generator=generator, device=self.device, dtype=torch.float64)
        flat = (u * total.to(torch.float64)).to(torch.int64)
        # An empty memory (total 0) maps every draw to position 0, which is then invalid.
        flat = torch.minimum(flat, torch.clamp(total - 1, min=0))
        stream = torch.searchsorted(cum, flat, right=True).clamp_(max=self.num_streams - 1)
        offset = flat - (cum[stream] - fill[stream])
        oldest = count[stream] - fill[stream]
        return stream, oldest + offset

    # ------------------------------------------------------------------ transitions
    def stack(self, stream: torch.Tensor, pos: torch.Tensor, oldest: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Frames of the stacks ending at ``pos`` and whether every frame they need is still stored."""
        s = self.frame_stack
        idx = torch.empty((pos.shape[0], s), dtype=torch.int64, device=self.device)
        cur = pos
        ok = pos >= oldest
        idx[:, s - 1] = self.slot(stream, cur)
        for j in range(1, s):
            at_start = (self._flags[self.slot(stream, cur)] & FLAG_START) != 0
            cur = torch.where(at_start, cur, cur - 1)  # stay on the START frame: repeat it
            ok &= cur >= oldest
            idx[:, s - 1 - j] = self.slot(stream, cur)
        return self._frames[idx], ok

    def transitions(self, stream: torch.Tensor, seq: torch.Tensor) -> Batch:
        """The batch for candidates ``(stream, seq)``, as the module docstring defines its
        transitions; ``weight`` is each candidate's validity (1 or 0)."""
        dev = self.device
        b = stream.shape[0]

        s_count = self._count[stream]
        oldest = s_count - torch.clamp(s_count, max=self.capacity_per_stream)

        valid = (seq >= oldest) & (seq < s_count)
        flags_t = self._flags[self.slot(stream, seq)]
        valid &= (flags_t & FLAG_FINAL) == 0

        ret = torch.zeros(b, dtype=torch.float32, device=dev)
        k = torch.zeros(b, dtype=torch.int64, device=dev)
        next_pos = seq.clone()
        terminal = torch.zeros(b, dtype=torch.bool, device=dev)
        # Candidates whose window is still open at step j; masks, not early exits, so the
        # loop is over n_step only and the shapes never depend on the data.
        active = valid.clone()
        for j in range(self.n_step):
            pj = seq + j
            pn = pj + 1
            written = pn < s_count  # needed: next frame, or to know whether t+j is cut
            valid &= written | ~active
            active &= written
            f_j = self._flags[self.slot(stream, pj)]
            f_n = self._flags[self.slot(stream, pn)]
            cut = active & ((f_n & FLAG_START) != 0)
            if j == 0:
                valid &= ~cut  # last record before a cut: no next observation
            else:
                next_pos = torch.where(cut, pj, next_pos)
                k = torch.where(cut, j, k)
            active &= ~cut
            r = self._rewards[self.slot(stream, pj)]
            ret = ret + torch.where(active, r * (self.gamma**j), torch.zeros_like(r))
            terminal |= active & ((f_j & FLAG_TERMINATED) != 0)
            if j == self.n_step - 1:
                ends = active
            else:
                ends = active & (((f_j & (FLAG_TERMINATED | FLAG_TRUNCATED)) != 0) | ((f_n & FLAG_FINAL) != 0))
            next_pos = torch.where(ends, pn, next_pos)
            k = torch.where(ends, j + 1, k)
            active &= ~ends

        obs, ok_obs = self.stack(stream, seq, oldest)
        next_obs, ok_next = self.stack(stream, next_pos, oldest)
        valid &= ok_obs & ok_next

        zero = torch.zeros(b, dtype=torch.float32, device=dev)
        discount = torch.where(terminal, zero, self._gamma_pow[k])
        return Batch(
            obs=obs,
            action=self._actions[self.slot(stream, seq)].to(torch.int64),
            ret=torch.where(valid, ret, zero),
            next_obs=next_obs,
            discount=torch.where(valid, discount, zero),
            weight=valid.to(torch.float32),
        )
