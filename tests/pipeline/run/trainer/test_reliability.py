"""Fault injection on the real system: killed, hung and failing collectors, a killed
learner, and bad checkpoint files. Nothing is lost, nothing is leaked, training goes on.

Every test runs ``python main.py`` as a subprocess on the synthetic Catch env with real
collector processes and real shared memory.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest

from pipeline.learning.checkpoint import CHECKPOINT_PATTERN, load_checkpoint
from pipeline.run.collector.env_failures import ENV_ERROR_BACKOFF_S, ENV_ERROR_LIMIT
from pipeline.run.trainer.checkpoints import KEEP_CHECKPOINTS
from pipeline.transport import ring as R
from pipeline.transport.segments import project_segments, run_tag
from tests.conftest import wait_until
from tests.pipeline.producers import attached_ring
from tests.pipeline.run.trainer.test_trainer import ROOT, checkpoints, read_csv, training_started

pytestmark = pytest.mark.slow

BASE = ["--preset", "tiny", "--num-processes", "2", "--monitor", "log"]


def start(run: Path, *extra: str, env: dict[str, str] | None = None, new_session: bool = False):
    return subprocess.Popen(
        [sys.executable, "main.py", *BASE, "--run-dir", str(run.parent), "--run-name", run.name, *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
        start_new_session=new_session,
    )


def read_slots(run: Path, read: Callable[[R.Slot], int]) -> list[int]:
    """``read(slot)`` for each slot of the run's live ring; [] if there is no ring (yet, or any more)."""
    names = [name for name in project_segments(run_tag(run)) if name.endswith("_ring")]
    if len(names) != 1:
        return []
    try:
        with attached_ring(names[0]) as ring:
            values = [read(slot) for slot in ring.slots]
    except FileNotFoundError:
        return []
    resource_tracker.unregister(f"/{names[0]}", "shared_memory")  # the run owns and unlinks it
    return values


def collector_pids(run: Path) -> set[int]:
    """Live collector processes of a running main.py, by the pids they wrote into their ring
    slots (a killed one, even one not yet reaped, is not live)."""
    live = set()
    for pid in set(read_slots(run, lambda slot: int(slot.counters.pid))) - {0}:
        try:
            if psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                live.add(pid)
        except psutil.Error:  # exited while we looked
            pass
    return live


def slot_starts(run: Path) -> list[int]:
    """How many collector starts each ring slot has counted, read from the run's live ring.

    A replacement counts its start once it has attached the ring, which on a loaded box
    can be many seconds after its process appears."""
    return read_slots(run, lambda slot: int(slot.counters.starts))


def interrupt(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=450)
    return output


def assert_exactly_once(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    for slot in summary["slots"]:
        assert slot["consumed"] == slot["write_seq"] == slot["read_seq"], summary["slots"]
    assert summary["replay_inserted"] == sum(s["consumed"] for s in summary["slots"])
    return summary


def test_killed_collector_is_replaced_and_no_record_is_lost(tmp_path):
    run = tmp_path / "kill"
    proc = start(run, "--set", "envs_per_collector=2")  # a collector writes two ring slots
    try:
        wait_until(lambda: training_started(run), 600, proc=proc)
        wait_until(lambda: len(collector_pids(run)) == 2, 150, proc=proc)
        victims = collector_pids(run)
        victim = min(victims)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: len(collector_pids(run) - victims) == 1, 150, proc=proc)  # a new process on the slot
        updates_at_restart = float(read_csv(run / "metrics.csv")[-1]["updates"])
        wait_until(
            lambda: float(read_csv(run / "metrics.csv")[-1]["updates"]) > updates_at_restart + 20, 300, proc=proc
        )
        wait_until(
            lambda: float(read_csv(run / "metrics.csv")[-1]["restarts"]) >= 1, 50, proc=proc
        )  # the monitor shows it
        last_read: dict[str, list[int]] = {}  # what the ring said last, for the failure message

        def replacement_attached() -> bool:
            last_read["starts"] = sorted(slot_starts(run))
            return last_read["starts"] == [1, 1, 2, 2]

        try:
            wait_until(replacement_attached, 300, "the replacement to count its start on both slots", proc=proc)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the ring's slot starts read {last_read.get('starts')}") from None
        output = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "killed by signal 9" in output
    summary = assert_exactly_once(run)
    assert summary["restarts"] == 1
    assert sorted(s["starts"] for s in summary["slots"]) == [1, 1, 2, 2]  # both slots of the victim
    assert not project_segments(run_tag(run))


def test_hung_collector_is_detected_by_heartbeat_and_replaced(tmp_path):
    run = tmp_path / "hang"
    proc = start(run, "--set", "heartbeat_timeout_s=3")
    try:
        wait_until(lambda: training_started(run), 600, proc=proc)
        wait_until(lambda: len(collector_pids(run)) == 2, 150, proc=proc)
        victims = collector_pids(run)
        os.kill(min(victims), signal.SIGSTOP)
        wait_until(lambda: len(collector_pids(run) - victims) == 1, 300, proc=proc)
        output = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "heartbeat silent" in output
    summary = assert_exactly_once(run)
    assert summary["restarts"] == 1
    assert not psutil.pid_exists(min(victims)) or psutil.Process(min(victims)).status() == psutil.STATUS_ZOMBIE


def test_env_errors_are_logged_once_rebuilt_and_backed_off(tmp_path):
    run = tmp_path / "envfault"
    proc = start(run, env={"MARIO_INJECT_FAULTS": "0:env_error:150,1:env_error_always"})
    try:
        wait_until(lambda: training_started(run), 600, proc=proc)
        # Collector 1's log appears when it starts, which a loaded box can delay past the start
        # of training (collector 0 alone fills the replay): a missing log is not yet there.
        log1_path = run / "logs" / "collector-1.log"
        wait_until(lambda: log1_path.exists() and "backing off" in log1_path.read_text(), 300, proc=proc)
        # Collector 0 (the only one writing) past 300 steps, whatever the machine's speed: on
        # a loaded box its 100 steps after learning starts can take longer than the backoff.
        wait_until(lambda: float(read_csv(run / "metrics.csv")[-1]["steps"]) > 300, 300, proc=proc)
        output = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    summary = assert_exactly_once(run)
    slot0, slot1 = summary["slots"]
    # A one-off failure: logged with its traceback once, env rebuilt, the collector went on.
    log0 = (run / "logs" / "collector-0.log").read_text()
    assert log0.count("Traceback") == 1 and "injected environment fault at step 150" in log0
    assert slot0["env_errors"] == 1 and slot0["write_seq"] > 300 and slot0["starts"] == 1
    # A collector whose env always fails: reported clearly, backed off, not a tight loop.
    log1 = (run / "logs" / "collector-1.log").read_text()
    assert log1.count("Traceback") == 1 and "environment failures in the last" in log1
    # At most ENV_ERROR_LIMIT failures per backoff over the run's time (a tight loop makes
    # thousands), a bound that holds however long a loaded machine takes to stop.
    backoffs = summary["elapsed_s"] / ENV_ERROR_BACKOFF_S + 1
    assert ENV_ERROR_LIMIT <= slot1["env_errors"] <= ENV_ERROR_LIMIT * backoffs, (slot1, summary["elapsed_s"])
    assert summary["restarts"] == 0


def evaluator_pid(run: Path) -> int | None:
    log = run / "logs" / "evaluator.log"
    found = re.search(r"evaluator started \(pid (\d+)\)", log.read_text()) if log.exists() else None
    return int(found.group(1)) if found else None


def test_killed_evaluator_is_reported_and_training_goes_on(tmp_path):
    run = tmp_path / "evalkill"
    # One episode per evaluation: the evaluator runs at nice 10, so on one busy core (the
    # suite under taskset -c 0) its share is a few percent and ten episodes take minutes.
    proc = start(run, "--eval-interval", "1", "--set", "eval_episodes=1")
    try:
        wait_until(lambda: training_started(run) and evaluator_pid(run) is not None, 600, proc=proc)
        wait_until(lambda: float(read_csv(run / "metrics.csv")[-1]["evaluations"]) >= 1, 600, proc=proc, poll_s=0.5)
        os.kill(evaluator_pid(run), signal.SIGKILL)
        updates_at_kill = float(read_csv(run / "metrics.csv")[-1]["updates"])
        wait_until(lambda: float(read_csv(run / "metrics.csv")[-1]["updates"]) > updates_at_kill + 20, 300, proc=proc)
        output = interrupt(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert output.count("evaluator exited with code -9; training goes on without it") == 1, output[-3000:]
    summary = assert_exactly_once(run)
    assert summary["restarts"] == 0 and summary["evaluations"] >= 1  # collectors untouched
    assert not project_segments(run_tag(run))


def test_killed_learner_leaves_segments_that_the_next_start_removes_and_resume_continues(tmp_path):
    run = tmp_path / "learnerkill"
    proc = start(run, "--checkpoint-interval", "2", new_session=True)
    try:
        wait_until(lambda: training_started(run) and len(checkpoints(run)) >= 2, 600, proc=proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # learner, collectors and resource tracker at once
        proc.communicate(timeout=150)
    leaked = project_segments(run_tag(run))
    assert len(leaked) == 2, leaked  # the ring and the weights block of the dead learner
    saved = json.loads(json.dumps(load_checkpoint(checkpoints(run)[-1])["counters"]))

    target = saved["frames"] + 1500
    result = subprocess.run(
        [sys.executable, "main.py", *BASE, "--resume", str(run), "--total-frames", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "removed 2 shared-memory segment(s) left by a dead run" in result.stderr
    assert not project_segments(run_tag(run))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["counters"]["frames"] >= target
    assert summary["counters"]["updates"] > saved["updates"]


def test_checkpoints_rotate_and_best_is_kept(tmp_path):
    """Saved every second until more than KEEP_CHECKPOINTS have been written, then stopped
    with Ctrl-C: the newest KEEP_CHECKPOINTS stay (the final one among them) and best.pt.
    Stopped on what it wrote, not on a frame count, so a fast machine writes as many."""
    run = tmp_path / "rotate"
    proc = start(run, "--checkpoint-interval", "1")
    directory, seen = run / "checkpoints", set()

    def rotated_and_best() -> bool:
        names = {p.name for p in directory.iterdir()} if directory.exists() else set()
        seen.update(n for n in names if CHECKPOINT_PATTERN.match(n))
        return len(seen) > KEEP_CHECKPOINTS + 1 and "best.pt" in names

    wait_until(rotated_and_best, 600, "periodic checkpoints past the kept number, and best.pt", proc=proc)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output[-3000:]
    names = sorted(p.name for p in directory.iterdir())
    periodic = [n for n in names if CHECKPOINT_PATTERN.match(n)]
    seen.update(periodic)
    newest = sorted(seen, key=lambda n: int(CHECKPOINT_PATTERN.match(n)[1]))[-KEEP_CHECKPOINTS:]
    assert sorted(periodic) == sorted(newest) and KEEP_CHECKPOINTS == 3, (names, sorted(seen))
    assert "best.pt" in names
    assert not [n for n in names if n.endswith(".tmp")]


class _RunsCode:
    """A pickle that would run code when loaded without weights_only."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("kind", ["truncated", "random", "malicious", "foreign", "other_network"])
def test_bad_checkpoint_files_give_one_clear_error(tmp_path, kind):
    path = tmp_path / "ckpt-100.pt"
    marker = tmp_path / "pwned"
    if kind == "truncated":
        import torch

        torch.save({"learner": {"online": {"w": torch.zeros(1000)}}}, path)
        path.write_bytes(path.read_bytes()[:300])
    elif kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "malicious":
        path.write_bytes(pickle.dumps(_RunsCode(marker)))
    elif kind == "foreign":
        import torch

        torch.save({"something": torch.zeros(3)}, path)
    else:  # a well-formed checkpoint of a network with 12 actions; Catch has 3
        from models import QNetwork
        from pipeline.learning.checkpoint import capture_rng_state, save_checkpoint

        save_checkpoint(
            path,
            {
                "learner": {"online": QNetwork(12).state_dict()},
                "counters": {},
                # Saved with precise BN: an older config would be refused for its running average.
                "config": {"bn_calibration_states": 256},
                "rng": capture_rng_state(),
            },
        )
    result = subprocess.run(
        [sys.executable, "main.py", *BASE, "--resume", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("main.py: error:") and str(path) in lines[0], result.stderr
    assert not marker.exists()
    if kind == "other_network":
        assert "shape" in lines[0] or "action" in lines[0], lines[0]
    assert not project_segments(run_tag(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name])  # nothing created beside it


def test_a_collector_that_crashes_on_every_start_ends_the_run_with_its_cause(tmp_path):
    run = tmp_path / "crashloop"
    proc = start(run, env={"MARIO_INJECT_FAULTS": "1:crash_always"})
    try:
        output, _ = proc.communicate(timeout=3000)  # a safety net: five crashes and back-offs take ~20 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("main.py: error:")]
    assert len(errors) == 1, output[-3000:]
    assert "collector 1 exited with code 1 on each of its last 5 starts" in errors[0]
    assert "injected crash while starting" in errors[0]  # the cause, from its log
    # The crashed collector let go of the shared memory it had attached: no "Exception
    # ignored ... BufferError" from a segment closed at exit under a live view.
    assert "BufferError" not in output, output[-3000:]
    # The run stopped cleanly: final checkpoint, accounting, no segment left.
    summary = assert_exactly_once(run)
    assert summary["final_checkpoint"] and "last 5 starts" in summary["stop_reason"]
    assert not project_segments(run_tag(run))


def test_a_second_run_on_a_live_run_directory_is_refused(tmp_path):
    run = tmp_path / "locked"
    first = start(run)
    try:
        wait_until(lambda: (run / "run.lock").exists() and (run / "config.json").exists(), 600, proc=first)
        second = subprocess.run(
            [sys.executable, "main.py", *BASE, "--run-dir", str(run.parent), "--run-name", run.name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1500,
        )
        assert second.returncode == 2
        assert second.stderr.strip().splitlines()[-1] == (
            f"main.py: error: run directory {run} is in use by a live run (pid {first.pid}); stop that run, "
            "or pass another --run-name (or --run-dir)"
        )
        assert first.poll() is None  # the first run is untouched
        # It goes on to train. The refusal can come while it is still compiling, and a
        # Ctrl-C there ends the start-up with 130 by design; the clean stop (0) needs training.
        wait_until(lambda: training_started(run), 600, proc=first)
        interrupt(first)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0
