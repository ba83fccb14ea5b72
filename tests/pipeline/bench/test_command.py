"""The benchmark command: smoke runs of its cheap parts, its errors, and part selection.

No timing thresholds here: figures depend on the machine and its load. These check that
the suite runs real processes end to end and reports every figure it promises.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.bench import bench_command
from pipeline.bench.figures import TARGET_RECORDS_PER_S
from pipeline.bench.options import DEFAULT_PARTS, DEFAULT_SOAK_MINUTES, QUICK_SECONDS, parse_options
from pipeline.bench.suite import Suite
from pipeline.bench.trainer_run import NoSteadyWindow
from pipeline.common.errors import UserError
from pipeline.run.machine.load import allowed_cpus


def _figures(path, part):
    data = json.loads(path.read_text())
    assert data["parts"][part]["error"] is None, data["parts"][part]
    return data, data["parts"][part]["figures"]


def test_quick_raw_part_reports_positive_frames_and_steps(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench_command(["--quick", "--only", "raw", "--seconds", "2", "--json", str(out)]) == 0
    data, figures = _figures(out, "raw")
    for key in ("raw_frames_per_s", "wrapped_frames_per_s"):
        assert figures[key] > 0, key  # each process stepped its env
    # The headline is the ratio of the two rates it prints beside it.
    assert figures["wrapper_efficiency"] == pytest.approx(figures["wrapped_frames_per_s"] / figures["raw_frames_per_s"])
    # Frames and agent steps are counted separately: one step is frame_skip frames.
    frame_skip = data["config"]["frame_skip"]
    assert figures["wrapped_frames_per_s"] == pytest.approx(frame_skip * figures["wrapped_steps_per_s"])
    assert data["quick"] is True and list(data["parts"]) == ["raw"]
    assert data["config"]["env_id"] == "SuperMarioBros-1-1-v0"
    printed = capsys.readouterr().out  # one plain table (stdout is not a terminal here)
    assert "bare emulator frames/s" in printed and "wrapped env frames/s" in printed


def test_quick_consolidator_part_reports_records_and_target(tmp_path):
    out = tmp_path / "bench.json"
    assert bench_command(["--quick", "--only", "consolidator", "--seconds", "2", "--json", str(out)]) == 0
    data, figures = _figures(out, "consolidator")
    assert figures["records_per_s"] > 0 and figures["mb_per_s"] > 0 and figures["producers"] >= 1
    (target,) = [t for t in data["targets"] if t["figure"] == "records_per_s"]
    assert target["op"] == ">=" and target["threshold"] == TARGET_RECORDS_PER_S
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
        bench_command(argv)
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_part_selection_soak_only_when_asked():
    options, resolved = parse_options([])
    assert "soak" not in options.parts and options.parts == DEFAULT_PARTS
    assert resolved.config.num_processes >= 2 and resolved.config.monitor == "off"
    options, _ = parse_options(["--soak", "3"])
    assert options.parts[-1] == "soak" and options.soak_minutes == 3
    options, _ = parse_options(["--only", "soak"])
    assert options.parts == ("soak",) and options.soak_minutes == DEFAULT_SOAK_MINUTES
    options, resolved = parse_options(["--only", "learner,raw", "--num-processes", "1", "--quick"])
    assert options.parts == ("learner", "raw") and resolved.config.num_processes == 1
    assert options.seconds == QUICK_SECONDS


def test_learner_set_changes_the_timed_copy_of_the_config_only():
    options, resolved = parse_options(["--only", "learner", "--learner-set", "quantiles=0"])
    assert options.learner_set == ("quantiles=0",)
    assert options.changed_config.quantiles == 0 and resolved.config.quantiles == 32
    assert parse_options(["--only", "learner"])[0].changed_config is None


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--only", "raw", "--learner-set", "quantiles=32"], "only the learner part uses it"),
        (["--only", "learner", "--learner-set", "quantiles=1"], "quantiles=1: must be 0 or >= 2"),
        (["--only", "learner", "--learner-set", "quantiles=many"], "quantiles takes a int value"),
        (["--only", "learner", "--learner-set", "widest=2"], "FIELD a config.py setting"),
        (["--only", "learner", "--learner-set", "action_set=right_jump"], "changes the number of actions"),
    ],
)
def test_bad_learner_set_is_one_line_before_anything_runs(argv, fragment):
    with pytest.raises(UserError) as info:
        parse_options(argv)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def _start_burner() -> int:
    """A process spinning on the CPU that is not this process's descendant (a shell starts it
    and exits, so it is re-parented): the bench must count it as other load, not its own."""
    started = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(started.stdout.strip())


@pytest.mark.slow
def test_beside_cpu_burners_every_part_is_printed_busy_ones_flagged_and_json_written(tmp_path, capsys, monkeypatch):
    """A busy machine: one burner per core this process may use. The measured parts are
    flagged BUSY with their figures; a part with no steady window says so in its row and
    is not a failure there; the JSON has every part. The evaluator part stands in for a
    run that never settles (its real runs take minutes), spending a second beside the burners."""

    def never_settles(self, result):
        time.sleep(1.0)
        raise NoSteadyWindow("evaluator: no steady window within 275 s (stopped: ran 275 s)")

    monkeypatch.setattr(Suite, "part_evaluator", never_settles)
    out = tmp_path / "bench.json"
    pids = [_start_burner() for _ in allowed_cpus()]
    try:
        code = bench_command(["--quick", "--only", "raw,consolidator,evaluator", "--seconds", "2", "--json", str(out)])
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert code == 0, data["parts"]
    assert list(data["parts"]) == ["raw", "consolidator", "evaluator"]
    assert data["busy_parts"] == ["raw", "consolidator", "evaluator"]
    for part in ("raw", "consolidator"):
        assert data["parts"][part]["busy"] and data["parts"][part]["other_cores"] > 0
        assert data["parts"][part]["error"] is None and data["parts"][part]["figures"]
    assert data["parts"]["evaluator"]["unmeasured"].startswith("evaluator: no steady window")
    assert data["parts"]["evaluator"]["error"] is None
    lines = printed.splitlines()
    assert "measured beside other load: raw, consolidator, evaluator" in lines[0]
    assert sum("other processes' CPU" in line and "BUSY" in line for line in lines) == 3
    assert any("bare emulator frames/s" in line and "BUSY" in line for line in lines)
    assert any(line.startswith("consolidator") and "records/s" in line for line in lines)
    assert any(line.startswith("evaluator") and "NOT MEASURED" in line for line in lines)
