"""Shared-memory segment lifecycle: naming, creating, attaching, and removing stale ones.

The learner creates and unlinks every segment; collectors only attach and close. Segment
names carry a short tag of the run and the owner's pid::

    mario_<run-tag>_<owner-pid>_<kind>

so a later start can find segments whose owner is gone (a learner killed with SIGKILL)
and remove them. The ``mario_`` prefix can be changed with ``MARIO_SEGMENT_PREFIX``:
runs under different prefixes never see each other's segments, not even to remove a dead
one's. The test suite's parallel workers each take one, so one worker's fault tests (a
learner killed on purpose, its segments left to the next start) are not cleaned up under
them by a run in another. ``multiprocessing.shared_memory`` creates segments with mode 0o600
(owner-only), which is what we want for training data.

Python 3.11 registers a segment with the resource tracker on create *and* on attach.
Collectors are started from the learner (by its fork server, which hands each child the
learner's tracker), so they share the learner's tracker: their registrations collapse
into the learner's and the learner's ``unlink`` unregisters them once. No leak warnings,
and if the learner dies the tracker unlinks what it left behind.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from multiprocessing import shared_memory
from pathlib import Path

from pipeline.common.child import process_gone
from pipeline.common.errors import UserError

PREFIX_ENV = "MARIO_SEGMENT_PREFIX"
SHM_DIR = Path("/dev/shm")


def _prefix_from_environment() -> str:
    """``$MARIO_SEGMENT_PREFIX`` (default ``mario_``): lowercase letters and digits, then ``_``.

    Nothing else is allowed, so that the owner pid and the kind can still be read back
    from a name (:func:`owner_pid`) and a name stays a plain file name in /dev/shm.
    """
    prefix = os.environ.get(PREFIX_ENV, "mario_")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}_", prefix):
        raise UserError(
            f"{PREFIX_ENV}={prefix!r} is not a segment prefix: use 1-16 lowercase letters and digits "
            "(a letter first) and a final '_', e.g. mario_ (the default), or unset it"
        )
    return prefix


PREFIX = _prefix_from_environment()


def run_tag(run_dir: str | os.PathLike[str]) -> str:
    """A short stable tag for a run directory (segment names must stay short)."""
    return hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]


def segment_name(tag: str, kind: str, pid: int | None = None) -> str:
    return f"{PREFIX}{tag}_{os.getpid() if pid is None else pid}_{kind}"


class SegmentSpaceError(OSError):
    """/dev/shm cannot hold a new segment; the message has the sizes and the fix."""


def create_segment(name: str, size: int) -> shared_memory.SharedMemory:
    """Create a zero-filled segment (the kernel zero-fills new shared memory), its pages reserved.

    tmpfs hands out pages on first touch, so a segment larger than the free space of
    /dev/shm is created without complaint and a collector dies by SIGBUS at its first
    write to the missing pages, much later. ``posix_fallocate`` reserves every page now:
    a full /dev/shm fails here, with :class:`SegmentSpaceError`, and nothing is left behind.
    """
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        fd = os.open(SHM_DIR / name, os.O_RDWR)
    except FileNotFoundError:  # no /dev/shm (not Linux): nothing to reserve
        return segment
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        release(segment, unlink=True)
        free = shutil.disk_usage(SHM_DIR).free
        raise SegmentSpaceError(
            exc.errno,
            f"cannot reserve {size / 2**20:,.1f} MB of shared memory for {name} ({exc.strerror}; "
            f"{free / 2**20:,.1f} MB free in {SHM_DIR}); give /dev/shm more room (docker run --shm-size=1g) "
            "or lower ring_capacity / the number of collectors",
        ) from None
    finally:
        os.close(fd)
    return segment


def attach_segment(name: str) -> shared_memory.SharedMemory:
    return shared_memory.SharedMemory(name=name, create=False)


def release(segment: shared_memory.SharedMemory | None, *, unlink: bool) -> None:
    """Close (and, for the owner, unlink) a segment, tolerating repeated calls."""
    if segment is None:
        return
    try:
        segment.close()
    except BufferError:
        # A numpy view still exports the buffer; the mapping goes away with the process.
        pass
    if unlink:
        try:
            segment.unlink()
        except FileNotFoundError:
            pass


def owner_pid(name: str) -> int | None:
    parts = name[len(PREFIX) :].split("_") if name.startswith(PREFIX) else []
    if len(parts) < 3 or not parts[1].isdigit():
        return None
    return int(parts[1])


def project_segments(tag: str | None = None) -> list[str]:
    """Names of this project's segments in /dev/shm (optionally of one run)."""
    if not SHM_DIR.is_dir():
        return []
    start = PREFIX if tag is None else f"{PREFIX}{tag}_"
    return sorted(p.name for p in SHM_DIR.iterdir() if p.name.startswith(start))


def remove_stale_segments(tag: str | None = None) -> list[str]:
    """Unlink this project's segments whose owner process is gone; return their names."""
    removed = []
    for name in project_segments(tag):
        pid = owner_pid(name)
        if pid is not None and process_gone(pid):  # a zombie owner is gone too
            try:
                (SHM_DIR / name).unlink()
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed
