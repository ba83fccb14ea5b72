"""The versioned, double-buffered weights block the learner publishes to collectors.

Layout::

    header (128 B): version u64, active u64, epsilon f64, learner_step u64, writing u64,
                    stop u64, num_floats u64, frames u64, hold_frames u64, 7 words unused
    buffer 0: num_floats float32
    buffer 1: num_floats float32

A buffer holds the model's full ``state_dict`` (BatchNorm running statistics and
counters included) flattened to float32 in ``state_dict`` order; the torch side of that
(flattening, loading back in place) is :mod:`pipeline.learning.flat_state`, so this
module needs numpy only.

Publishing (one writer, the learner): store ``writing = v + 1``; write the flattened
state into buffer ``(v + 1) % 2`` (the one not active); store ``active``; store
``version = v + 1``.

Reading (any number of collectors): read ``version`` = v, copy buffer ``v % 2``, then
read ``writing``. The writer only touches buffer ``v % 2`` again for publish ``v + 2``,
and it announces that publish in ``writing`` before it starts writing; so the copy is
clean exactly when ``writing < v + 2``. Otherwise the reader copies again. This is the
"version moved by two" rule of the design, made exact by looking at when the writer
*starts* a publish rather than when it ends one.

The header also carries the exploration epsilon, the learner's update count, the run's
emulator frames when the weights were published (the evaluator's clock), the global
stop flag that asks collectors to finish, and ``hold_frames``: when it is set (not 0),
collectors wait while the published frames are at or past it. The evaluator sets it
(``eval_max_lag_frames``) so that training waits for an evaluation that is due rather
than running past it; it is one word, written whole, so no publish protocol is needed.
"""

from __future__ import annotations

import numpy as np

HEADER_BYTES = 128  # 16 words, 9 used: room to grow without moving the buffers again
VERSION, ACTIVE, EPSILON, LEARNER_STEP, WRITING, STOP, NUM_FLOATS, FRAMES, HOLD_FRAMES = range(9)


def block_bytes(num_floats: int) -> int:
    return HEADER_BYTES + 2 * 4 * num_floats


class WeightsBlock:
    """Views over a weights block; the same class serves the publisher and subscribers."""

    def __init__(self, buf: memoryview) -> None:
        self._words = np.frombuffer(buf, np.uint64, HEADER_BYTES // 8, 0)
        self._floats = np.frombuffer(buf, np.float64, HEADER_BYTES // 8, 0)
        self.num_floats = int(self._words[NUM_FLOATS])
        self.buffers = [
            np.frombuffer(buf, np.float32, self.num_floats, HEADER_BYTES + i * 4 * self.num_floats) for i in range(2)
        ]

    @classmethod
    def initialise(cls, buf: memoryview, num_floats: int) -> WeightsBlock:
        np.frombuffer(buf, np.uint64, HEADER_BYTES // 8, 0)[NUM_FLOATS] = num_floats
        return cls(buf)

    # -- header -------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return int(self._words[VERSION])

    @property
    def epsilon(self) -> float:
        return float(self._floats[EPSILON])

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._floats[EPSILON] = value

    @property
    def learner_step(self) -> int:
        return int(self._words[LEARNER_STEP])

    @property
    def frames(self) -> int:
        """The run's emulator frames when the newest weights were published."""
        return int(self._words[FRAMES])

    @property
    def stop_requested(self) -> bool:
        return bool(self._words[STOP])

    def request_stop(self) -> None:
        self._words[STOP] = 1

    @property
    def hold_frames(self) -> int:
        """Collectors wait while :attr:`frames` is at or past this (0 = never)."""
        return int(self._words[HOLD_FRAMES])

    @hold_frames.setter
    def hold_frames(self, value: int) -> None:
        self._words[HOLD_FRAMES] = max(0, int(value))

    @property
    def held(self) -> bool:
        """Whether collectors should wait now: a hold is set and the published frames reached it."""
        hold = self.hold_frames
        return hold > 0 and self.frames >= hold

    # -- publisher ----------------------------------------------------------------------
    def publish(
        self,
        flat: np.ndarray,
        *,
        learner_step: int | None = None,
        epsilon: float | None = None,
        frames: int | None = None,
    ) -> int:
        """Write a flattened float32 state into the inactive buffer and flip to it.

        :func:`pipeline.learning.flat_state.flatten_state` makes ``flat`` from a state_dict.
        """
        if flat.shape != (self.num_floats,):
            raise ValueError(f"weights of {flat.shape} do not fit a block of {self.num_floats} floats")
        version = self.version + 1
        self._words[WRITING] = version  # announce before touching the buffer
        target = version % 2
        self.buffers[target][:] = flat
        if epsilon is not None:
            self.epsilon = epsilon
        if learner_step is not None:
            self._words[LEARNER_STEP] = learner_step
        if frames is not None:
            self._words[FRAMES] = frames
        self._words[ACTIVE] = target
        self._words[VERSION] = version
        return version

    # -- subscriber ---------------------------------------------------------------------
    def read(self, out: np.ndarray, max_attempts: int = 1000) -> int:
        """Copy the latest complete weights into ``out``; return their version (0 = none yet)."""
        for _ in range(max_attempts):
            version = self.version
            if version == 0:
                return 0
            np.copyto(out, self.buffers[version % 2])
            if int(self._words[WRITING]) < version + 2:
                return version
        raise RuntimeError("weights kept changing during every copy attempt")

    def close(self) -> None:
        self._words = self._floats = None  # type: ignore[assignment]
        self.buffers = []
