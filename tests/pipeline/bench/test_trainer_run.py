"""The benchmark window a Trainer's on_snapshot hook keeps, on synthetic snapshots."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from config import Config
from pipeline.bench.parts_training import evaluation_cost
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
    # With an evaluator the window opens once it plays, not once it finished an evaluation.
    playing = SimpleNamespace(counters={"updates": 5}, gauges={"evaluator_steps": 3.0, "evaluations": 0.0})
    assert READY["evaluating"](playing)
    assert not READY["evaluating"](SimpleNamespace(counters={"updates": 5}, gauges={"evaluator_steps": 0.0}))
    with pytest.raises(KeyError):
        BenchWindow(window_s=1.0, warmup_s=0.0, ready="warp")


def test_an_evaluation_is_priced_from_the_steps_played_before_any_evaluation_finished():
    """A niced evaluator on a busy box finishes no evaluation in a window of seconds; its
    steps as they went still price one: the protocol's most steps at the window's rates."""
    cfg = Config(eval_episodes=10, eval_epsilon=0.05, eval_max_steps=2000)
    window = {
        "evaluator_steps_window": 40.0,
        "evaluator_eval_wall_s_window": 8.0,
        "evaluator_eval_cpu_s_window": 0.4,
        "evaluator_steps_run": 90.0,
        "evaluator_eval_wall_s_run": 20.0,
        "evaluator_eval_cpu_s_run": 0.9,
        "evaluations_run": 0.0,
        "eval_wall_s_total": 0.0,
        "eval_cpu_s_total": 0.0,
    }
    cost = evaluation_cost(window, cfg)
    assert cost["eval_steps_per_s"] == 5.0 and cost["cpu_ms_per_eval_step"] == pytest.approx(10.0)
    assert cost["max_steps_per_evaluation"] == 11 * 2000  # ten episodes and the greedy one
    assert cost["wall_s_per_evaluation_at_most"] == pytest.approx(22_000 / 5.0)
    assert cost["cpu_s_per_evaluation_at_most"] == pytest.approx(220.0)
    assert math.isnan(cost["wall_s_per_evaluation"]) and math.isnan(cost["cpu_s_per_evaluation"])
    # No step inside the window (starved): the run's steps so far; finished ones give means.
    window.update(evaluator_steps_window=0.0, evaluations_run=2.0, eval_wall_s_total=30.0, eval_cpu_s_total=3.0)
    cost = evaluation_cost(window, cfg)
    assert cost["eval_steps_per_s"] == 4.5 and cost["cpu_ms_per_eval_step"] == pytest.approx(10.0)
    assert cost["wall_s_per_evaluation"] == 15.0 and cost["cpu_s_per_evaluation"] == 1.5
