"""What one learner update costs in arithmetic, and what the core it runs on can do.

Two measurements, both taken in the process that times the learner so they see the same
threads, precision and machine load:

- :func:`update_flops`: the floating-point operations of one ``Learner.update``, counted
  by ``torch.utils.flop_counter.FlopCounterMode`` (convolutions and matrix products,
  forward and backward; the elementwise ops, BatchNorm and Adam are not counted, so the
  figure is the work a GEMM-bound update cannot avoid).
- :func:`gemm_peak_flops`: floating-point operations per second of a large square matrix
  product at the current thread count and a given precision, the best of a few timed
  repeats: the ceiling the update's convolutions and matrix products are held against.

Their ratio, ``updates/s x update_flops / peak``, is the learner's efficiency, and
``update_flops`` per frame over the peak is the learner's share of a run's floor
(:mod:`pipeline.bench.parts_training`). Both are ratios measured side by side, so they
hold on any machine.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pipeline.learning.learner import Learner
    from pipeline.learning.replay import Batch

__all__ = ["GEMM_SIZE", "gemm_peak_flops", "update_flops"]

# 1024 x 1024 operands: large enough that a CPU core's (or a thread pool's) GEMM reaches
# its plateau, small enough that one product takes milliseconds.
GEMM_SIZE = 1024


def update_flops(learner: Learner, batch: Batch) -> int:
    """The FLOPs one update on ``batch`` costs, counted; the learner's state is put back
    afterwards (the counted update is undone), so counting trains nothing."""
    from torch.utils.flop_counter import FlopCounterMode

    with learner.undone(), FlopCounterMode(display=False) as counter:
        learner.update(batch)
    return int(counter.get_total_flops())


def gemm_peak_flops(
    dtype: torch.dtype = torch.float32,
    *,
    device: torch.device | str = "cpu",
    size: int = GEMM_SIZE,
    repeats: int = 5,
    seconds: float = 0.25,
) -> float:
    """FLOP/s of a ``size`` x ``size`` matrix product in ``dtype`` at this process's thread
    count: the best of ``repeats`` timings of at least ``seconds`` each (after two untimed
    products that warm the caches and the thread pool)."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, generator=gen, device=device).to(dtype)
    b = torch.randn(size, size, generator=gen, device=device).to(dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        torch.mm(a, b)
    sync()
    best = 0.0
    for _ in range(repeats):
        n = 0
        start = time.perf_counter()
        while True:
            torch.mm(a, b)
            n += 1
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        best = max(best, 2.0 * size**3 * n / elapsed)
    return best
