"""The DQN learner: the networks, the optimizer and the state of Double-DQN updates of a
BatchNorm Q-network, with AMP and torch.compile.

One ``Learner.update(batch)`` is one optimizer step whose math is
:mod:`~pipeline.learning.update`, read top to bottom there: the targets (Double DQN's
selection, QR-DQN's quantiles at it), the loss, the step and the acting copy's average.
This module holds what that math runs on and where:

- the batch is moved host-to-device once (pinned + non-blocking when the learner is on
  CUDA and the batch on CPU; no copy at all on a CPU learner: :mod:`~pipeline.learning.learner_device`);
- ``torch.compile`` (``settings.compile``) compiles the targets and the loss forward (and
  so the loss's backward) at the first update, which ``warmup`` runs on random data; a
  failure falls back to eager with one ``CompileFallbackWarning``
  (:class:`~pipeline.learning.learner_compile.CompiledStep`);
- mixed precision (``settings.amp``): bf16 autocast on CPU; on CUDA bf16 when supported,
  else fp16 with a ``GradScaler``. Autocast covers the loss's forward and backward, the
  bulk of an update; the no-grad target forwards run in float32, and the network's output
  layers always do (``QNetwork``). Parameters and optimizer state stay float32;
- every ``target_sync_updates`` steps a full copy ``target.load_state_dict(online.state_dict())``
  (BatchNorm buffers too).

BatchNorm statistics (:mod:`~pipeline.learning.batchnorm_stats`): the online net's running
statistics are frozen between calibrations (momentum 0), and :meth:`Learner.calibrate`
re-estimates them with the current weights over the states its owner hands it ("precise
BN"): the trainer hands it uniform replay states before every publish, and to every update
that copies the target (:attr:`Learner.copies_target_next`), which re-estimates them on
those before the copy. Every eval-mode forward (the target, the Double-DQN argmax, the
acting copies, the evaluator) then normalises with statistics of the weights it runs. The
learner never draws states itself: it does not know the replay.

BatchNorm modes (why):

* The online net is in **train** mode for the loss forward on ``s``: batch statistics
  are what BatchNorm is trained with; the running statistics stay frozen (momentum 0)
  between calibrations, so the forward leaves them alone.
* The target net is always in **eval** mode: its running statistics are a frozen copy
  from the last sync, so targets do not depend on which samples share the batch.
* The online net's next-state argmax runs in **eval** mode (running statistics, no
  gradient). That makes ``a*`` the action the acting copy (which also runs in eval mode
  with the published statistics) would choose, keeps the argmax independent of the
  batch composition.

Known limitation: samples with weight 0 do not contribute to the loss or, through the
loss, to the gradient, but their observations still enter BatchNorm's batch statistics
of the train-mode forward. Invalid rows must hold finite values (``0 * inf`` is NaN).

With ``acting_tau`` the published weights are an :class:`~pipeline.learning.acting_copy.ActingCopy`,
a moving average of the online ones with statistics calibrated for its own weights.

Metrics are accumulated in device tensors; ``pop_metrics`` does the only host sync.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from models import QNetwork
from pipeline.learning.acting_copy import ActingCopy
from pipeline.learning.batchnorm_stats import freeze_running_statistics, preserved_statistics, recalibrate
from pipeline.learning.learner_compile import WARMUP_UPDATES, CompiledStep, random_batch
from pipeline.learning.learner_device import BatchLike, batch_to_device, pick_amp_dtype, resolve_device, to_device
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.update import (
    ADAM_EPS,
    double_dqn_targets,
    huber_loss,
    optimizer_step,
    quantile_huber_loss,
    quantile_targets,
    targets,
)

logger = logging.getLogger(__name__)

# States a calibration re-estimates the BatchNorm statistics on: uint8 [N, S, 84, 84].
CalibrationStates = torch.Tensor

# Order of the per-update statistics kept in ``Learner._metric_sums``.
_LOSS, _TD_ABS, _Q_SUM, _WEIGHT, _GRAD_NORM = range(5)


class Learner:
    """Owns the online/target Q-networks, the optimizer and the update step."""

    def __init__(self, num_actions: int, settings: LearnerSettings) -> None:
        if settings.bn_calibration_states < 1:
            raise ValueError(f"bn_calibration_states must be >= 1 (precise BN), got {settings.bn_calibration_states}")
        if settings.target_sync_updates < 1:
            raise ValueError(f"target_sync_updates must be >= 1, got {settings.target_sync_updates}")
        self.settings = settings
        self.num_actions = num_actions
        self.device: torch.device = resolve_device(settings.device)

        self.online: nn.Module = self._network()
        self.online.to(self.device).train()
        self.target: nn.Module = self._network()
        self.target.to(self.device)
        self.target.load_state_dict(self.online.state_dict())
        self.target.eval()
        self.target.requires_grad_(False)

        # Fused Adam: one kernel instead of ~10 elementwise ops per parameter (the
        # per-op version cost ~5 ms of a ~45 ms fp32 batch-32 update on a 2-core CPU).
        # The fused CPU kernel assumes parameters and their Adam state share a memory
        # layout, which holds because the parameters stay contiguous.
        self.optimizer = torch.optim.Adam(
            self.online.parameters(),
            lr=settings.learning_rate,
            eps=ADAM_EPS,
            fused=self.device.type in ("cpu", "cuda"),
        )
        self.amp_dtype: torch.dtype | None = pick_amp_dtype(self.device, settings.amp)
        # bf16 has fp32's exponent range, so only fp16 needs loss scaling.
        self.scaler: torch.amp.GradScaler | None = (
            torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        )
        self.updates: int = 0

        self._params: list[nn.Parameter] = list(self.online.parameters())
        # The targets and the loss forward, compiled at the first update (normally inside
        # warmup()) or eager.
        self.step = CompiledStep(self._targets, self._loss, compile=settings.compile, backend=settings.compile_backend)
        self._metric_sums = torch.zeros(5, dtype=torch.float32, device=self.device)
        self._metric_updates: int = 0
        # Precise BN: how many states a calibration wants, and when the last one ran.
        self.calibration_count: int = settings.bn_calibration_states
        self.calibrated_at: int = -1  # the update count of the last calibration (-1: none yet)
        # Before any compilation: the compiled graphs are specialised on the momentum.
        freeze_running_statistics(self.online)
        # What the collectors and the evaluator play: the online net, or an average of it.
        self.acting: ActingCopy | None = ActingCopy(self.online, settings.acting_tau) if settings.acting_tau else None

    # ------------------------------------------------------------------ public API

    def update(self, batch: BatchLike, calibration_states: CalibrationStates | None = None) -> None:
        """One optimizer step on ``batch`` (no host sync; :meth:`pop_metrics` reads what it measured).

        ``calibration_states`` (replay states, see :meth:`calibrate`) are what an
        update that copies the target (:attr:`copies_target_next`) re-estimates the
        statistics on after its step and before the copy; an update that copies without
        them copies the statistics as they are.
        """
        tensors = self._batch_to_device(batch)
        self.step.run(
            lambda: self._update_step(*tensors, calibration_states=calibration_states),
            save=self._snapshot,
            restore=self._restore,
        )

    @property
    def compiled(self) -> bool:
        """Whether the update runs compiled functions (False before the first update)."""
        return self.step.compiled

    def warmup(self, batch_size: int) -> float:
        """Compile (if enabled) by running a few updates on random data; restore all state.

        Online and target weights and BatchNorm buffers, optimizer and scaler state, the
        update counter, pending metrics and the global torch RNG are restored exactly.
        Use the training batch size so the compiled graphs match the real shapes.
        Returns the seconds spent.
        """
        start = time.perf_counter()
        batch = random_batch(self.num_actions, self.settings.frame_stack, batch_size)
        with self.undone():
            for _ in range(WARMUP_UPDATES):
                self.update(batch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # so the returned time includes the GPU work
        elapsed = time.perf_counter() - start
        logger.info("learner warmup: %.1f s, compiled=%s, amp_dtype=%s", elapsed, self.compiled, self.amp_dtype)
        return elapsed

    @contextlib.contextmanager
    def undone(self) -> Iterator[None]:
        """Updates run inside are undone on the way out: weights and BatchNorm buffers,
        optimizer and scaler state, the update counter, pending metrics and the global
        torch RNG are put back exactly (a warm-up, a measurement)."""
        saved = self._snapshot()
        cpu_rng = torch.get_rng_state()
        try:
            yield
        finally:
            self._restore(saved)
            torch.set_rng_state(cpu_rng)

    def pop_metrics(self) -> dict[str, float]:
        """Means since the last pop: loss, |TD error|, Q of taken actions, grad norm.

        |TD| and Q are averaged over valid (weight > 0) samples, loss and grad norm over
        updates. Returns ``{}`` when no update happened since the last pop. This is the
        only place the learner synchronises with the device.
        """
        if self._metric_updates == 0:
            return {}
        sums = self._metric_sums.tolist()  # the single host sync
        count = self._metric_updates
        self._metric_sums.zero_()
        self._metric_updates = 0
        valid = max(sums[_WEIGHT], 1.0)
        return {
            "loss": sums[_LOSS] / count,
            "td_abs": sums[_TD_ABS] / valid,
            "q_mean": sums[_Q_SUM] / valid,
            "grad_norm": sums[_GRAD_NORM] / count,
            "updates": float(count),
        }

    @property
    def published_net(self) -> nn.Module:
        """The network whose weights are published: the acting copy, or the online net."""
        return self.acting.net if self.acting is not None else self.online

    def publishable_state(self) -> dict[str, torch.Tensor]:
        """The full ``state_dict`` of :attr:`published_net` (BatchNorm buffers too) as CPU
        float32 copies.

        ``num_batches_tracked`` becomes float32 as well (exact below 2**24 updates; BN
        ignores it when a momentum is set); ``load_state_dict`` casts it back.
        """
        return {
            name: value.detach().to(device="cpu", dtype=torch.float32, copy=True)
            for name, value in self.published_net.state_dict().items()
        }

    @property
    def copies_target_next(self) -> bool:
        """Whether the next update ends with a copy of the online net to the target (the
        update to hand calibration states to)."""
        return (self.updates + 1) % self.settings.target_sync_updates == 0

    def sync_target(self, calibration_states: CalibrationStates | None = None) -> None:
        """Copy every online parameter and buffer (BatchNorm statistics too) to the target,
        after a calibration of the statistics on ``calibration_states`` when given."""
        if calibration_states is not None:
            self.calibrate(calibration_states)
        self.target.load_state_dict(self.online.state_dict())

    def calibrate(self, states: CalibrationStates) -> bool:
        """Re-estimate the online net's BatchNorm statistics over ``states`` (precise BN):
        ``obs uint8 [N, S, 84, 84]``, e.g. uniform replay states, in chunks of
        ``calibration_chunk``; the acting copy's too, with its own weights, on the same
        states (each chunk converted once for both). Every layer's running mean and
        variance become the averages of the chunks' batch means and unbiased variances
        (:func:`~pipeline.learning.batchnorm_stats.recalibrate`).

        Returns True: it always does.
        """
        chunks = self._to_device(states).split(self.settings.calibration_chunk)
        recalibrate(self._nets_with_statistics(), chunks)
        self.calibrated_at = self.updates
        return True

    @contextlib.contextmanager
    def statistics_for_saving(self, states: CalibrationStates) -> Iterator[None]:
        """Inside, the online net and the acting copy hold statistics re-estimated over
        ``states`` (as :meth:`calibrate` does, ``calibrated_at`` at this update); on the
        way out the statistics and ``calibrated_at`` that training uses are put back.

        A copy that is saved (a mark, a checkpoint) is played as it is for as long as
        anyone plays it, so its statistics are estimated over more states than a publish
        can afford every hundred updates; restoring the live ones keeps what is trained
        (the Double-DQN argmax, the next target copy) the same whether or when one is saved.
        """
        calibrated_at = self.calibrated_at
        with contextlib.ExitStack() as live:
            for net in self._nets_with_statistics():
                live.enter_context(preserved_statistics(net))
            try:
                self.calibrate(states)
                yield
            finally:
                self.calibrated_at = calibrated_at

    def state_dict(self) -> dict[str, Any]:
        """Online, target, optimizer and scaler state plus the update counter (live refs),
        and the update count the online net's BatchNorm statistics were estimated at
        (``calibrated_at``, a record: loading does not restore it, so a loaded learner's
        first calibration always runs)."""
        return {
            "online": self.online.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "updates": self.updates,
            "calibrated_at": self.calibrated_at,
            "acting": self.acting.state_dict() if self.acting is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (tensors may live on any device)."""
        self.online.load_state_dict(state["online"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.updates = int(state["updates"])
        if self.acting is not None:  # a checkpoint without one starts the average at the online net
            self.acting.load_state_dict(state.get("acting") or state["online"])

    # ------------------------------------------------------------------ the step

    def _update_step(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        ret: torch.Tensor,
        next_obs: torch.Tensor,
        discount: torch.Tensor,
        weight: torch.Tensor,
        *,
        calibration_states: CalibrationStates | None = None,
    ) -> None:
        # The math is pipeline.learning.update's, in its order: targets, loss, step, average.
        target = targets(self.online, self.step.targets, next_obs, ret, discount)
        loss, stats = self.step.loss(obs, action, target, weight)
        grad_norm = optimizer_step(loss, self.optimizer, self._params, self.scaler)
        self._metric_sums[:_GRAD_NORM] += stats
        self._metric_sums[_GRAD_NORM] += grad_norm.detach().float()
        self._metric_updates += 1
        self.updates += 1
        if self.updates % self.settings.target_sync_updates == 0:
            self.sync_target(calibration_states)
        if self.acting is not None:
            self.acting.follow()

    # The two functions the step compiles: bound methods, so the compiled graphs see the
    # learner's networks (and guard on them) as the eager ones do.
    def _targets(self, *batch: torch.Tensor) -> torch.Tensor:
        if self.settings.quantiles:
            return quantile_targets(self.online, self.target, *batch)
        return double_dqn_targets(self.online, self.target, *batch)

    def _loss(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.settings.quantiles:
            return quantile_huber_loss(self.online, *tensors, amp_dtype=self.amp_dtype)
        return huber_loss(self.online, *tensors, amp_dtype=self.amp_dtype)

    # ------------------------------------------------------------------ state

    def _snapshot(self) -> dict[str, Any]:
        """A copy of everything an update changes (weights, buffers, optimizer, scaler, metrics)."""

        def clone_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {k: v.detach().clone() for k, v in state.items()}

        return {
            "online": clone_tensors(self.online.state_dict()),
            "target": clone_tensors(self.target.state_dict()),
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "scaler": copy.deepcopy(self.scaler.state_dict()) if self.scaler is not None else None,
            "updates": self.updates,
            "metric_sums": self._metric_sums.clone(),
            "metric_updates": self._metric_updates,
            "acting": clone_tensors(self.acting.state_dict()) if self.acting is not None else None,
        }

    def _restore(self, saved: dict[str, Any]) -> None:
        """Put back what :meth:`_snapshot` copied. load_state_dict copies in place, so
        parameter identities (which the optimizer and the compiled graphs refer to) stay."""
        self.online.load_state_dict(saved["online"])
        self.target.load_state_dict(saved["target"])
        self.optimizer.load_state_dict(saved["optimizer"])
        if self.scaler is not None and saved["scaler"] is not None:
            self.scaler.load_state_dict(saved["scaler"])
        self.updates = saved["updates"]
        self._metric_sums.copy_(saved["metric_sums"])
        self._metric_updates = saved["metric_updates"]
        if self.acting is not None:
            self.acting.load_state_dict(saved["acting"])
        self.optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ helpers

    def _network(self) -> QNetwork:
        """A new online or target network; channels_last activations: faster convs at
        training batch sizes (see QNetwork)."""
        return QNetwork(
            self.num_actions,
            self.settings.frame_stack,
            quantiles=self.settings.quantiles,
            channels_last=True,
        )

    def _nets_with_statistics(self) -> list[nn.Module]:  # what a calibration re-estimates
        return [self.online] + ([self.acting.net] if self.acting is not None else [])

    def _batch_to_device(self, batch: BatchLike) -> tuple[torch.Tensor, ...]:
        return batch_to_device(batch, self.device)

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return to_device(tensor, self.device)
