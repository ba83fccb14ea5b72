"""main.py: the command-line contract. User errors are one line on stderr and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_main(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--preset", "huge"], "invalid choice: 'huge'"),
        (["--num-processes", "0"], "num_processes=0"),
        (["--batch-size", "-3"], "batch_size=-3"),
        (["--preset", "tiny", "--batch-size", "5000"], "must not exceed replay_capacity"),
        (["--env", "SuperMarioBros-9-1-v0"], "SuperMarioBros-9-1-v0"),
        (["--env", "Pong-v5"], "Pong-v5"),
        (["--num-processes", "two"], "expected a whole number, got 'two'"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--frobnicate"], "unrecognized arguments"),
        (["--resume", "/nonexistent/ckpt.pt", "--preset", "tiny"], "no such file or directory"),
        (["eval", "--env", "Catch-v0"], "no shipped network for Catch-v0"),
        (["play", "--checkpoint", "SuperMarioBros-8-4-v0"], "or a shipped name (SuperMarioBros-1-1-v0"),
        (["export"], "the following arguments are required: --checkpoint"),
        (["explore", "--env", "SuperMarioBrosRandomStages-v0"], "needs a Mario stage that replays the same way"),
        (["explore", "--env", "Catch-v0"], "use e.g. SuperMarioBros-1-3-v0"),
        (["explore", "--iterations", "0"], "--iterations 0: must be >= 1"),
        (["explore", "--out", "/tmp/trajectory.txt"], "unsupported extension '.txt'"),
        (
            ["--preset", "cpu", "--env", "SuperMarioBros-1-3-v0", "--set", "frontier_start_share=0.5"]
            + ["--set", "frontier_trajectory=/nonexistent/1-3.npz"],
            "frontier_trajectory: trajectory /nonexistent/1-3.npz unreadable",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    result = run_main(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("main.py: error:") and fragment in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_print_config_shows_values_and_sources_and_nothing_else():
    result = run_main("--preset", "tiny", "--batch-size", "8", "--print-config")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no banners, no warnings
    assert "batch_size" in result.stdout and "8" in result.stdout and "command line" in result.stdout
    assert "preset: tiny" in result.stdout


def test_help_lists_every_command_in_one_line_each_and_training_runs_without_one():
    import main

    result = run_main("--help")
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert text.startswith("usage: main.py [training flags]\n       main.py COMMAND [flags]")
    commands = text[text.index("commands (") :].splitlines()
    assert set(main.COMMAND_HELP) == set(main.COMMANDS) - {"train"}  # every command has its line
    for name, line in main.COMMAND_HELP.items():
        assert f"  {name:<7} {line}" in commands
    assert "--total-frames" in text and "--backend" in text  # the training flags stay
    tune = run_main("tune", "--help")
    assert tune.returncode == 0 and "--force" in tune.stdout and "commands (" not in tune.stdout


@pytest.mark.slow
def test_a_short_run_on_mario_trains_saves_and_its_checkpoint_plays(tmp_path):
    """The whole system on the real game: the run's own search for 1-1's flag
    (frontier_trajectory=search), one real collector on the 1-1 emulator restarting along
    it, the learner training past learning_starts, a checkpoint, and `eval` playing it."""
    import csv

    from pipeline.learning.checkpoint import load_checkpoint
    from pipeline.learning.frontier import read_trajectory, stage_signature
    from pipeline.transport.segments import project_segments, run_tag
    from tests.conftest import run_main as run_to_end

    frames = 6000
    train = run_to_end(
        ["--preset", "cpu", "--num-processes", "1", "--set", "envs_per_collector=2", "--set", "learning_starts=500"]
        + ["--no-compile", "--no-amp", "--eval-interval", "0", "--total-frames", str(frames), "--monitor", "log"]
        + ["--run-dir", str(tmp_path), "--run-name", "mario"]
        + ["--set", "frontier_start_share=0.5", "--set", "frontier_trajectory=search"],
        cwd=ROOT,
        timeout_s=900,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    run = tmp_path / "mario"
    # The search found the flag before the collector started (1-1's flag is at x 3,161) ...
    signature = stage_signature("SuperMarioBros-1-1-v0", "right_only", 4)
    searched, searched_x = read_trajectory(run / "frontier" / "searched.npz", signature)
    assert searched_x > 3000 and "startup: the flag in" in train.stdout + train.stderr
    # ... and the collector's furthest trajectory started from it: kept, or beaten.
    assert read_trajectory(run / "frontier" / "collector-0.npz", signature)[1] >= searched_x
    with open(run / "metrics.csv", newline="") as handle:
        last = list(csv.DictReader(handle))[-1]
    # Learning starts at 500 transitions (2,000 frames: one transition per 4 frames); from
    # there replay ratio 4 with batches of 32 is an update per 8 transitions.
    assert float(last["frames"]) >= frames
    assert float(last["updates"]) >= (frames / 4 - 500) * 4 / 32 * 0.9, last
    assert float(last["replayed_frames"]) > 0  # restarts along the trajectory
    assert not project_segments(run_tag(run))
    final = sorted((run / "checkpoints").glob("ckpt-*.pt"), key=lambda p: int(p.stem.split("-")[1]))[-1]
    saved = load_checkpoint(final)
    assert saved["config"]["env_id"] == "SuperMarioBros-1-1-v0" and saved["counters"]["frames"] >= frames

    played = run_to_end(
        ["eval", "--checkpoint", str(final), "--episodes", "2", "--epsilon", "0.05", "--max-steps", "200"],
        cwd=ROOT,
        timeout_s=600,
    )
    assert played.returncode == 0, played.stderr[-3000:]
    assert "2 episode(s)" in played.stdout and "x_pos mean" in played.stdout, played.stdout
