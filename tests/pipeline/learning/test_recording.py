"""Video writing: MP4 and GIF round trips keep every frame, size and colour; failures
leave no file behind; output paths are checked up front."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.learning import recording as V

imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")


def frames(count: int, height: int = 240, width: int = 256) -> list[np.ndarray]:
    out = []
    for i in range(count):
        frame = np.zeros((height, width, 3), np.uint8)
        frame[..., 0] = 200  # red background
        frame[: height // 2, :, 2] = 255  # blue-ish top half
        frame[:, (i * 8) % width : (i * 8) % width + 8] = 255  # a moving white bar
        out.append(frame)
    return out


def test_mp4_round_trip_keeps_count_size_and_colour(tmp_path):
    path = tmp_path / "v.mp4"
    with V.open_video(path, 15.0) as writer:
        for frame in frames(23):
            writer.append(frame)
    assert writer.frames == 23 and writer.size == (240, 256)
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    decoded = [np.frombuffer(raw, np.uint8).reshape(240, 256, 3) for raw in reader]
    assert meta["size"] == (256, 240) and len(decoded) == 23
    centre = decoded[0][180, 128].astype(int)  # lower half: red, not grey
    assert centre[0] > 150 and centre[2] < 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.mp4"]


def test_gif_keeps_every_annotated_frame(tmp_path):
    from PIL import Image

    path = tmp_path / "v.gif"
    still = frames(1, 84, 84)[0]
    with V.open_video(path, 15.0) as writer:
        for step in range(10):  # identical pictures; only the caption's step number differs
            writer.append(V.annotate(still, f"t {step}"))
    with Image.open(path) as gif:
        assert gif.n_frames == 10 and gif.size == (252, 252)


def test_annotate_keeps_full_resolution_and_darkens_the_caption_band():
    frame = np.full((240, 256, 3), 200, np.uint8)
    out = V.annotate(frame, "ep 1  t 3  R 10  x 40  1-1")
    assert out.shape == (240, 256, 3) and out.dtype == np.uint8
    band = out[-12:]
    assert (out[:-12] == 200).all() and (band == 100).mean() > 0.6  # the band is darkened to half
    assert band.max() > 200  # white text on it
    assert (frame == 200).all()  # the input is not modified


def test_error_during_writing_leaves_no_file(tmp_path):
    path = tmp_path / "v.mp4"
    with pytest.raises(ValueError, match="frame of"), V.open_video(path, 15.0) as writer:
        writer.append(frames(1)[0])
        writer.append(frames(1, 120, 128)[0])
    assert list(tmp_path.iterdir()) == []


def test_mp4_falls_back_to_gif_without_ffmpeg(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "ffmpeg_available", lambda: False)
    writer = V.open_video(tmp_path / "v.mp4", 15.0)
    writer.append(frames(1)[0])
    assert writer.close() == tmp_path / "v.gif"
    assert (tmp_path / "v.gif").is_file() and not (tmp_path / "v.mp4").exists()


def test_fps_is_real_time():
    assert V.video_fps("SuperMarioBros-1-1-v0", 4) == 15.0
    assert V.video_fps("SuperMarioBros-1-1-v0", 1) == 60.0
    assert V.video_fps("Catch-v0", 4) == 15.0
