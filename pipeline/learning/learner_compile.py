"""The learner's compiled step: torch.compile once, fall back to eager on failure.

:class:`CompiledStep` owns the compile state of a
:class:`~pipeline.learning.learner.Learner`: its two pure tensor functions (the target
computation and the loss forward, :mod:`~pipeline.learning.update`; AOTAutograd compiles
the loss's backward too), eager until the first update, then compiled, or eager again for
good when compiling failed. The learner runs every update through :meth:`CompiledStep.run`,
which at the first one compiles, runs the update, and on any compiler or backend failure
puts the learner's state back (through the ``save``/``restore`` pair it is handed), emits
one :class:`CompileFallbackWarning` naming the error and runs the update in eager mode; a
failure that a Ctrl-C caused (the compiler's own subprocess killed by the same SIGINT) is
raised as ``KeyboardInterrupt`` instead, so an interrupted warm-up never turns into a run.

:func:`random_batch` is the warm-up's data: a few updates on it before training compile
the step with the training batch's shapes.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from pipeline.learning.replay import Batch

__all__ = ["WARMUP_UPDATES", "CompileFallbackWarning", "CompiledStep", "caused_by_interrupt", "random_batch"]

logger = logging.getLogger("pipeline.learning.learner")

# Enough updates to trigger the first compile (forward and backward graphs) and any
# recompile the second call might cause, cheap enough to be negligible in eager mode.
WARMUP_UPDATES = 3
_ERROR_TEXT_LIMIT = 500

Result = TypeVar("Result")
Saved = TypeVar("Saved")


class CompileFallbackWarning(RuntimeWarning):
    """``torch.compile`` failed; the learner fell back to eager execution."""


def short_error(exc: BaseException) -> str:
    # Dynamo errors embed long traces; the warning should stay one readable paragraph.
    text = f"{type(exc).__name__}: {exc}".strip()
    first_lines = " ".join(text.splitlines()[:3])
    if len(first_lines) > _ERROR_TEXT_LIMIT:
        first_lines = first_lines[: _ERROR_TEXT_LIMIT - 3] + "..."
    return first_lines


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a compile failure comes from a Ctrl-C rather than from the compiler.

    A terminal's Ctrl-C reaches the whole process group: the C++ compiler that inductor
    runs dies of the same SIGINT, and torch reports that as a compile error (wrapped in
    BackendCompilerFailed, an ``Exception``), which the eager fallback would otherwise
    take for a broken compiler and train on.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        if isinstance(current, subprocess.CalledProcessError) and current.returncode in (-signal.SIGINT, 130):
            return True
        current = current.__cause__ or current.__context__
    return False


class CompiledStep:
    """The targets and loss functions an update calls, compiled at the first update or eager.

    Args:
        targets: the eager target computation (no autograd).
        loss: the eager loss forward (its backward is compiled with it).
        compile: whether to compile them at the first :meth:`run`.
        backend: the ``torch.compile`` backend.
    """

    def __init__(
        self, targets: Callable[..., torch.Tensor], loss: Callable[..., Any], *, compile: bool, backend: str
    ) -> None:
        self._eager = (targets, loss)
        self.targets = targets  # what an update calls: eager, or compiled after the first run
        self.loss = loss
        self.backend = backend
        self.pending = compile  # compilation is attempted once, at the first run
        self.compiled = False

    def run(
        self, update: Callable[[], Result], *, save: Callable[[], Saved], restore: Callable[[Saved], None]
    ) -> Result:
        """``update()``, which calls :attr:`targets` and :attr:`loss`; the first time with
        them compiled, and eager after one warning if that fails (``restore(save())`` undoes
        what the failed attempt changed)."""
        if not self.pending:
            return update()
        self.pending = False
        saved = save()
        try:
            # dynamic=False: batch shapes are fixed in training; static-shape kernels are
            # faster, and a different micro-batch size just gets its own graph.
            self.targets = torch.compile(self._eager[0], backend=self.backend, dynamic=False)
            self.loss = torch.compile(self._eager[1], backend=self.backend, dynamic=False)
            result = update()
        except Exception as exc:  # any compiler/backend failure: fall back, do not crash
            restore(saved)
            self.targets, self.loss = self._eager
            if caused_by_interrupt(exc):
                raise KeyboardInterrupt from exc
            warnings.warn(
                f"torch.compile (backend={self.backend!r}) failed, the learner continues in "
                f"eager mode (slower): {short_error(exc)}",
                CompileFallbackWarning,
                stacklevel=3,
            )
            logger.debug("torch.compile failure", exc_info=True)
            return update()
        self.compiled = True
        return result


def random_batch(num_actions: int, frame_stack: int, batch_size: int) -> Batch:
    """A batch of random data in the replay's shapes, the same every time."""
    # A private generator so warmup does not move the global RNG streams.
    gen = torch.Generator().manual_seed(0)
    shape = (batch_size, frame_stack, 84, 84)
    return Batch(
        obs=torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        action=torch.randint(0, num_actions, (batch_size,), generator=gen),
        ret=torch.randn(batch_size, generator=gen),
        next_obs=torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        discount=torch.full((batch_size,), 0.99),  # any discount does: warmup's updates are undone
        weight=torch.ones(batch_size),
    )
