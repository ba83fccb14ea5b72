"""The replay file: a zip of ``.npy`` members plus a JSON header, written atomically.

This module knows the container (zip, deflate, ``.npy`` members, the header, atomic
writes, strict reading); :meth:`pipeline.learning.replay.ReplayMemory.save` and
``restore`` decide what goes in it. The layout is the one ``np.savez_compressed`` writes
(``np.load(path)`` opens it, ``header.json`` aside), written with ``zipfile`` directly only
to choose the deflate level: level 1 is several times faster than ``savez_compressed``'s
default 6 on frames and the files are barely larger (see ``ReplayMemory.save``).

Reading never unpickles anything and trusts nothing: every member is read with its
``.npy`` header checked against the dtype and shape the caller expects before any data is
read (a corrupt header cannot make it allocate gigabytes), data may be read straight into
the caller's buffer, and the zip CRC of each member is checked. Every failure (missing
file, not a zip, truncated, bad CRC, missing member, wrong dtype or shape, bad header)
becomes one :class:`ReplayFileError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.common.files import atomic_write

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "ReplayFileError", "ReplayReader", "write_replay_file"]

FORMAT_NAME = "mario-dqn-replay"
FORMAT_VERSION = 1
HEADER_MEMBER = "header.json"
# zlib level for the .npy members: 1 is the fast end (see the module docstring).
DEFAULT_COMPRESSLEVEL = 1
_READ_CHUNK = 1 << 24  # bytes per readinto call when filling a buffer
_HEADER_LIMIT = 1 << 20  # a header this large is corrupt, not a replay header

# What a broken file can raise from zipfile/zlib/numpy while we read it.
_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error, UnicodeDecodeError)


class ReplayFileError(ValueError):
    """A replay file that cannot be restored: missing, corrupt, truncated or of another geometry."""


def write_replay_file(
    path: str | os.PathLike[str],
    header: dict[str, Any],
    arrays: Iterable[tuple[str, np.ndarray]],
    compresslevel: int = DEFAULT_COMPRESSLEVEL,
) -> None:
    """Write ``header`` and the named arrays to ``path`` atomically (temp file + fsync + rename).

    ``arrays`` may be a generator: each array is compressed and written before the next is
    requested, so a caller can move one stream at a time off the GPU. Names must be unique.
    """
    head = dict(header, format=FORMAT_NAME, version=FORMAT_VERSION)
    with (
        atomic_write(path) as handle,
        zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=compresslevel) as archive,
    ):
        archive.writestr(HEADER_MEMBER, json.dumps(head, sort_keys=True))
        for name, array in arrays:
            # force_zip64: the size is unknown when the member is opened (same as numpy's savez).
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


class ReplayReader:
    """An open replay file; use as a context manager. ``header`` is the parsed JSON header."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path, "r")
        except FileNotFoundError as exc:
            raise ReplayFileError(f"replay file {self.path} does not exist") from exc
        except _READ_ERRORS as exc:
            raise self.error(f"not a readable replay file ({type(exc).__name__}: {exc})") from exc
        try:
            self.header = self._read_header()
        except BaseException:
            self._zip.close()
            raise

    def __enter__(self) -> ReplayReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._zip.close()

    def error(self, what: str) -> ReplayFileError:
        return ReplayFileError(f"replay file {self.path}: {what}")

    def _read_header(self) -> dict[str, Any]:
        try:
            info = self._zip.getinfo(HEADER_MEMBER)
            if info.file_size > _HEADER_LIMIT:
                raise ValueError(f"header of {info.file_size} bytes")
            header = json.loads(self._zip.read(HEADER_MEMBER).decode("utf-8"))
        except _READ_ERRORS as exc:
            raise self.error(f"unreadable header ({type(exc).__name__}: {exc})") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise self.error("not a replay file (wrong format name)")
        if header.get("version") != FORMAT_VERSION:
            raise self.error(f"format version {header.get('version')!r}, this program reads {FORMAT_VERSION}")
        return header

    def header_value(self, key: str, kind: type | tuple[type, ...]) -> Any:
        """``header[key]`` checked to be of ``kind`` (bool is never accepted as an int)."""
        value = self.header.get(key)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise self.error(f"header field {key!r} is {value!r}")
        return value

    def geometry(self) -> dict[str, Any]:
        """The replay's geometry in the header (the keys of ``ReplayMemory.geometry``),
        type- and range-checked."""
        geo = {
            key: self.header_value(key, int) for key in ("num_streams", "capacity_per_stream", "frame_stack", "n_step")
        }
        geo["gamma"] = float(self.header_value("gamma", (int, float)))
        if min(geo["num_streams"], geo["capacity_per_stream"], geo["frame_stack"], geo["n_step"]) < 1:
            raise self.error(f"bad geometry {_describe_geometry(geo)}")
        return geo

    def require_geometry(self, expected: dict[str, Any]) -> None:
        """Raise unless the file's geometry equals ``expected`` (the memory restoring it)."""
        geo = self.geometry()
        if geo != expected:
            raise self.error(
                f"geometry mismatch: the file holds a replay of {_describe_geometry(geo)}, "
                f"this memory is {_describe_geometry(expected)}"
            )

    def read(self, name: str, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
        """Member ``name`` as a new array, which must have exactly ``dtype`` and ``shape``."""
        out = np.empty(shape, dtype=dtype)
        self.read_into(name, out)
        return out

    def read_into(self, name: str, out: np.ndarray) -> None:
        """Fill the C-contiguous ``out`` with member ``name``, which must match its dtype and shape.

        On error ``out`` may be partly overwritten.
        """
        if not (out.flags.c_contiguous and out.flags.writeable):
            raise ValueError("read_into needs a writable C-contiguous array")
        try:
            with self._zip.open(f"{name}.npy", "r") as member:
                version = np.lib.format.read_magic(member)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
                else:
                    raise ValueError(f"unsupported .npy version {version}")
                if dtype != out.dtype or tuple(shape) != out.shape or (fortran and out.ndim > 1):
                    raise self.error(
                        f"member {name!r} holds {dtype}{list(shape)}, expected {out.dtype}{list(out.shape)}"
                    )
                view = memoryview(out.reshape(-1).view(np.uint8))
                done = 0
                while done < len(view):
                    got = member.readinto(view[done : done + _READ_CHUNK])
                    if not got:
                        raise EOFError(f"member {name!r} ends after {done} of {len(view)} data bytes")
                    done += got
                # Reading past the end makes zipfile verify the member's CRC.
                if member.read(1):
                    raise ValueError(f"member {name!r} has trailing data")
        except ReplayFileError:
            raise
        except _READ_ERRORS as exc:
            raise self.error(f"cannot read {name!r} ({type(exc).__name__}: {exc})") from exc


def _describe_geometry(geometry: dict[str, Any]) -> str:
    """``key=value, ...``: a geometry as error messages name it."""
    return ", ".join(f"{key}={value}" for key, value in geometry.items())
