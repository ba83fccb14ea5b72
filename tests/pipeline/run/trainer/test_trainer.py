"""End to end: real collector processes, real shared memory, the real learner.

These run ``python main.py`` as a user would (a subprocess), on the synthetic Catch env
so they finish in minutes on two CPU cores.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs import make_env
from models import QNetwork
from pipeline.common.gauges import STEADINESS_GAUGES
from pipeline.learning.checkpoint import load_checkpoint
from pipeline.learning.episode_loop import single_thread_torch
from pipeline.learning.policy import load_policy
from pipeline.learning.shipped import acting_weights
from pipeline.transport.segments import project_segments, run_tag
from tests.conftest import run_main, wait_until

ROOT = Path(__file__).resolve().parents[4]
EVAL_LAG_FRAMES = 1000  # training waits once an evaluation is this many frames overdue
LEARN_FRAMES = 5_000  # Catch is learned within it (see the learning test)
EVAL_INTERVAL_FRAMES = 2_000  # 3 evaluations in LEARN_FRAMES, the last of them the final one


def start_main(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "main.py", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def checkpoints(run: Path) -> list[Path]:
    """Periodic checkpoints, oldest first (by the frame count in the name)."""
    return sorted((run / "checkpoints").glob("ckpt-*.pt"), key=lambda p: int(p.stem.split("-")[1]))


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def training_started(run: Path) -> bool:
    """Whether the run's metrics.csv shows updates: training is under way."""
    path = run / "metrics.csv"
    return path.exists() and any(float(r["updates"] or 0) > 0 for r in read_csv(path))


def greedy_return(checkpoint: Path, episodes: int = 20) -> tuple[float, float]:
    """Mean greedy return of a checkpoint's acting network (the one ``eval``, ``play`` and
    ``export`` take from it) on Catch, and Catch's optimal return."""
    state = load_checkpoint(checkpoint)
    cfg = state["config"]
    model = QNetwork(state["num_actions"], cfg["frame_stack"], quantiles=cfg["quantiles"]).eval()
    model.load_state_dict(acting_weights(state))
    env = make_env("Catch-v0", seed=123)
    returns = []
    stack = np.zeros((cfg["frame_stack"], 84, 84), np.uint8)
    # One thread: a batch-1 forward gains nothing from two, and with the other core busy
    # two threads wait on each other (measured: 3.5x slower beside one busy loop, 25x
    # beside a training run; 100 episodes took 4 minutes instead of 10 s).
    with single_thread_torch(), torch.inference_mode():
        for episode in range(episodes):
            obs, _ = env.reset(seed=1000 + episode)
            stack[:] = obs
            total, done = 0.0, False
            while not done:
                action = int(model(torch.from_numpy(stack)[None]).argmax(1))
                obs, reward, terminated, truncated, _ = env.step(action)
                stack[:-1] = stack[1:]
                stack[-1] = obs
                total += reward
                done = terminated or truncated
            returns.append(total)
    return float(np.mean(returns)), float(env.unwrapped.optimal_return)


@pytest.mark.slow
def test_whole_pipeline_learns_catch_and_the_evaluator_sees_it(tmp_path):
    """Collectors + consolidator + learner learn Catch: the evaluator running beside them
    sees a greedy policy at >= 70% of the optimal return, and reports it through the
    monitor, CSV, TensorBoard and summary.json with the best episode's video; the run
    ends with a final evaluation of its last weights; the final checkpoint, evaluated
    here on other seeds, catches more balls than it misses.

    Training waits for the evaluator (eval_max_lag_frames), so it evaluates at every
    multiple of the interval however small its share of the CPU: pinned to one core
    beside a busy one, a niced evaluator that training did not wait for finished 2
    evaluations in 40k frames.

    The budget is work, not time (the replay ratio holds, so a slow machine learns as much
    per frame): LEARN_FRAMES. Eight runs (seeds 0-7, python main.py --preset tiny
    --num-processes 2 --total-frames 6000 --eval-interval 1000 --seed S, the rest as below)
    read 0.8-5.0 of 5 at 3k frames, 1.8-5.0 at 4k and 4.6-5.0 at 5k (seven of them 5.0).
    5k frames also make the ~600 updates of which the steadiness probe needs 400.
    """
    result = run_main(
        [
            "--preset",
            "tiny",
            "--num-processes",
            "2",
            "--total-frames",
            str(LEARN_FRAMES),
            "--run-dir",
            str(tmp_path),
            "--run-name",
            "learn",
            "--monitor",
            "log",
            "--eval-interval",
            str(EVAL_INTERVAL_FRAMES),  # an evaluation at each multiple, however fast the machine
            "--set",
            f"eval_max_lag_frames={EVAL_LAG_FRAMES}",  # ... because training waits for one overdue
            "--set",
            "eval_episodes=10",
            "--set",
            "eval_epsilon=0",  # greedy: the 70 % bar below is for the policy itself
        ],
        cwd=ROOT,
        timeout_s=1500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "learn"
    mean_return, optimal = greedy_return(checkpoints(run)[-1])
    # A random policy scores about -2.9 of 5 (it misses most balls). DQN's greedy policy
    # swings between nearby weights: one run's evaluations in its last 15k frames gave
    # 4.6, 4.4, 0.6, 3.2 and 5.0, and its final checkpoint 2.6 on these seeds. So the final
    # checkpoint is held to catching more balls than it misses (a return above 0); how
    # well the run learned is the best of the evaluator's evaluations (below). Its acting
    # copy, the average of the online weights, swings less than the online network: the
    # online one read -0.8 here once (pinned to one core beside two learning runs) while
    # the evaluator read 3.6 of the acting copy at the end.
    assert mean_return > 0, (mean_return, optimal, result.stderr[-2000:])
    rows = read_csv(run / "metrics.csv")
    assert float(rows[-1]["updates"]) > 0
    assert not project_segments(run_tag(run))

    # The steadiness probe (every 400 updates: the tiny preset's target copies, every 200,
    # spaced to at least MIN_INTERVAL_UPDATES) reaches metrics.csv, and the calibrated
    # network's train and eval modes agree on most probe states (0.94-0.98 in runs of seeds 0-3).
    measured = [row for row in rows if row["steady_agreement"] not in ("", "nan")]
    assert measured, "no steadiness figures in metrics.csv"
    steady = {key: float(measured[-1][key]) for key in STEADINESS_GAUGES}
    assert 0.5 <= steady["steady_agreement"] <= 1.0, steady
    assert 0.5 <= steady["steady_expected_agreement"] <= 1.0, steady  # against the 4 batchings' mean
    # Two train-mode batchings of a learned policy agree on most states, and a publish
    # changes the greedy action on few (an inverted share, 1 - churn, fails both); the
    # eval/train Q gap is under the return's whole range (Catch returns lie in [-5, 5]).
    assert 0.5 <= steady["steady_train_agreement"] <= 1.0, steady
    assert 0.0 <= steady["steady_churn"] < 0.5, steady
    assert 0.0 <= steady["steady_q_offset"] < 10.0, steady
    assert "learner_probe_pct" in rows[-1]  # its share of the learner's time

    # The evaluator: several evaluations of ever newer weights, and the agent it saw learned.
    log = (run / "logs" / "evaluator.log").read_text()
    evaluated = [r for r in rows if float(r["evaluations"]) > 0]
    assert evaluated, f"no evaluation reached metrics.csv; evaluator.log:\n{log[-3000:]}"
    count = int(float(rows[-1]["evaluations"]))
    # Every EVAL_INTERVAL_FRAMES from the first, and the final one: none skipped, because training
    # waits for an evaluation that is overdue (each starts at most the lag past its
    # multiple, so the next is due at the next multiple).
    frames = [int(f) for f in re.findall(r"weights v\d+ \(frames (\d+)", log)]
    assert count == len(frames) >= 3, (count, frames, log[-3000:])
    for a, b in zip(frames[:-2], frames[1:-1]):  # the final evaluation comes when the run ends
        assert b // EVAL_INTERVAL_FRAMES == a // EVAL_INTERVAL_FRAMES + 1, (frames, log[-3000:])
    versions = [float(r["eval_weights_version"]) for r in evaluated]
    assert versions == sorted(versions) and versions[-1] > versions[0]
    # A mean over 10 episodes; random play scores about -2.9 of 5. The best evaluation of a
    # run on one core was 4.2 of 5 once (0.84), and a run in a fresh clone on a quiet 2-core
    # box read 3.0, 3.2, 2.8, 2.6 and then 3.8 at each of its last four evaluations (0.76):
    # the bar is 70 % (3.5 of 5, about 4.25 balls of 5 caught), not 80 %.
    best_eval = max(float(r["eval_return"]) for r in evaluated)
    assert best_eval >= 0.7 * optimal, (best_eval, optimal, [r["eval_return"] for r in evaluated])
    assert "evaluation of weights v" in result.stderr  # announced by the monitor
    summary = json.loads((run / "summary.json").read_text())
    assert summary["evaluations"] == count
    assert summary["last_evaluation"]["episodes"] == 10
    # The last word is the final evaluation, of the weights the run ended with.
    final = summary["last_evaluation"]
    assert final["final"] and final["frames"] >= LEARN_FRAMES, final
    assert "final evaluation of weights v" in result.stderr
    tags = EventAccumulator(str(run / "tensorboard")).Reload().Tags()["scalars"]
    assert {"eval_return", "eval_x_pos", "eval_flag_rate"} <= set(tags)

    # The best episode's video: decodable, one frame per step of the episode in best.json.
    best = json.loads((run / "videos" / "best.json").read_text())
    assert best["return"] == summary["last_evaluation"]["best_return"] >= best_eval
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    assert imageio_ffmpeg.count_frames_and_secs(str(run / "videos" / "best.mp4"))[0] == best["length"]

    # It stopped with the run, by itself after the final evaluation.
    pid = int(re.search(r"evaluator started \(pid (\d+)\)", log).group(1))
    assert "evaluator stopping after the final evaluation" in log
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_sigint_stops_cleanly_and_resume_continues_counters(tmp_path):
    run = tmp_path / "interrupt"
    proc = start_main("--preset", "tiny", "--run-dir", str(tmp_path), "--run-name", "interrupt", "--monitor", "log")
    try:
        wait_until(lambda: training_started(run), 600, "training to start", proc=proc)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output
    first = checkpoints(run)
    assert first, output[-2000:]
    assert not project_segments(run_tag(run))
    before = load_checkpoint(first[-1])["counters"]
    assert before["updates"] > 0 and before["frames"] > 0

    target = before["frames"] + 2000
    result = run_main(
        [
            "--preset",
            "tiny",
            "--resume",
            str(run),
            "--total-frames",
            str(target),
            "--monitor",
            "log",
            "--set",
            "mark_interval_frames=500",
        ],
        cwd=ROOT,
        timeout_s=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    after = load_checkpoint(checkpoints(run)[-1])["counters"]
    assert after["frames"] >= target > before["frames"]
    assert after["updates"] > before["updates"]
    rows = read_csv(run / "metrics.csv")
    assert float(rows[-1]["frames"]) >= target  # the same CSV continues
    # Marks: every multiple of 500 frames passed after the resume point, the last included,
    # each a loadable policy taken at or just after its mark.
    # (Frames still in flight when the stop is asked for may pass one more mark unsaved.)
    marks = sorted((run / "checkpoints" / "marks").glob("frames-*.pt"))
    kept = [int(p.stem.split("-")[1]) for p in marks]
    first = (before["frames"] // 500 + 1) * 500
    assert kept == list(range(first, kept[-1] + 1, 500)) and kept[-1] > target - 500, kept
    for mark, path in zip(kept, marks):
        policy = load_policy(path)
        assert mark <= policy.frames < mark + 500 and policy.frames <= after["frames"]
        # Precise BN (the tiny preset keeps the default): a mark's statistics are
        # re-estimated for its own weights (over more states than a publish's), not left
        # from the last publish.
        saved = load_checkpoint(path)["learner"]
        assert saved["calibrated_at"] == saved["updates"] > 0, (path.name, saved["calibrated_at"], saved["updates"])
    final = load_checkpoint(checkpoints(run)[-1])["learner"]
    assert final["calibrated_at"] == final["updates"], (final["calibrated_at"], final["updates"])
    assert not project_segments(run_tag(run))


@pytest.mark.slow
def test_a_q_value_run_learns_catch_and_its_checkpoint_plays(tmp_path):
    """With quantiles=0 the whole system trains the Q-value learner (Double DQN, the Huber
    loss), as every run saved before QR-DQN became the default did: the checkpoint keeps
    that shape in its config, and its greedy policy catches more balls than it misses, as
    the default's must."""
    result = run_main(
        ["--preset", "tiny", "--num-processes", "2", "--run-dir", str(tmp_path), "--run-name", "qv"]
        + ["--total-frames", str(LEARN_FRAMES), "--monitor", "log", "--set", "quantiles=0"],
        cwd=ROOT,
        timeout_s=1500,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    final = checkpoints(tmp_path / "qv")[-1]
    assert load_checkpoint(final)["config"]["quantiles"] == 0
    mean_return, optimal = greedy_return(final)
    assert mean_return > 0, (mean_return, optimal, result.stderr[-2000:])
    policy = load_policy(final)
    assert policy.model.quantiles == 0


@pytest.mark.slow
def test_a_killed_run_resumes_with_its_periodically_saved_replay(tmp_path):
    """SIGKILL leaves no final checkpoint and no final replay save; with
    replay_save_interval_s the periodic replay file is there, and --resume restores it."""
    run = tmp_path / "killed"
    proc = start_main(
        *("--preset", "tiny", "--run-dir", str(tmp_path), "--run-name", "killed", "--monitor", "log"),
        *("--set", "replay_save_interval_s=2", "--set", "checkpoint_interval_s=2"),
    )
    try:
        saved = run / "checkpoints" / "replay.npz"

        def replay_saved_after_a_checkpoint_with_frames() -> bool:
            ckpts = [p for p in checkpoints(run) if int(p.stem.split("-")[1]) > 300]
            return bool(ckpts) and saved.exists() and saved.stat().st_mtime > ckpts[-1].stat().st_mtime

        wait_until(replay_saved_after_a_checkpoint_with_frames, 600, "a replay saved after a checkpoint", proc=proc)
        proc.kill()  # no final checkpoint, no shutdown: a crash
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = load_checkpoint(checkpoints(run)[-1])["counters"]["frames"]
    result = run_main(
        ["--preset", "tiny", "--resume", str(run), "--monitor", "log", "--total-frames", str(before + 500)],
        cwd=ROOT,
        timeout_s=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    restored = re.search(r"restored (\d+) transitions of replay", result.stderr)
    assert restored and int(restored.group(1)) > 0, result.stderr[-3000:]
    assert not project_segments(run_tag(run))  # the dead run's segments were cleaned up too
