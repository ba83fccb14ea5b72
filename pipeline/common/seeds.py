"""The seeds of a run's env streams and collectors, derived from the run's one seed.

Every env stream of a run (and every collector's own generator) gets a seed of its own, so
no two play the same episodes; a collector that restarts shifts all of its seeds, so a
restart does not replay the episodes it played before.
"""

from __future__ import annotations

STREAM_STRIDE = 1000  # seed distance between streams (or collectors): more than any stream's resets need
RESTART_STRIDE = 1_000_003  # what each restart of a collector adds (prime: never a multiple of the stride)


def stream_seed(run_seed: int, stream: int, starts: int = 0) -> int:
    """The seed of stream (or collector) number ``stream`` at its ``starts``-th start."""
    return run_seed + STREAM_STRIDE * stream + RESTART_STRIDE * starts
