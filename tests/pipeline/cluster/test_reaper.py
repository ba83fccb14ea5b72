"""The node agent's reaper on real processes and real shared memory (no Ray needed).

A stand-in agent (a process that creates a segment and starts its reaper, as the agent
does) is SIGKILLed: no code of its own runs, and the reaper unlinks the segment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing import resource_tracker
from pathlib import Path

from pipeline.cluster import reaper
from pipeline.transport.segments import PREFIX, SHM_DIR, create_segment, release
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[3]
# The agent's part: its segment, out of the resource tracker's hands (Ray kills the
# tracker with the agent, so it cleans nothing up), then the reaper, then wait to be killed.
STAND_IN = """
import os, sys, time
from multiprocessing import resource_tracker
from pipeline.cluster import reaper
from pipeline.transport.segments import PREFIX, create_segment
name = f"{PREFIX}reapertest_{os.getpid()}_ring"
segment = create_segment(name, 4096)
resource_tracker.unregister(segment._name, "shared_memory")
assert reaper.launch(os.getpid(), PREFIX, [name])
print(name, flush=True)
time.sleep(600)
"""


def reapers_of(pid: int) -> list[int]:
    """Live reaper processes watching ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"reaper.py") for a in args) and str(pid).encode() in args:
            found.append(int(entry.name))
    return found


def test_an_agent_killed_by_sigkill_has_its_segment_unlinked_by_its_reaper():
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        name = proc.stdout.readline().strip()
        assert name.startswith(f"{PREFIX}reapertest_") and (SHM_DIR / name).exists()
        (watcher,) = reapers_of(proc.pid)
        # Not the agent's child, nor in its process group: what Ray kills with the agent.
        assert watcher not in {p.pid for p in _children(proc.pid)}
        assert os.getpgid(watcher) != os.getpgid(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    wait_until(lambda: not (SHM_DIR / name).exists(), 60, "the reaper to unlink the segment")
    wait_until(lambda: not reapers_of(proc.pid), 60, "the reaper to exit")


def test_the_reaper_leaves_when_the_agent_released_its_segments_and_touches_nothing_else():
    name = f"{PREFIX}reapertest_{os.getpid()}_weights"
    # Already released: it returns at once, with nothing unlinked, though the agent lives.
    assert reaper.watch(os.getpid(), reaper.start_time(os.getpid()), PREFIX, [name], poll_s=0.01) == []
    segment = create_segment(name, 4096)
    resource_tracker.unregister(segment._name, "shared_memory")
    try:
        # Another process now holds the pid (its start time differs): the agent is gone.
        # Names that are not this project's segments of that pid are never unlinked, nor
        # that pid's segments under another prefix (another test worker's, say).
        other_prefix = f"x{PREFIX}reapertest_{os.getpid()}_ring"
        foreign = [f"{PREFIX}other_1_ring", "not_ours", f"{PREFIX}x_{os.getpid()}_../../etc", other_prefix]
        assert reaper.watch(os.getpid(), "0", PREFIX, [name, *foreign], poll_s=0.01) == [name]
        assert not (SHM_DIR / name).exists()
    finally:
        release(segment, unlink=False)
        (SHM_DIR / name).unlink(missing_ok=True)  # not through the tracker, which no longer knows it


def _children(pid: int) -> list:
    import psutil

    return psutil.Process(pid).children(recursive=True)
