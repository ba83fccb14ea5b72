"""Video files of the agent playing: MP4 (H.264) through imageio-ffmpeg, GIF through Pillow.

Frames are written one by one as they are produced (MP4 streams them into an ``ffmpeg``
subprocess, so a long episode never sits in memory). The file is written under a
temporary name in the destination directory and renamed into place by ``close()``, so a
reader never sees half a video and a failed run leaves no broken file behind.

MP4 is H.264 (``libx264``) in ``yuv420p``, which every player and browser plays; that
pixel format needs even frame sizes, which Mario's 240x256 frames have. When the
``ffmpeg`` binary (shipped inside the ``imageio-ffmpeg`` wheel) is not available,
:func:`open_video` falls back to a GIF next to the requested path. A GIF keeps its
frames in memory as 8-bit palette images (about 60 KB per 240x256 frame) until it is
written. Pillow merges identical consecutive GIF frames; the caption drawn by
:func:`annotate` carries the step number, so consecutive frames of an annotated video
always differ and the frame count stays one per step.

Importing this module is cheap: OpenCV, Pillow and imageio-ffmpeg load on first use.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.common.errors import UserError
from pipeline.common.files import commit, discard, temp_beside

__all__ = [
    "VIDEO_SUFFIXES",
    "VideoWriter",
    "annotate",
    "ffmpeg_available",
    "open_video",
    "video_fps",
]

logger = logging.getLogger(__name__)

VIDEO_SUFFIXES = (".mp4", ".gif")
NES_FPS = 60.0
SMALL_FRAME_WIDTH = 160  # frames narrower than this (Catch's 84x84) are upscaled for viewing


# ---------------------------------------------------------------------- output paths


# ---------------------------------------------------------------------- frames


def video_fps(env_id: str, frame_skip: int) -> float:
    """Playback rate for one video frame per agent step, so the video runs in real time.

    The NES runs at 60 frames/s and an agent step lasts ``frame_skip`` of them; Catch
    has no emulator and plays at 15 steps/s.
    """
    if env_id.startswith("Catch"):
        return 15.0
    return NES_FPS / max(1, int(frame_skip))


def annotate(frame: np.ndarray, text: str) -> np.ndarray:
    """Return a copy of an RGB frame with ``text`` on a dark band along its bottom.

    Frames narrower than 160 pixels (Catch) are first upscaled by an integer factor
    (nearest neighbour) so the text is legible; Mario frames keep their 240x256 size.
    """
    import cv2

    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB frame, got {frame.shape} {frame.dtype}")
    height, width = frame.shape[:2]
    if width < SMALL_FRAME_WIDTH:
        factor = -(-240 // width)  # ceil: 84 -> x3 = 252 pixels
        out = cv2.resize(frame, (width * factor, height * factor), interpolation=cv2.INTER_NEAREST)
    else:
        out = frame.copy()
    height, width = out.shape[:2]
    band = 12
    # Darken the bottom band (50%) so white text reads on any background.
    out[height - band :] //= 2
    cv2.putText(out, text, (3, height - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.33, (255, 255, 255), 1, cv2.LINE_AA)
    return out


# ---------------------------------------------------------------------- writers


def ffmpeg_available() -> bool:
    """Whether imageio-ffmpeg and its ffmpeg binary can be used."""
    try:
        import imageio_ffmpeg

        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # noqa: BLE001 - not installed, or no binary for this platform
        return False
    return bool(exe) and os.path.exists(exe)


class VideoWriter:
    """Append RGB frames one at a time; ``close()`` finishes the file and renames it into place.

    Args:
        path: destination, ``.mp4`` or ``.gif``.
        fps: playback frames per second.
        threads: encoder threads for MP4 (0 = ffmpeg's choice); 1 keeps a background
            encoder off the other cores.
    """

    def __init__(self, path: str | os.PathLike[str], fps: float, *, threads: int = 0) -> None:
        self.path = Path(path)
        self.format = self.path.suffix.lower().lstrip(".")
        if self.format not in ("mp4", "gif"):
            raise ValueError(f"unsupported video format {self.path.suffix!r}: use .mp4 or .gif")
        self.fps = float(fps)
        self.threads = int(threads)
        self.frames = 0
        self.size: tuple[int, int] | None = None  # (height, width)
        self._closed = False
        self._tmp = temp_beside(self.path)
        self._encoder: Any = None
        self._gif_frames: list[Any] = []

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _start_mp4(self, height: int, width: int) -> None:
        import imageio_ffmpeg

        output_params = ["-preset", "veryfast", "-movflags", "+faststart"]
        if self.threads:
            output_params += ["-threads", str(self.threads)]
        self._encoder = imageio_ffmpeg.write_frames(
            str(self._tmp),
            (width, height),
            fps=self.fps,
            codec="libx264",
            pix_fmt_in="rgb24",
            pix_fmt_out="yuv420p",
            quality=8,
            macro_block_size=2,
            ffmpeg_log_level="error",
            output_params=output_params,
        )
        self._encoder.send(None)  # start ffmpeg

    def append(self, frame: np.ndarray) -> None:
        """Add one (H, W, 3) uint8 RGB frame; every frame must have the first one's size."""
        if self._closed:
            raise RuntimeError(f"video {self.path} is already closed")
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(f"expected an (H, W, 3) uint8 RGB frame, got {frame.shape} {frame.dtype}")
        height, width = frame.shape[:2]
        if self.size is None:
            if height % 2 or width % 2:
                raise ValueError(f"frame size {width}x{height} must be even for yuv420p video")
            self.size = (height, width)
            if self.format == "mp4":
                self._start_mp4(height, width)
        elif self.size != (height, width):
            raise ValueError(f"frame of {width}x{height} in a {self.size[1]}x{self.size[0]} video")
        if self.format == "mp4":
            self._encoder.send(np.ascontiguousarray(frame))
        else:
            from PIL import Image

            # Palette images: a quarter of the memory of RGB, and what a GIF stores anyway.
            self._gif_frames.append(Image.fromarray(frame, "RGB").quantize(colors=256, dither=Image.Dither.NONE))
        self.frames += 1

    def close(self) -> Path:
        """Finish encoding and move the file to ``path``; return ``path``."""
        if self._closed:
            return self.path
        self._closed = True
        try:
            if self.frames == 0:
                raise ValueError(f"no frames were written to {self.path}")
            if self.format == "mp4":
                self._encoder.close()  # waits for ffmpeg to finish the file
                self._encoder = None
            else:
                first, *rest = self._gif_frames
                duration_ms = max(20, int(round(1000.0 / self.fps / 10.0)) * 10)  # GIF counts centiseconds
                first.save(
                    self._tmp,
                    format="GIF",
                    save_all=True,
                    append_images=rest,
                    duration=duration_ms,
                    loop=0,
                    optimize=False,
                )
                self._gif_frames = []
            commit(self._tmp, self.path)
        except BaseException:
            self._discard()
            raise
        return self.path

    def abort(self) -> None:
        """Stop without producing a file (the temporary file is removed)."""
        if self._closed:
            return
        self._closed = True
        self._discard()

    def _discard(self) -> None:
        if self._encoder is not None:
            try:
                self._encoder.close()
            except Exception:  # noqa: BLE001 - the file is thrown away anyway
                pass
            self._encoder = None
        self._gif_frames = []
        discard(self._tmp)


def open_video(path: str | os.PathLike[str], fps: float, *, threads: int = 0) -> VideoWriter:
    """A :class:`VideoWriter` for ``path``; an ``.mp4`` becomes a ``.gif`` without ffmpeg.

    The returned writer's ``path`` is the file that will be written.
    """
    path = Path(path)
    if path.suffix.lower() == ".mp4" and not ffmpeg_available():
        fallback = path.with_suffix(".gif")
        logger.warning("imageio-ffmpeg is not available; writing %s instead of %s", fallback, path)
        path = fallback
    if path.suffix.lower() == ".gif":
        try:
            import PIL  # noqa: F401
        except ImportError:
            raise UserError(
                f"cannot write {str(path)!r}: neither imageio-ffmpeg (for .mp4) nor Pillow (for .gif) is "
                "installed; pip install imageio-ffmpeg"
            ) from None
    return VideoWriter(path, fps, threads=threads)
