"""The learner's compilation and warm-up: torch.compile once, fall back to eager on failure.

:class:`~pipeline.learning.learner.Learner` compiles its two pure tensor functions (target
computation and loss forward; AOTAutograd compiles the backward too) at its first
update, which :func:`warm_up` runs on random data before training starts:

- :func:`first_compiled_update`: compiles, runs the update, and on any compiler or
  backend failure restores the learner's state, emits one :class:`CompileFallbackWarning`
  naming the error and carries on in eager mode; a failure that a Ctrl-C caused (the
  compiler's own subprocess killed by the same SIGINT) is raised as
  ``KeyboardInterrupt`` instead, so an interrupted warm-up never turns into a run.
- :func:`warm_up`: a few updates on random data, then every piece of learner state (and
  the global torch RNG) put back exactly as it was.
- :func:`snapshot_state` / :func:`restore_state`: that state, copied and put back in place
  (parameter identities kept: the optimizer and the compiled graphs refer to them).
"""

from __future__ import annotations

import copy
import logging
import signal
import subprocess
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import nn

from pipeline.learning.replay import Batch


class CompileSettings(Protocol):
    """The learner settings compiling reads."""

    compile_backend: str
    compile_mode: str | None
    frame_stack: int


class Learner(Protocol):
    """What compiling and warming up touch of a :class:`pipeline.learning.learner.Learner`.

    A protocol rather than an import: the learner imports this module, and imports point
    one way (not even a type-checking import back).
    """

    settings: CompileSettings
    num_actions: int
    device: torch.device
    amp_dtype: torch.dtype | None
    compiled: bool
    updates: int
    online: nn.Module
    target: nn.Module
    acting: Any  # an ActingCopy or None
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    _compile_pending: bool
    _targets_fn: Callable[..., torch.Tensor]
    _loss_fn: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    _metric_sums: torch.Tensor
    _metric_updates: int

    def update(self, batch: Any) -> torch.Tensor: ...
    def _update_step(self, *tensors: torch.Tensor) -> torch.Tensor: ...
    def _targets_impl(self, *tensors: torch.Tensor) -> torch.Tensor: ...
    def _loss_impl(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


logger = logging.getLogger("pipeline.learning.learner")

# Enough updates to trigger the first compile (forward and backward graphs) and any
# recompile the second call might cause, cheap enough to be negligible in eager mode.
WARMUP_UPDATES = 3
_ERROR_TEXT_LIMIT = 500


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


def compiled(fn: Callable[..., Any], settings: CompileSettings) -> Callable[..., Any]:
    # dynamic=False: batch shapes are fixed in training; static-shape kernels are
    # faster, and a different micro-batch size just gets its own graph.
    return torch.compile(fn, backend=settings.compile_backend, mode=settings.compile_mode, dynamic=False)


def first_compiled_update(learner: Learner, tensors: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The learner's first update, with its functions compiled; eager if compiling fails."""
    learner._compile_pending = False
    snapshot = snapshot_state(learner)
    try:
        learner._targets_fn = compiled(learner._targets_impl, learner.settings)
        learner._loss_fn = compiled(learner._loss_impl, learner.settings)
        td_abs = learner._update_step(*tensors)
    except Exception as exc:  # any compiler/backend failure: fall back, do not crash
        restore_state(learner, snapshot)  # undo whatever the failed attempt changed
        learner._targets_fn = learner._targets_impl
        learner._loss_fn = learner._loss_impl
        learner.compiled = False
        if caused_by_interrupt(exc):
            raise KeyboardInterrupt from exc
        warnings.warn(
            f"torch.compile (backend={learner.settings.compile_backend!r}) failed, the "
            f"learner continues in eager mode (slower): {short_error(exc)}",
            CompileFallbackWarning,
            stacklevel=3,
        )
        logger.debug("torch.compile failure", exc_info=True)
        return learner._update_step(*tensors)
    learner.compiled = True
    return td_abs


def warm_up(learner: Learner, batch_size: int) -> float:
    """Compile (if enabled) by running a few updates on random data; restore all state.

    Online and target weights and BatchNorm buffers, optimizer and scaler state, the
    update counter, pending metrics and the global torch RNG are restored exactly.
    Use the training batch size so the compiled graphs match the real shapes.
    Returns the seconds spent.
    """
    start = time.perf_counter()
    snapshot = snapshot_state(learner)
    cpu_rng = torch.get_rng_state()
    batch = random_batch(learner.num_actions, learner.settings.frame_stack, batch_size)
    for _ in range(WARMUP_UPDATES):
        learner.update(batch)
    restore_state(learner, snapshot)
    torch.set_rng_state(cpu_rng)
    if learner.device.type == "cuda":
        torch.cuda.synchronize(learner.device)  # so the returned time includes the GPU work
    elapsed = time.perf_counter() - start
    logger.info("learner warmup: %.1f s, compiled=%s, amp_dtype=%s", elapsed, learner.compiled, learner.amp_dtype)
    return elapsed


def random_batch(num_actions: int, frame_stack: int, batch_size: int) -> Batch:
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


def snapshot_state(learner: Learner) -> dict[str, Any]:
    """A copy of everything an update changes (weights, buffers, optimizer, scaler, metrics)."""

    def clone_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in state.items()}

    return {
        "online": clone_tensors(learner.online.state_dict()),
        "target": clone_tensors(learner.target.state_dict()),
        "optimizer": copy.deepcopy(learner.optimizer.state_dict()),
        "scaler": copy.deepcopy(learner.scaler.state_dict()) if learner.scaler is not None else None,
        "updates": learner.updates,
        "metric_sums": learner._metric_sums.clone(),
        "metric_updates": learner._metric_updates,
        "acting": clone_tensors(learner.acting.state_dict()) if learner.acting is not None else None,
    }


def restore_state(learner: Learner, snapshot: dict[str, Any]) -> None:
    # load_state_dict copies in place, so parameter identities (which the optimizer
    # and the compiled graphs refer to) are preserved.
    learner.online.load_state_dict(snapshot["online"])
    learner.target.load_state_dict(snapshot["target"])
    learner.optimizer.load_state_dict(snapshot["optimizer"])
    if learner.scaler is not None and snapshot["scaler"] is not None:
        learner.scaler.load_state_dict(snapshot["scaler"])
    learner.updates = snapshot["updates"]
    learner._metric_sums.copy_(snapshot["metric_sums"])
    learner._metric_updates = snapshot["metric_updates"]
    if learner.acting is not None:
        learner.acting.load_state_dict(snapshot["acting"])
    learner.optimizer.zero_grad(set_to_none=True)
