"""Faults around a run's writes and startup: a disk that fills up during periodic
checkpoints, Ctrl-C during the learner's compile warm-up and during the final evaluation,
and a ``--resume`` checkpoint that cannot load this run.

The end-to-end tests run ``python main.py`` as a user would, with real collector
processes and real shared memory, on the synthetic Catch env (the ``tiny`` preset).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import envs
from config import PRESETS, Config
from pipeline.learning.checkpoint import load_checkpoint, save_checkpoint
from pipeline.learning.learner import Learner
from pipeline.learning.learner_compile import caused_by_interrupt
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.run.monitor.keys import COUNTER_KEYS
from pipeline.run.trainer.checkpoints import checkpoint_payload
from pipeline.run.trainer.interrupts import StartupInterrupts
from pipeline.run.trainer.pieces import check_resume, network_mismatch, save_replay, saved_replay_problem
from pipeline.run.trainer.write_failures import WriteFailures
from pipeline.transport.segments import project_segments, run_tag
from tests.pipeline.run.trainer.test_pieces import filled_replay
from tests.pipeline.run.trainer.test_trainer import ROOT, checkpoints

TOTAL_FRAMES = 3000
CHECKPOINT_INTERVAL_S = 1.0
# Catch's checkpoints (online and target net, Adam state) take 25.7 MB: the disk holds one.
TMPFS_MB = 40


class LoggedRun:
    """A ``main.py`` process in a session of its own (a Ctrl-C to its group reaches only it),
    its output read line by line (with arrival times) as it comes."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, text: str, timeout_s: float) -> float:
        """When ``text`` appeared in a line (a safety net, not a budget)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line:
                    return at
            if self.proc.poll() is not None:
                self._reader.join(5)
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"no line with {text!r} (exit code {self.proc.returncode}):\n{self.output[-3000:]}")

    def interrupt(self) -> None:
        """Ctrl-C as a terminal sends it: to the whole process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def finish(self, timeout_s: float) -> int:
        """The exit code; past ``timeout_s`` (a safety net) Ctrl-C, then SIGKILL, and fail."""
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"still running after {timeout_s} s:\n{self.output[-3000:]}") from None
        self._reader.join(10)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.interrupt()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def tmpfs_available(where: Path) -> bool:
    """Whether a tmpfs can be mounted in a private mount namespace here (root and unshare)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    probe = f"mount -t tmpfs -o size=1m tmpfs {where}"
    result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", probe], capture_output=True)
    return result.returncode == 0


def main_args(run: Path, *extra: str) -> list[str]:
    return ["--preset", "tiny", "--monitor", "log", "--run-dir", str(run.parent), "--run-name", run.name, *extra]


# -- a disk that fills up during periodic checkpoints -------------------------------------


@pytest.mark.slow
def test_a_full_disk_is_reported_once_and_the_run_still_stops_at_total_frames(tmp_path):
    """The first periodic checkpoint fits, the next ones do not: reported once (what, where,
    free space), training and supervision go on, the run stops at --total-frames by
    itself, and the final checkpoint's failure is one clear error naming the good one.

    On a real full disk, a small tmpfs in a private mount namespace, where this machine
    allows one (root and unshare); elsewhere on a disk that full_disk_main simulates."""
    args = [*("--total-frames", str(TOTAL_FRAMES)), *("--checkpoint-interval", str(CHECKPOINT_INTERVAL_S))]
    mount = tmp_path / "disk"
    disk = "tmpfs" if tmpfs_available(mount) else "patched_writer"
    if disk == "tmpfs":
        run, kept = mount / "full", tmp_path / "kept"
        kept.mkdir()
        # The tmpfs lives as long as the namespace: what the test reads afterwards is
        # listed and copied out of it before the shell ends.
        script = (
            f"mount -t tmpfs -o size={TMPFS_MB}m tmpfs {mount} || exit 99; "
            f"{sys.executable} main.py {' '.join(main_args(run, *args))}; rc=$?; "
            f"ls -A {run}/checkpoints > {kept}/listing; cp {run}/checkpoints/ckpt-*.pt {kept}/; exit $rc"
        )
        command = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    else:
        run = tmp_path / "full"
        kept = run / "checkpoints"
        command = [sys.executable, "-m", "tests.pipeline.run.trainer.full_disk_main", *main_args(run, *args)]
    started = LoggedRun(command)
    code = started.finish(timeout_s=600)
    output = started.output
    assert code == 2, output[-3000:]

    reports = [(at, line) for at, line in started.lines if "WARNING periodic checkpoint" in line]
    assert len(reports) == 1, output[-3000:]
    report = reports[0][1]
    assert "not written" in report and "MB free on" in report and "training goes on" in report
    assert "the last good checkpoint is" in report and "no partial file is left" in report
    # It kept failing, silently: the run went on for many intervals after the report.
    stopping = [at for at, line in started.lines if "INFO stopping frames" in line]
    assert stopping and stopping[0] - reports[0][0] > 3 * CHECKPOINT_INTERVAL_S, output[-3000:]

    # Stopped by itself at --total-frames (a few frames in flight past it).
    frames = [int(m.group(1)) for m in re.finditer(r"INFO stopped frames (\d+)", output)]
    assert frames and TOTAL_FRAMES <= frames[-1] < TOTAL_FRAMES + 1000, output[-3000:]

    errors = [line for _, line in started.lines if line.startswith("main.py: error:")]
    assert len(errors) == 1 and "Traceback" not in output, output[-3000:]
    good = re.search(r"the last good checkpoint is (\S+ckpt-(\d+)\.pt)", errors[0])
    assert "the final checkpoint" in errors[0] and "not written" in errors[0] and good, errors[0]

    # The last good checkpoint is whole, and no partial file is left beside it.
    if disk == "tmpfs":
        names = (kept / "listing").read_text().split()
    else:
        names = [p.name for p in (run / "checkpoints").iterdir()]
    assert not [n for n in names if ".tmp-" in n], names
    newest = max((n for n in names if n.startswith("ckpt-")), key=lambda n: int(n[5:-3]))
    assert newest == f"ckpt-{good.group(2)}.pt", names
    state = load_checkpoint(kept / f"ckpt-{good.group(2)}.pt")
    assert state["counters"]["frames"] == int(good.group(2))
    assert not project_segments(run_tag(run))


# -- Ctrl-C during the compile warm-up ----------------------------------------------------


@pytest.mark.slow
def test_ctrl_c_during_the_compile_warm_up_stops_the_run(tmp_path):
    """A Ctrl-C a second into the learner's compile (a cold compile cache: seconds to
    minutes) ends the run promptly, exit 0 or 130, with no shared memory left, and
    nothing trained after it."""
    run = tmp_path / "ctrl-c"
    started = LoggedRun(
        [sys.executable, "main.py", *main_args(run, "--set", "compile=on")],
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
    )
    started.wait_for("warming up the learner", timeout_s=300)
    time.sleep(1.0)
    started.interrupt()
    sent = time.monotonic()
    code = started.finish(timeout_s=180)
    output = started.output
    assert code in (0, 130), output[-3000:]
    assert time.monotonic() - sent < 120, output[-3000:]
    assert "first update" not in output, output[-3000:]
    assert not project_segments(run_tag(run))
    assert (run / "run.lock").read_text() == ""  # released


@pytest.mark.slow
def test_ctrl_c_during_the_final_evaluation_skips_it_and_keeps_the_final_checkpoint(tmp_path):
    """A run that reached its frames waits for the final evaluation of its last weights;
    a Ctrl-C then ends the wait (not the shutdown): the final checkpoint is written, the
    evaluator goes, no shared memory is left, exit 0."""
    run = tmp_path / "final-eval"
    # An evaluation far too long to finish (100k Catch episodes) and no periodic one: the
    # run is still waiting for it when the Ctrl-C comes, however fast the machine.
    started = LoggedRun(
        [
            sys.executable,
            "main.py",
            *main_args(run, "--total-frames", str(TOTAL_FRAMES), "--eval-interval", "1000000"),
            *("--set", "eval_episodes=100000"),
        ]
    )
    started.wait_for("final evaluation of the last weights", timeout_s=600)
    time.sleep(1.0)
    started.interrupt()
    code = started.finish(timeout_s=180)
    output = started.output
    assert code == 0, output[-3000:]
    assert "final evaluation: skipped (Ctrl-C)" in output, output[-3000:]
    assert re.search(r"final checkpoint: .*ckpt-\d+\.pt \(reached 3000 frames\)", output), output[-3000:]
    assert load_checkpoint(checkpoints(run)[-1])["counters"]["frames"] >= TOTAL_FRAMES
    assert "evaluator stopping" in (run / "logs" / "evaluator.log").read_text()
    assert not project_segments(run_tag(run))
    assert (run / "run.lock").read_text() == ""


def test_a_startup_signal_is_remembered_even_when_its_interrupt_is_swallowed():
    # Whatever handler was there before comes back (an earlier test of the same process
    # may have left SIG_IGN, as a collector's entry point sets it).
    before = signal.getsignal(signal.SIGINT)
    with StartupInterrupts() as interrupts:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs at the next bytecode
        except KeyboardInterrupt:
            pass  # swallowed, as torch's compile machinery may do
        assert interrupts.received == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_a_compile_failure_caused_by_ctrl_c_is_an_interrupt_not_a_broken_compiler():
    killed = subprocess.CalledProcessError(-signal.SIGINT, ["g++"])
    try:
        try:
            raise killed
        except subprocess.CalledProcessError as exc:
            raise RuntimeError("BackendCompilerFailed: CppCompileError") from exc
    except RuntimeError as wrapped:
        assert caused_by_interrupt(wrapped)
    assert not caused_by_interrupt(RuntimeError("unknown backend"))
    assert not caused_by_interrupt(subprocess.CalledProcessError(1, ["g++"]))


# -- a checkpoint that cannot resume this run ---------------------------------------------


def write_checkpoint(run: Path, cfg: Config) -> Path:
    """A checkpoint as the trainer writes it, of a fresh learner shaped by ``cfg``."""
    num_actions = envs.num_actions(cfg.env_id, cfg.action_set)
    learner = Learner(num_actions, LearnerSettings.from_config(cfg, compile=False, amp=False, device="cpu"))
    totals = dict.fromkeys(COUNTER_KEYS, 0) | {"frames": 1000}
    path = run / "checkpoints" / "ckpt-1000.pt"
    save_checkpoint(path, checkpoint_payload(learner, totals, cfg, num_actions))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("preset", "saved", "flags", "named"),
    [
        # The case: a Mario run resumed with another action set, compile/amp=auto
        # (whose timing, uncached, would take minutes before the trainer starts).
        ("cpu", {"env_id": "SuperMarioBros-1-1-v0"}, ["--set", "action_set=complex"], "action_set"),
        ("tiny", {}, ["--set", "frame_stack=2"], "frame_stack"),
    ],
)
def test_a_mismatched_resume_fails_before_anything_is_measured_or_started(tmp_path, preset, saved, flags, named):
    run = tmp_path / "saved"
    write_checkpoint(run, Config(**{**PRESETS[preset], **saved}))
    before = sorted(p.name for p in run.rglob("*"))
    cache = tmp_path / "cache"
    command = [sys.executable, "main.py", "--preset", preset, "--resume", str(run), *flags]
    command += ["--set", "compile=auto", "--set", "amp=auto", "--monitor", "log"]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, MARIO_DQN_CACHE=str(cache))
    )
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("main.py: error: cannot resume from"), result.stderr
    assert named in lines[0] and f"--set {named}=" in lines[0]
    assert "warming up" not in result.stderr + result.stdout
    assert not cache.exists() or not list(cache.iterdir())  # the learner timing never ran
    assert sorted(p.name for p in run.rglob("*")) == before  # no lock, log or config written
    assert not project_segments(run_tag(run))


@pytest.mark.parametrize("value", [False, True])
def test_a_checkpoint_of_a_removed_option_resumes_at_todays_value_else_is_refused(tmp_path, capsys, value):
    """A checkpoint saved before the option removal resumes when it holds a removed option
    at the value the code now always has; otherwise main.py refuses it in one line before
    anything starts."""
    from main import main

    run = tmp_path / "saved"
    path = write_checkpoint(run, Config(**PRESETS["tiny"]))
    state = load_checkpoint(path)
    state["config"]["batch_renorm"] = value  # as the code before the tag saved it
    save_checkpoint(path, state)
    if not value:
        check_resume({"resume": str(run)}, "tiny")  # resumes as before
        return
    before = sorted(p.name for p in run.rglob("*"))
    assert main(["--preset", "tiny", "--resume", str(run)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"main.py: error: checkpoint {path} was trained with batch_renorm=True, an option removed after "
        "the tag pre-option-removal (commit 8669a59); check out that tag to resume or evaluate it"
    ]
    assert sorted(p.name for p in run.rglob("*")) == before  # no lock, log or config written


def test_resume_checks_name_the_setting_that_changes_the_network():
    cfg = Config(**PRESETS["tiny"])
    state = {"config": cfg.to_dict(), "num_actions": 3}
    assert network_mismatch(state, cfg, 3) == ""
    two_frames = {"config": {**cfg.to_dict(), "frame_stack": 2}, "num_actions": 3}
    assert network_mismatch(two_frames, cfg, 3).startswith("its network was trained with frame_stack=2")
    assert "--set frame_stack=2" in network_mismatch(two_frames, cfg, 3)
    assert network_mismatch(two_frames, Config(**{**PRESETS["tiny"], "frame_stack": 2}), 3) == ""
    mario = Config(env_id="SuperMarioBros-1-1-v0", action_set="complex")
    message = network_mismatch({"config": Config(action_set="simple").to_dict(), "num_actions": 7}, mario, 12)
    assert "7 actions" in message and "--set action_set=simple" in message
    default = Config()  # a Catch checkpoint resumed on Mario
    message = network_mismatch(state, default, envs.num_actions(default.env_id, default.action_set))
    assert "--env Catch-v0" in message


def test_a_saved_replay_of_another_geometry_is_found_from_its_header(tmp_path):
    save_replay(filled_replay(), tmp_path)  # 2 streams of 512, n_step 3
    assert saved_replay_problem(Config(replay_capacity=1024, n_step=3), 2, tmp_path) == ""
    problem = saved_replay_problem(Config(replay_capacity=1024, n_step=3), 4, tmp_path)
    assert "num_streams 2 -> 4" in problem and "capacity_per_stream 512 -> 256" in problem
    assert saved_replay_problem(Config(), 2, tmp_path / "none") == ""


def test_a_write_that_keeps_failing_is_reported_once(caplog):
    failures = WriteFailures()
    with caplog.at_level("INFO", logger="mario.trainer"):
        for _ in range(5):
            failures.failed("periodic checkpoint", "periodic checkpoint X not written")
        failures.succeeded("periodic checkpoint", "Y")
        failures.failed("periodic checkpoint", "periodic checkpoint Z not written")
    messages = [r.getMessage() for r in caplog.records]
    assert failures.reports == 2 and messages[0] == "periodic checkpoint X not written"
    assert "written again (Y) after 5 failed attempt(s)" in messages[1] and len(messages) == 3
