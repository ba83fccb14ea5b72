"""The benchmark window a Trainer's on_snapshot hook keeps, on synthetic snapshots."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.bench.trainer_run import READY, BenchWindow


class FakeTrainer:
    def __init__(self) -> None:
        self.stops: list[str] = []

    def request_stop(self, reason: str) -> None:
        self.stops.append(reason)


def _snap(t, updates):
    return SimpleNamespace(time=float(t), counters={"updates": updates}, gauges={}, collectors=[])


def test_window_opens_after_warmup_and_stops_the_run_once_long_enough():
    window, trainer = BenchWindow(window_s=3.0, warmup_s=2.0, ready="training"), FakeTrainer()
    # First update at t=2: the window opens at t=4 and is 3 s long at t=7.
    for t in range(10):
        window(_snap(t, max(0, t - 1)), trainer)
        if trainer.stops:
            break
    assert len(window.snaps) == 8  # t = 0..7: every snapshot is recorded
    assert window.window == [4, 5, 6, 7]
    assert trainer.stops == ["benchmark window complete"]


def test_an_endless_window_never_stops_the_run():
    window, trainer = BenchWindow(window_s=float("inf"), warmup_s=0.0, ready="training"), FakeTrainer()
    for t in range(100):
        window(_snap(t, t), trainer)
    assert window.window == list(range(1, 100)) and trainer.stops == []


def test_unknown_readiness_is_refused():
    assert set(READY) == {"collecting", "training", "evaluating"}
    with pytest.raises(KeyError):
        BenchWindow(window_s=1.0, warmup_s=0.0, ready="warp")
