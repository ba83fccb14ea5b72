"""Atomic file writes and the output-path check every command that writes a file runs first.

A file the project writes (checkpoint, video, figure, JSON) is written to a hidden
temporary file in the destination's directory, flushed to disk, then renamed over the
destination with :func:`os.replace`: a reader sees the old file or the new one, never a
half-written one, and a crash or Ctrl-C leaves no temporary file behind. The temporary
name is ``.<name>.tmp-<random><suffix>``: hidden, recognisable, and with the
destination's suffix (encoders and savefig pick the format from it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pipeline.common.errors import UserError

logger = logging.getLogger(__name__)

TEMP_MARKER = ".tmp-"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temp_beside(path: Path) -> Path:
    """Create an empty hidden temporary file next to ``path`` (same file system) and return it."""
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}{TEMP_MARKER}", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    return Path(name)


def commit(temp: Path, path: Path) -> None:
    """Flush ``temp`` to disk and rename it over ``path``, with the permissions a plain
    ``open(path, "w")`` would have given (mkstemp makes it 0600)."""
    fd = os.open(temp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temp, 0o666 & ~_umask())
    os.replace(temp, path)


def discard(temp: Path) -> None:
    """Remove a temporary file; a failure is logged, never raised (we are already failing)."""
    try:
        temp.unlink(missing_ok=True)
    except OSError:
        logger.warning("could not remove temporary file %s", temp)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """Open a temporary file for writing; on a clean exit it replaces ``path``.

    On any exception (KeyboardInterrupt included) the temporary file is removed, the
    previous ``path`` is untouched, and the exception propagates.
    """
    path = Path(path)
    temp = temp_beside(path)
    try:
        with open(temp, mode) as handle:
            yield handle
        commit(temp, path)
    except BaseException:
        discard(temp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str, what: str = "output") -> None:
    """Write ``text`` to ``path`` atomically; an OSError becomes one :class:`UserError` line."""
    try:
        with atomic_write(path, "w") as handle:
            handle.write(text)
    except OSError as exc:
        raise UserError(
            f"cannot write {what} file {str(path)!r}: {exc.strerror or exc}; choose a writable path"
        ) from None


def check_output_path(path: str | os.PathLike[str], suffixes: tuple[str, ...], what: str = "output") -> Path:
    """Make sure ``path`` can be written (parent created if needed); return it as a Path.

    Probes the directory by creating and removing a temporary file, so a path under a
    regular file, in a read-only place or in ``/proc`` fails here, before any work is
    done, with one :class:`UserError` line naming the path and the fix.
    """
    path = Path(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise UserError(
            f"{what} file {str(path)!r} has an unsupported extension {path.suffix or '(none)'!r}; "
            f"use one of {', '.join(suffixes)}"
        )
    if path.is_dir():
        raise UserError(f"{what} path {str(path)!r} is a directory; give a file name ending in {suffixes[0]}")
    for ancestor in path.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise UserError(
                    f"cannot write {what} file {str(path)!r}: {str(ancestor)!r} is a file, not a "
                    "directory; choose a path in a writable directory"
                )
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot write {what} file {str(path)!r}: cannot create directory {str(path.parent)!r} "
            f"({exc.strerror or type(exc).__name__}); choose a path in a writable directory"
        ) from None
    try:
        probe = temp_beside(path)
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"cannot write {what} file {str(path)!r}: cannot create files in {str(path.parent)!r} ({reason}); "
            "choose a path in a writable directory"
        ) from None
    return path
