"""The report: the table's target verdicts and errors, and the JSON's targets."""

from __future__ import annotations

import json

from pipeline.bench.options import parse_options
from pipeline.bench.report import render_table, results_json
from pipeline.bench.suite_base import PartResult


def test_table_marks_targets_and_errors(capsys):
    results = {
        "collector": PartResult(figures={"collector_efficiency": 0.85, "collector_frames_per_s": 400.0}),
        "consolidator": PartResult(figures={"records_per_s": 60_000.0}),
        "learner": PartResult(error="RuntimeError: boom"),
    }
    render_table(results, "header", rich_output=False)
    printed = capsys.readouterr().out
    assert ">= 0.9 MISS" in printed and ">= 50000 ok" in printed and "RuntimeError: boom" in printed
    payload = results_json(results, parse_options([])[0], parse_options([])[1], [], 1.0)
    assert {(t["figure"], t["met"]) for t in payload["targets"]} == {
        ("collector_efficiency", False),
        ("records_per_s", True),
    }
    json.dumps(payload)  # NaN-free, serialisable
