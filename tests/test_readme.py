"""README's training commands, each run as a user would run it: from a fresh cache (the
``auto`` preset measures the machine first), here to a tiny frame budget."""

from __future__ import annotations

import csv
import json
import os
import shlex
from pathlib import Path

import pytest

from config import PRESETS
from pipeline.transport.segments import project_segments, run_tag
from tests.conftest import run_main

ROOT = Path(__file__).resolve().parents[1]
FRAMES = 2000  # a few seconds of collection: enough to start every process and end cleanly


def readme_training_commands() -> list[list[str]]:
    """The arguments of each ``python main.py`` line in README's Training block that trains
    (not a command such as tune, nor --resume, --print-config or --help)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Training") :]
    start = section.index("```bash") + len("```bash")
    block = section[start : section.index("```", start)]
    commands = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] != ["python", "main.py"]:
            continue
        args = words[2:]
        if args and not args[0].startswith("-"):
            continue  # a command of its own (tune)
        if {"--resume", "--print-config", "--help"} & set(args):
            continue
        commands.append(args)
    return commands


def test_the_readme_training_commands_are_the_three_this_module_runs() -> None:
    """A new training line in README is run below too; this pins what is run today."""
    assert [" ".join(args) for args in readme_training_commands()] == [
        "",
        "--preset cpu --total-frames 200000",
        "--env SuperMarioBrosRandomStages-v0 --set stages=1-1,1-2,1-3,1-4",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("args", readme_training_commands(), ids=lambda args: " ".join(args) or "python main.py")
def test_each_readme_training_command_trains_from_a_fresh_cache(args: list[str], tmp_path) -> None:
    budget = ["--total-frames", str(FRAMES), "--eval-interval", "0", "--monitor", "log"]
    budget += ["--run-dir", str(tmp_path), "--run-name", "readme"]  # the last --total-frames counts
    env = {**os.environ, "MARIO_DQN_CACHE": str(tmp_path / "cache")}
    result = run_main(args + budget, cwd=ROOT, timeout_s=1500, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "readme"
    with open(run / "metrics.csv", newline="") as handle:
        assert float(list(csv.DictReader(handle))[-1]["frames"]) >= FRAMES
    saved = json.loads((run / "config.json").read_text())["config"]  # what the run trained with
    if "--env" in args:
        assert saved["env_id"] == args[args.index("--env") + 1]
    if "--set" in args:
        name, value = args[args.index("--set") + 1].split("=", 1)
        assert saved[name] == value
    if "--preset" in args:
        assert saved["num_processes"] == PRESETS[args[args.index("--preset") + 1]]["num_processes"]
    assert not project_segments(run_tag(run))
