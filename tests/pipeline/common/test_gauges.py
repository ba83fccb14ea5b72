"""The gauge names several layers share: each written once, none twice, and a misspelt
steadiness figure refused where it is named."""

from __future__ import annotations

import pytest

from pipeline.common import gauges as G


def test_steadiness_gauges_are_the_figures_with_their_prefix():
    assert G.STEADINESS_FIGURES == (
        "agreement",
        "expected_agreement",
        "train_agreement",
        "churn",
        "q_offset",
        "action_gap",
    )
    assert G.steadiness_gauge("churn") == "steady_churn"
    assert tuple(f"steady_{name}" for name in G.STEADINESS_FIGURES) == G.STEADINESS_GAUGES
    assert set(G.STEADINESS_LABELS) == set(G.STEADINESS_FIGURES)
    assert len(set(G.STEADINESS_LABELS.values())) == len(G.STEADINESS_LABELS)
    with pytest.raises(ValueError, match="'agreemnt' is not a steadiness figure"):
        G.steadiness_gauge("agreemnt")


def test_evaluator_gauges_are_distinct_and_result_fields_name_some_of_them():
    assert G.EVAL_GAUGES[:2] == ("evaluations", "eval_return")
    assert G.EVAL_GAUGES[-2:] == ("eval_wall_s_total", "eval_cpu_s_total")
    assert len(set(G.EVAL_GAUGES)) == len(G.EVAL_GAUGES) == 16
    assert set(G.EVAL_RESULT_FIELDS) < set(G.EVAL_GAUGES)
    assert G.EVAL_RESULT_FIELDS[G.EVAL_X_POS] == "mean_x_pos"
    process = (G.EVALUATOR_CPU_PCT, G.EVALUATOR_RSS_MB, *G.EVALUATOR_PROGRESS_GAUGES)
    assert G.EVALUATOR_PROGRESS_GAUGES == ("evaluator_steps", "evaluator_eval_cpu_s", "evaluator_eval_wall_s")
    every = [*G.STEADINESS_GAUGES, *G.EVAL_GAUGES, *process]
    assert len(set(every)) == len(every)  # no gauge name stands for two figures
