"""Segment naming, permissions, release, and the removal of stale segments."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import numpy as np
import pytest

from pipeline.common.child import process_gone, process_state
from pipeline.transport import segments
from tests.pipeline import producers as P

ROOT = Path(__file__).resolve().parents[3]
TAG = P.new_tag("shm")
CTX = mp.get_context("spawn")


def _dead_pid() -> int:
    """The pid of a child that has finished (and been reaped)."""
    child = CTX.Process(target=P.noop)
    child.start()
    child.join(30)
    assert child.exitcode == 0
    assert process_gone(child.pid)
    return child.pid


def _untracked_segment(name: str, size: int = 4096) -> None:
    """Create a segment and hide it from the resource tracker: only an explicit unlink (or
    remove_stale_segments) can remove it, as after a learner killed with SIGKILL."""
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    resource_tracker.unregister(segment._name, "shared_memory")
    segment.close()


def _unlink_quietly(name: str) -> None:
    try:
        (segments.SHM_DIR / name).unlink()
    except FileNotFoundError:
        pass


# ------------------------------------------------------------------------ names
def test_segment_names_carry_tag_and_pid():
    name = segments.segment_name(TAG, "ring")
    assert name == f"{segments.PREFIX}{TAG}_{os.getpid()}_ring"
    assert segments.owner_pid(name) == os.getpid()
    assert segments.segment_name(TAG, "weights", pid=4321) == f"{segments.PREFIX}{TAG}_4321_weights"
    assert segments.owner_pid(segments.segment_name(TAG, "weights", pid=4321)) == 4321
    # Kinds may contain underscores; the pid is still the second field.
    assert segments.owner_pid(segments.segment_name(TAG, "ring_b", pid=77)) == 77
    prefix = segments.PREFIX
    for foreign in (
        "psm_1234",
        prefix,
        f"{prefix}{TAG}",
        f"{prefix}{TAG}_12x_ring",
        "sem.mp-abc",
        f"x{prefix}{TAG}_1_ring",
    ):
        assert segments.owner_pid(foreign) is None, foreign


SHOW_PREFIX = """
from pipeline.transport import segments
name = segments.segment_name("t", "ring", pid=42)
print(segments.PREFIX, name, segments.owner_pid(name))
"""


def _with_prefix(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != segments.PREFIX_ENV}
    if value is not None:
        env[segments.PREFIX_ENV] = value
    return subprocess.run(
        [sys.executable, "-c", SHOW_PREFIX], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_prefix_comes_from_the_environment_and_a_bad_one_is_refused_in_one_line():
    """``MARIO_SEGMENT_PREFIX`` names the segments (the suite's xdist workers set one each);
    without it they are ``mario_``; a value that would break reading the pid back out of a
    name, or the file name itself, is refused with a message that says what to use."""
    assert _with_prefix(None).stdout.split() == ["mario_", "mario_t_42_ring", "42"]
    assert _with_prefix("gw3x_").stdout.split() == ["gw3x_", "gw3x_t_42_ring", "42"]
    for bad in ("Mario_", "mario", "mario_x_", "../x_", "_", "a" * 17 + "_"):
        result = _with_prefix(bad)
        assert result.returncode != 0, bad
        last = result.stderr.strip().splitlines()[-1]
        assert f"MARIO_SEGMENT_PREFIX={bad!r} is not a segment prefix" in last, last
        assert "lowercase letters and digits" in last and "mario_ (the default)" in last


def test_run_tag_is_short_stable_and_parseable(tmp_path):
    tag = segments.run_tag(tmp_path)
    assert tag == segments.run_tag(str(tmp_path)) == segments.run_tag(tmp_path / ".")
    assert tag != segments.run_tag(tmp_path / "other")
    assert len(tag) == 10 and "_" not in tag
    assert segments.owner_pid(segments.segment_name(tag, "ring")) == os.getpid()


# ------------------------------------------------------------------------ create / release
def test_create_segment_is_zeroed_private_and_listed():
    name = segments.segment_name(TAG, "perm")
    segment = segments.create_segment(name, 10_000)
    try:
        path = segments.SHM_DIR / name
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == 0o600, oct(mode)
        assert os.stat(path).st_uid == os.getuid()
        assert segment.size >= 10_000
        assert not np.frombuffer(segment.buf, np.uint8).any()
        assert name in segments.project_segments(TAG)
        assert name in segments.project_segments()
        # Another process-level attach sees the same bytes.
        other = segments.attach_segment(name)
        segment.buf[:3] = b"abc"
        assert bytes(other.buf[:3]) == b"abc"
        segments.release(other, unlink=False)
        assert path.exists()
    finally:
        segments.release(segment, unlink=True)
    assert not (segments.SHM_DIR / name).exists()
    # Releasing twice, or nothing, is harmless.
    segments.release(segment, unlink=True)
    segments.release(None, unlink=True)


def test_release_with_a_live_view_still_unlinks():
    name = segments.segment_name(TAG, "view")
    segment = segments.create_segment(name, 4096)
    view = np.frombuffer(segment.buf, np.uint8)
    segments.release(segment, unlink=True)  # close fails (exported view); unlink must not
    assert not (segments.SHM_DIR / name).exists()
    view[0] = 1  # the mapping itself stays valid while the view lives
    del view
    segment.close()  # now it can close; keeps the interpreter quiet at exit


# ------------------------------------------------------------------------ stale segments
def test_remove_stale_segments_removes_dead_owners_only():
    dead = _dead_pid()
    stale = segments.segment_name(TAG, "ring", pid=dead)
    stale_other_run = segments.segment_name(TAG + "x", "ring", pid=dead)
    alive_mine = segments.segment_name(TAG, "weights")
    alive_init = segments.segment_name(TAG, "ring", pid=1)  # pid 1 always exists
    _untracked_segment(stale)
    _untracked_segment(stale_other_run)
    mine = segments.create_segment(alive_mine, 4096)
    init_owned = segments.create_segment(alive_init, 4096)
    try:
        assert {stale, alive_mine, alive_init} <= set(segments.project_segments(TAG))
        removed = segments.remove_stale_segments(TAG)
        assert removed == [stale]
        assert not (segments.SHM_DIR / stale).exists()
        assert (segments.SHM_DIR / alive_mine).exists() and (segments.SHM_DIR / alive_init).exists()
        # Another run's segments are left to that run's tag.
        assert (segments.SHM_DIR / stale_other_run).exists()
        assert segments.remove_stale_segments(TAG + "x") == [stale_other_run]
        assert segments.remove_stale_segments(TAG) == []  # idempotent
    finally:
        segments.release(mine, unlink=True)
        segments.release(init_owned, unlink=True)
        _unlink_quietly(stale)
        _unlink_quietly(stale_other_run)


def test_remove_stale_segments_after_owner_killed():
    """A real owner process creates a segment and dies by SIGKILL without cleaning up."""
    child = CTX.Process(target=P.create_segment_and_die, args=(TAG, 8192))
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    name = segments.segment_name(TAG, "ring", pid=child.pid)
    try:
        assert (segments.SHM_DIR / name).exists(), "the dead owner's segment should still be there"
        assert segments.owner_pid(name) == child.pid
        leftover = segments.attach_segment(name)
        assert bytes(leftover.buf[:4]) == b"dead"
        leftover.close()
        # attach registered the name with our resource tracker; hand it back so the
        # tracker does not try to unlink it again at exit.
        resource_tracker.unregister(leftover._name, "shared_memory")
        assert segments.remove_stale_segments(TAG) == [name]
        assert not (segments.SHM_DIR / name).exists()
    finally:
        _unlink_quietly(name)


def test_remove_stale_segments_when_the_killed_owner_is_not_yet_reaped():
    """A learner killed by SIGKILL whose parent has not waited for it yet is a zombie: its
    pid still exists, and its segments are stale all the same."""
    child = CTX.Process(target=P.create_segment_and_die, args=(TAG, 8192))
    child.start()
    name = segments.segment_name(TAG, "ring", pid=child.pid)
    try:
        # Not joined: the dead child stays a zombie until this process reaps it.
        deadline = time.monotonic() + 30
        while process_state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the child should have died by SIGKILL"
            time.sleep(0.01)
        assert (segments.SHM_DIR / name).exists()
        assert segments.remove_stale_segments(TAG) == [name]
        assert not (segments.SHM_DIR / name).exists()
    finally:
        child.join(30)
        _unlink_quietly(name)
    assert child.exitcode == -signal.SIGKILL


def test_a_segment_larger_than_dev_shm_fails_at_creation_and_leaves_nothing():
    """Pages are reserved at creation: a full /dev/shm is an error now, never a SIGBUS later."""
    name = segments.segment_name(TAG, "toolarge")
    too_large = shutil.disk_usage(segments.SHM_DIR).free + 2**30
    with pytest.raises(segments.SegmentSpaceError, match="cannot reserve .* MB of shared memory") as info:
        segments.create_segment(name, too_large)
    assert info.value.errno == errno.ENOSPC
    assert not (segments.SHM_DIR / name).exists()
    # A segment that fits is fully backed: every page is allocated up front.
    segment = segments.create_segment(segments.segment_name(TAG, "backed"), 4 * 2**20)
    try:
        assert os.stat(segments.SHM_DIR / segment.name).st_blocks * 512 >= 4 * 2**20
    finally:
        segments.release(segment, unlink=True)
