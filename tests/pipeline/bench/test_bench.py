"""The benchmark command: smoke runs of its cheap parts, its errors, and its arithmetic.

No timing thresholds here: figures depend on the machine and its load. These check that
the suite runs real processes end to end and reports every figure it promises.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from pipeline.bench import suite as bench
from pipeline.common.errors import UserError


def _figures(path, part):
    data = json.loads(path.read_text())
    assert data["parts"][part]["error"] is None, data["parts"][part]
    return data, data["parts"][part]["figures"]


def test_quick_raw_part_reports_positive_frames_and_steps(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.bench_command(["--quick", "--only", "raw", "--seconds", "2", "--json", str(out)]) == 0
    data, figures = _figures(out, "raw")
    for key in ("raw_frames_per_s", "wrapped_frames_per_s", "wrapped_steps_per_s", "wrapper_efficiency"):
        assert figures[key] > 0, key
    # Frames and agent steps are counted separately: one step is frame_skip frames.
    frame_skip = data["config"]["frame_skip"]
    assert figures["wrapped_frames_per_s"] == pytest.approx(frame_skip * figures["wrapped_steps_per_s"])
    assert data["quick"] is True and list(data["parts"]) == ["raw"]
    assert data["config"]["env_id"] == "SuperMarioBros-1-1-v0"
    printed = capsys.readouterr().out  # one plain table (stdout is not a terminal here)
    assert "bare emulator frames/s" in printed and "wrapped env frames/s" in printed


def test_quick_consolidator_part_reports_records_and_target(tmp_path):
    out = tmp_path / "bench.json"
    assert bench.bench_command(["--quick", "--only", "consolidator", "--seconds", "2", "--json", str(out)]) == 0
    data, figures = _figures(out, "consolidator")
    assert figures["records_per_s"] > 0 and figures["mb_per_s"] > 0 and figures["producers"] >= 1
    (target,) = [t for t in data["targets"] if t["figure"] == "records_per_s"]
    assert target["op"] == ">=" and target["threshold"] == bench.TARGET_RECORDS_PER_S
    assert target["met"] in (True, False)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--only", "warp"], "unknown part(s) warp"),
        (["--seconds", "0"], "--seconds"),
        (["--soak", "abc"], "expected minutes"),
        (["--env", "SuperMarioBros-9-1-v0"], "SuperMarioBros-9-1-v0"),
        (["--num-processes", "0"], "--num-processes"),
        (["--json", "/nonexistent-dir/x.json"], "does not exist"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_input_is_one_line_user_error(argv, fragment):
    with pytest.raises(UserError) as info:
        bench.bench_command(argv)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_part_selection_soak_only_when_asked():
    options, resolved = bench.parse_options([])
    assert "soak" not in options.parts and options.parts == bench.DEFAULT_PARTS
    assert resolved.config.num_processes >= 2 and resolved.config.monitor == "off"
    options, _ = bench.parse_options(["--soak", "3"])
    assert options.parts[-1] == "soak" and options.soak_minutes == 3
    options, _ = bench.parse_options(["--only", "soak"])
    assert options.parts == ("soak",) and options.soak_minutes == bench.DEFAULT_SOAK_MINUTES
    options, resolved = bench.parse_options(["--only", "learner,raw", "--num-processes", "1", "--quick"])
    assert options.parts == ("learner", "raw") and resolved.config.num_processes == 1
    assert options.seconds == bench.QUICK_SECONDS


def _snap(t, frames, updates, replay, rss, collectors=2):
    return SimpleNamespace(
        time=t,
        counters={"frames": frames, "updates": updates},
        gauges={"replay_size": replay, "learner_rss_mb": rss},
        collectors=[{}] * collectors,
    )


def test_soak_figures_compare_first_and_last_minute_after_the_replay_is_full():
    # Replay full at t=30; frames at 100/s then 90/s from t=90; updates at 10/s throughout.
    snaps = []
    for t in range(0, 181, 5):
        frames = 100 * t if t <= 90 else 9000 + 90 * (t - 90)
        snaps.append(_snap(t, frames, 10 * max(0, t - 10), min(3000, 100 * t), 1000 + (t >= 30) * (t - 30) / 3))
    figures = bench.soak_figures(snaps, capacity=3000, minutes=3)
    assert figures["replay_full_s"] == 30
    assert figures["frames_per_s_first"] == pytest.approx(100.0)  # minute [30, 90]
    assert figures["frames_per_s_last"] == pytest.approx(90.0)  # the last minute, [120, 180]
    assert figures["frames_ratio"] == pytest.approx(0.9)
    assert figures["updates_ratio"] == pytest.approx(1.0)
    assert figures["rss_growth_pct"] == pytest.approx(5.0)
    details = bench.soak_details(snaps)
    assert [m["from_s"] for m in details["per_minute"]] == [0, 60, 120]


def test_soak_figures_without_a_full_replay_are_nan():
    snaps = [_snap(t, 100 * t, t, 10 * t, 1000) for t in range(0, 61, 5)]
    figures = bench.soak_figures(snaps, capacity=3000, minutes=1)
    assert math.isnan(figures["frames_ratio"]) and math.isnan(figures["rss_growth_pct"])


def test_table_marks_targets_and_errors(capsys):
    results = {
        "collector": bench.PartResult(figures={"collector_efficiency": 0.85, "collector_frames_per_s": 400.0}),
        "consolidator": bench.PartResult(figures={"records_per_s": 60_000.0}),
        "learner": bench.PartResult(error="RuntimeError: boom"),
    }
    bench.render_table(results, "header", rich_output=False)
    printed = capsys.readouterr().out
    assert ">= 0.9 MISS" in printed and ">= 50000 ok" in printed and "RuntimeError: boom" in printed
    payload = bench.results_json(results, bench.parse_options([])[0], bench.parse_options([])[1], [], 1.0)
    assert {(t["figure"], t["met"]) for t in payload["targets"]} == {
        ("collector_efficiency", False),
        ("records_per_s", True),
    }
    json.dumps(payload)  # NaN-free, serialisable
