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

Sampling (:mod:`~pipeline.learning.replay_transitions`, which also states the exact rules
for n-step targets, stacks and validity) is fully vectorized on ``device``, with no host
synchronisation: candidates are drawn uniformly over all stored positions of all streams,
and invalid candidates are returned with ``weight == 0`` instead of being redrawn.
There is no prioritized sampling: the learning benchmark never measured it on its own
(only once, together with gamma 0.9, on an older default), so uniform draws are the only
ones.

Save and restore (:meth:`ReplayMemory.save`, :meth:`ReplayMemory.restore`,
:meth:`ReplayMemory.load`): the stored records of every stream, the per-stream counts
and the sampling RNG state, in a compressed zip written atomically (format in
:mod:`pipeline.learning.replay_store`). A restored memory samples exactly what the saved
one would have. Files saved while prioritized replay existed still restore: the reader
only looks up the members it needs, so their priorities and exponents are never read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from pipeline.learning.replay_store import DEFAULT_COMPRESSLEVEL, ReplayFileError, ReplayReader, write_replay_file
from pipeline.learning.replay_transitions import Batch, TransitionSampler
from pipeline.transport.records import FRAME_SHAPE, RECORD_DTYPE

__all__ = ["Batch", "ReplayFileError", "ReplayMemory"]


class ReplayMemory:
    """Per-stream circular replay memory of records with vectorized n-step sampling.

    ``sample(batch_size, return_index=True)`` returns ``(batch, (stream, seq))`` where
    ``stream`` and ``seq`` are int64 ``[B]`` tensors on the device naming each candidate's
    stream and absolute sequence number within that stream (0 = first record ever added
    to it).
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
        self._sampler = TransitionSampler(
            frames=self._frames_flat,
            actions=self._actions_flat,
            rewards=self._rewards_flat,
            flags=self._flags_flat,
            count=self._count_dev,
            capacity_per_stream=c,
            frame_stack=frame_stack,
            n_step=n_step,
            gamma=self.gamma,
            device=dev,
        )
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
        tensors = [self._frames, self._actions, self._rewards, self._flags, self._count_dev]
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
    def sample(
        self, batch_size: int, return_index: bool = False
    ) -> Batch | tuple[Batch, tuple[torch.Tensor, torch.Tensor]]:
        """Draw ``batch_size`` candidates uniformly over all stored positions.

        Returns a :class:`Batch`; invalid candidates carry ``weight == 0`` (and zero
        ``ret`` and ``discount``). With ``return_index=True`` returns
        ``(batch, (stream, seq))`` identifying each candidate's position.
        """
        stream, seq = self._sampler.draw_uniform(batch_size, self._generator)
        batch = self._sampler.transitions(stream, seq)
        if return_index:
            return batch, (stream, seq)
        return batch

    def sample_states(self, count: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``count`` stacked states (uint8 ``[N, S, 84, 84]``) drawn uniformly over all
        stored positions.

        These are the states a BatchNorm layer's statistics are estimated on
        (:mod:`~pipeline.learning.batchnorm_stats`) and the steadiness probe's
        (:mod:`~pipeline.learning.steadiness`), which stand for the replay as a whole.
        Invalid candidates are kept, as a training batch keeps them in its normalisation.
        ``generator`` (on the memory's device) draws them instead of the memory's own, so
        that measuring does not change which batches training draws.
        """
        stream, seq = self._sampler.draw_uniform(count, generator or self._generator)
        return self._sampler.transitions(stream, seq).obs

    # ------------------------------------------------------------------ save / restore
    def save(self, path: str | os.PathLike[str], *, compresslevel: int = DEFAULT_COMPRESSLEVEL) -> None:
        """Write the whole memory state to ``path`` (atomically; see :mod:`~pipeline.learning.replay_store`).

        Members: ``count`` (int64 ``[num_streams]``: records ever added per stream, which fixes
        every stream's stored range ``[max(0, count - C), count)`` and its slots), ``rng_state``
        (uint8, the sampling generator), and per stream ``s`` the stored slots ``[0, fill)``
        (``fill = min(count, C)``) in slot order: ``frames_s`` (uint8 ``[fill, 84, 84]``),
        ``actions_s`` (uint8), ``rewards_s`` (float32) and ``flags_s`` (uint8). The JSON header
        holds the geometry, ``inserted`` and the RNG's device type. Only stored slots are
        written, so a part-filled memory saves small. Must not run concurrently with
        :meth:`add`. A CUDA memory is copied to the host one stream and field at a time.
        """
        n, c = self.num_streams, self.capacity_per_stream
        count = self._count.copy()
        header = dict(self.geometry, inserted=int(count.sum()), rng_device=self.device.type)

        def arrays() -> Iterator[tuple[str, np.ndarray]]:
            yield "count", count
            yield "rng_state", self._generator.get_state().numpy()
            for s in range(n):
                fill = int(min(count[s], c))
                # On the CPU .cpu() is the tensor itself and .numpy() a view: no copy.
                yield f"frames_{s}", self._frames[s, :fill].cpu().numpy()
                yield f"actions_{s}", self._actions[s, :fill].cpu().numpy()
                yield f"rewards_{s}", self._rewards[s, :fill].cpu().numpy()
                yield f"flags_{s}", self._flags[s, :fill].cpu().numpy()

        write_replay_file(path, header, arrays(), compresslevel=compresslevel)

    def restore(self, path: str | os.PathLike[str]) -> None:
        """Replace this memory's whole state with the one saved in ``path``.

        The file's geometry (:attr:`geometry`) must equal this memory's. A file saved with
        prioritized replay on restores its records alone (the header's ``prioritized``,
        ``alpha``, ``beta`` and ``eps`` and the ``max_priority`` and ``priorities_s``
        members are not read). The sampling RNG state is restored when the file was saved
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
    ) -> ReplayMemory:
        """A new memory with the geometry saved in ``path``, restored from it.

        Raises :class:`ReplayFileError` like :meth:`restore`.
        """
        with ReplayReader(path) as reader:
            geo = reader.geometry()
            memory = cls(
                geo["num_streams"] * geo["capacity_per_stream"],
                geo["num_streams"],
                frame_stack=geo["frame_stack"],
                n_step=geo["n_step"],
                gamma=geo["gamma"],
                device=device,
                seed=seed,
            )
            memory._restore_from(reader)
        return memory

    def _restore_from(self, reader: ReplayReader) -> None:
        reader.require_geometry(self.geometry)
        n, c = self.num_streams, self.capacity_per_stream
        count = reader.read("count", np.int64, (n,))
        if (count < 0).any() or int(count.sum()) != reader.header_value("inserted", int):
            raise reader.error(f"inconsistent record counts {count.tolist()}")
        rng_state = None
        if reader.header_value("rng_device", str) == self.device.type:
            current = self._generator.get_state()
            rng_state = torch.from_numpy(reader.read("rng_state", np.uint8, tuple(current.shape)))

        # From here on an error leaves the memory empty, never half-restored. Storage is not
        # zeroed up front: the stored slots are overwritten and only the rest is zeroed below.
        self._reset_counters()
        try:
            fills = np.minimum(count, c)
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
            self._count[:] = count
            self._count_dev.copy_(torch.from_numpy(count))
            if rng_state is not None:
                self._generator.set_state(rng_state)
        except BaseException:
            self._clear()
            raise

    def _reset_counters(self) -> None:
        """No records; the storage keeps its bytes."""
        self._count[:] = 0
        self._count_dev.zero_()

    def _clear(self) -> None:
        """Back to the state of a new memory (except the RNG): no records, zeroed storage."""
        self._reset_counters()
        for t in (self._frames, self._actions, self._rewards, self._flags):
            t.zero_()


def _read_tensor(reader: ReplayReader, name: str, dst: torch.Tensor) -> None:
    """Read member ``name`` into the contiguous storage view ``dst`` (straight into it on the CPU)."""
    if dst.device.type == "cpu":
        reader.read_into(name, dst.numpy())
    else:
        dst.copy_(torch.from_numpy(reader.read(name, _NUMPY_DTYPES[dst.dtype], tuple(dst.shape))))


_NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float32: np.float32}
