"""The learner's line for an evaluation: mean and median x_pos, flag rate and return, and
how the episodes were played."""

from __future__ import annotations

from pipeline.run.evaluator.evaluations import announcement


def result(**overrides: float) -> dict:
    base = {
        "weights_version": 3,
        "learner_step": 1200,
        "frames": 250_112,
        "episodes": 20,
        "epsilon": 0.05,
        "mean_x_pos": 1234.4,
        "median_x_pos": 898.0,
        "flag_rate": 0.15,
        "mean_return": 1100.25,
    }
    return base | overrides


def test_the_line_gives_mean_median_flag_rate_and_the_protocol() -> None:
    assert announcement(result()) == (
        "evaluation of weights v3 (frames 250,112, update 1200, 20 episode(s) at epsilon 0.05): "
        "x_pos mean 1234 median 898, flag rate 0.15, return 1100.2"
    )
    assert "update 1200, 1 episode(s) greedy)" in announcement(result(episodes=1, epsilon=0.0))
    assert announcement(result(final=True)).startswith("final evaluation of weights v3 (frames 250,112,")
