"""The shipped networks, ``models/trained/<env id>.pt`` (1-1, 1-2, 1-3 and 1-4): small files
that git keeps, with their provenance, which plain ``eval`` and ``play`` (``--env`` for
another stage, or the name) play on the real emulator. How well they play is not tested:
a better one replaces a file with the same ``export`` command."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from config import Config
from pipeline.commands.evaluate import eval_command
from pipeline.commands.play import play_command
from pipeline.learning.checkpoint import load_checkpoint
from pipeline.learning.policy import load_policy
from pipeline.learning.shipped import EXPORT_FORMAT, shipped_dir, shipped_names
from tests.pipeline.commands.test_evaluate import one_torch_thread  # noqa: F401 (autouse)

ROOT = Path(__file__).resolve().parents[3]
NAME = "SuperMarioBros-1-1-v0"
SHIPPED = ROOT / "models" / "trained" / f"{NAME}.pt"
# Every stage with a shipped network: the one a plain play/eval plays, and the others.
STAGES = ("SuperMarioBros-1-1-v0", "SuperMarioBros-1-2-v0", "SuperMarioBros-1-3-v0", "SuperMarioBros-1-4-v0")


def test_exactly_the_stages_named_here_are_shipped():
    assert shipped_dir() == SHIPPED.parent and sorted(shipped_names()) == sorted(STAGES)


@pytest.mark.parametrize("name", STAGES)
def test_a_shipped_file_is_small_kept_by_git_and_says_where_it_came_from(name):
    shipped = shipped_dir() / f"{name}.pt"
    assert shipped.stat().st_size < 8e6  # the acting network alone (float32: 6.8 MB)
    if shutil.which("git") and (ROOT / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", "-q", str(shipped)], cwd=ROOT)
        assert ignored.returncode == 1, "git ignores the shipped network"
    payload = load_checkpoint(shipped)
    assert set(payload["learner"]) == {"acting", "updates"}
    config = Config.from_dict(payload["config"])
    assert config.env_id == name
    record = payload["provenance"]
    assert record["format"] == EXPORT_FORMAT and record["env_id"] == name
    assert record["frames"] == payload["counters"]["frames"] > 0
    assert record["trained_with"].split()[1] == "main.py"  # the command that trained it
    if record["figures"] is not None:  # the protocol it was measured with, beside the figures
        assert {"episodes", "epsilon", "seed", "mean_x_pos", "flag_rate"} <= set(record["figures"])


def test_plain_eval_plays_the_shipped_network_on_the_emulator(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("config.ENV_ID", None)  # the default env, whatever config.py's knob says
    out = tmp_path / "eval.json"
    assert eval_command(["--max-steps", "20", "--json", str(out), "--episodes", "1"]) == 0
    data = json.loads(out.read_text())
    assert Path(data["checkpoint"]) == SHIPPED and data["env_id"] == NAME
    assert data["frames"] == load_checkpoint(SHIPPED)["counters"]["frames"]
    (length,) = data["per_episode"]["length"]
    assert 0 < length <= 20 and data["per_episode"]["world"] == [1]
    assert f"evaluated {SHIPPED}" in capsys.readouterr().out


def test_play_by_name_records_the_shipped_network(tmp_path, capsys):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "shipped.mp4"
    assert play_command(["--checkpoint", NAME, "--max-steps", "20", "--out", str(video)]) == 0
    reader = imageio_ffmpeg.read_frames(str(video))
    meta = next(reader)
    frames = sum(1 for _ in reader)
    assert meta["size"] == (256, 240) and 0 < frames <= 20
    printed = capsys.readouterr().out
    assert f"{frames} steps, stage 1-1" in printed and f"{SHIPPED.name} on {NAME}" in printed
    frames_trained = load_checkpoint(SHIPPED)["counters"]["frames"]
    assert printed.startswith(f"playing {SHIPPED}: trained for {frames_trained} frames")
    assert load_policy(NAME).path == SHIPPED


@pytest.mark.parametrize("name", [stage for stage in STAGES if stage != NAME])
def test_play_with_env_plays_that_stages_shipped_network(name, tmp_path, capsys):
    pytest.importorskip("imageio_ffmpeg")
    shipped = shipped_dir() / f"{name}.pt"
    video = tmp_path / "stage.mp4"
    assert play_command(["--env", name, "--max-steps", "10", "--out", str(video)]) == 0
    printed = capsys.readouterr().out
    frames_trained = load_checkpoint(shipped)["counters"]["frames"]
    assert printed.startswith(f"playing {shipped}: trained for {frames_trained} frames")
    stage = name.removeprefix("SuperMarioBros-").removesuffix("-v0")
    assert f"steps, stage {stage}" in printed and video.stat().st_size > 0
