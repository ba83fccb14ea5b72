"""``main.py play``: a decodable full-resolution colour video with one frame per agent
step (real Mario emulator), the default location, GIF output, and one clear error per
mistake."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.commands.play import play_command
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import CheckpointError
from tests.pipeline.commands.test_evaluate import make_checkpoint, one_torch_thread, replicate  # noqa: F401 (autouse)

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")


def decode(path) -> tuple[dict, list[np.ndarray]]:
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    width, height = meta["size"]
    frames = [np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in reader]
    return meta, frames


def test_mario_video_is_240x256_colour_with_one_frame_per_step(tmp_path, capsys):
    run = tmp_path / "runs" / "mario"
    _, state = make_checkpoint(run / "checkpoints" / "ckpt-000000004242.pt", "SuperMarioBros-1-1-v0", frames=4242)
    assert play_command(["--checkpoint", str(run), "--episodes", "1", "--max-steps", "60"]) == 0

    video = run / "videos" / "play-4242.mp4"  # the default location
    meta, frames = decode(video)
    assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p")
    assert meta["fps"] == pytest.approx(15.0)  # 60 NES frames/s over frame_skip 4
    # The same greedy episode played by the test: it ends when Mario dies or at --max-steps.
    (episode,) = replicate(state, "SuperMarioBros-1-1-v0", episodes=1, seed=0, max_steps=60)
    assert 0 < episode["length"] <= 60
    assert len(frames) == episode["length"]
    assert all(f.shape == (240, 256, 3) for f in frames)
    first = frames[0].astype(int)
    # Colour, not grey: the sky is blue (blue well above red), channels differ widely.
    assert np.abs(first[..., 0] - first[..., 2]).max() > 100
    assert first[60:100, :, 2].mean() > first[60:100, :, 0].mean() + 50
    # A caption band is drawn along the bottom (darkened), the rest of the frame is the game.
    assert first[-12:].mean() < first[-40:-12].mean()
    out = capsys.readouterr().out
    assert str(video) in out and f"{episode['length']} frames of 240x256 RGB" in out
    assert f"episode 1: return {episode['return']:.1f}, x_pos {episode['x_pos']}" in out
    assert not [p for p in video.parent.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_frame_count_matches_steps_over_several_episodes_and_gif(tmp_path, capsys):
    ckpt, state = make_checkpoint(tmp_path / "ckpt-1.pt")
    out = tmp_path / "deep" / "dir" / "catch.gif"
    assert play_command(["--checkpoint", str(ckpt), "--episodes", "2", "--seed", "3", "--out", str(out)]) == 0
    expected = replicate(state, "Catch-v0", episodes=2, seed=3)
    from PIL import Image

    with Image.open(out) as gif:
        assert gif.n_frames == sum(e["length"] for e in expected)
        assert gif.size == (252, 252)  # Catch's 84x84 upscaled 3x for legibility
    printed = capsys.readouterr().out
    for e in expected:
        assert f"return {e['return']:.1f}, x_pos {e['x_pos']}" in printed


def test_mp4_of_catch_counts_every_step(tmp_path):
    ckpt, state = make_checkpoint(tmp_path / "ckpt-1.pt")
    out = tmp_path / "catch.mp4"
    assert play_command(["--checkpoint", str(ckpt), "--episodes", "2", "--epsilon", "0.5", "--out", str(out)]) == 0
    _, frames = decode(out)
    expected = replicate(state, "Catch-v0", episodes=2, seed=0, epsilon=0.5)
    assert len(frames) == sum(e["length"] for e in expected)


# ------------------------------------------------------------------------------ errors
def test_missing_checkpoint(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        play_command(["--checkpoint", str(tmp_path / "missing.pt"), "--out", str(tmp_path / "v.mp4")])
    assert not (tmp_path / "v.mp4").exists()


def test_corrupt_checkpoint(tmp_path):
    bad = tmp_path / "ckpt-7.pt"
    bad.write_bytes(np.random.default_rng(1).bytes(10_000))
    with pytest.raises(CheckpointError, match="corrupt") as info:
        play_command(["--checkpoint", str(bad), "--out", str(tmp_path / "v.mp4")])
    assert "\n" not in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-7.pt"]


def test_checkpoint_for_another_action_set(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt", "SuperMarioBros-1-1-v0", num_actions=12)
    with pytest.raises(UserError, match=r"trained with 12 actions \(action_set right_only\).*gives 5"):
        play_command(["--checkpoint", str(ckpt), "--out", str(tmp_path / "v.mp4")])


@pytest.mark.parametrize("where", ["proc", "under_a_file"])
def test_unwritable_output_path(tmp_path, where):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt")
    if where == "proc":
        out = "/proc/forbidden.mp4"
    else:
        (tmp_path / "a_file").write_text("x")
        out = str(tmp_path / "a_file" / "v.mp4")
    expected = "cannot write video file.*(is a file, not a directory|cannot create files in '/proc')"
    with pytest.raises(UserError, match=expected) as info:
        play_command(["--checkpoint", str(ckpt), "--out", out])
    assert out in str(info.value) and "\n" not in str(info.value)


def test_unsupported_video_extension(tmp_path):
    ckpt, _ = make_checkpoint(tmp_path / "ckpt-1.pt")
    with pytest.raises(UserError, match=r"unsupported extension '\.avi'.*\.mp4, \.gif"):
        play_command(["--checkpoint", str(ckpt), "--out", str(tmp_path / "v.avi")])


def test_bad_flag_value(tmp_path):
    with pytest.raises(UserError, match="--episodes.*>= 1"):
        play_command(["--checkpoint", "x.pt", "--episodes", "0"])
