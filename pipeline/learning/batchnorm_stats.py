"""BatchNorm running statistics that the eval-mode forward can trust ("precise BN").

The learner trains the Q-network in train mode, where every BatchNorm layer normalises by
the statistics of the batch at hand. Everything else (the acting copies, the evaluator,
the target network, the online net's Double-DQN argmax) runs in eval mode, where the
layers use their *running* statistics instead. With PyTorch's default momentum of 0.1
those are an exponential average of about the last ten batches of 32: on World 1-1 they
moved the eval-mode Q-values by 1-4 (at Q ~ 20) from one update to the next, several
times the gaps between actions, so the eval-mode greedy action agreed with the train-mode
one on only about two thirds of replay states (docs/learning-history.md).

Wu and Johnson ("Rethinking 'Batch' in BatchNorm", 2021) call the fix *precise BN*:
re-estimate the statistics with the current weights over many samples, right before the
network is used in eval mode. :func:`recalibrate` does that: it resets the statistics,
sets ``momentum=None`` (PyTorch's cumulative average) and runs no-grad train-mode forwards
over the given states in chunks, so every running mean is the average of the chunks'
means and every running variance the average of their unbiased variances; the running
statistics of a network whose weights did not change since are then the population
statistics of those states, whatever the chunking.

Between recalibrations :func:`freeze_running_statistics` sets every layer's momentum to 0:
the training forwards still normalise by their batches (learning is unchanged) but leave
the running statistics alone, so the eval-mode forward between two recalibrations is a
fixed function rather than one that drifts with each batch.

:func:`preserved_statistics` lets a caller run train-mode forwards (a measurement) without
any trace on the running statistics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["batch_norm_layers", "freeze_running_statistics", "preserved_statistics", "recalibrate"]


def batch_norm_layers(net: nn.Module) -> list[_BatchNorm]:
    """The BatchNorm layers of ``net`` that keep running statistics, in module order."""
    return [m for m in net.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


def freeze_running_statistics(net: nn.Module) -> None:
    """Momentum 0 for every BatchNorm layer: train-mode forwards stop moving the statistics."""
    for layer in batch_norm_layers(net):
        layer.momentum = 0.0


@contextlib.contextmanager
def preserved_statistics(net: nn.Module) -> Iterator[None]:
    """Run train-mode forwards inside; the running statistics are put back on the way out."""
    layers = batch_norm_layers(net)
    saved = [
        (layer.running_mean.clone(), layer.running_var.clone(), layer.num_batches_tracked.clone()) for layer in layers
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for layer, (mean, var, tracked) in zip(layers, saved):
                layer.running_mean.copy_(mean)
                layer.running_var.copy_(var)
                layer.num_batches_tracked.copy_(tracked)


@torch.no_grad()
def recalibrate(nets: Sequence[nn.Module], chunks: Iterable[torch.Tensor]) -> int:
    """Re-estimate every BatchNorm layer's running statistics of each of ``nets`` over ``chunks``.

    ``chunks`` yields observation batches (e.g. ``obs.split(batch_size)``). Each chunk is
    one train-mode forward of each network and counts as one batch of the cumulative
    average; chunks of the training batch size reproduce the statistics training
    normalises with. The forwards run in float32 whatever autocast is active around the
    call: the statistics are what every eval-mode output is shifted by (in bf16 they moved
    a trained network's Q-values by ten times the spread between two draws of 1,024
    states, docs/benchmarks.md). The layers' momenta and the networks' modes are restored
    afterwards. Returns the number of states seen (0 leaves the statistics as they were).

    A network with a ``trunk`` method (:meth:`models.QNetwork.trunk`: every BatchNorm
    layer and nothing after the last one) runs only that: the same statistics for a fifth
    less arithmetic; any other network runs whole. With a ``frames`` method too
    (:meth:`models.QNetwork.frames`), each chunk is converted once, by the first network,
    for all of them (the learner's online net and acting copy read the same states).
    """
    nets = [net for net in nets if batch_norm_layers(net)]
    if not nets:
        return 0
    forwards = [getattr(net, "trunk", net) for net in nets]
    convert = getattr(nets[0], "frames", None)
    modes = [net.training for net in nets]
    layers = [layer for net in nets for layer in batch_norm_layers(net)]
    momenta = [layer.momentum for layer in layers]
    started = False
    seen = 0
    try:
        for obs in chunks:
            if not started:  # reset only once there is data to re-estimate from
                started = True
                for layer in layers:
                    layer.reset_running_stats()
                    layer.momentum = None
                for net in nets:
                    net.train()
            with torch.autocast(device_type=obs.device.type, enabled=False):
                frames = convert(obs) if convert is not None else obs
                for forward in forwards:
                    forward(frames)
            seen += int(obs.shape[0])
    finally:
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum
        for net, mode in zip(nets, modes):
            net.train(mode)
    return seen
