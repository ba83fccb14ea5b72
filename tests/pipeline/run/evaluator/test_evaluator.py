"""The background evaluator against a real weights block: it evaluates at multiples of
its interval in the frames the block carries, results arrive through poll() without
blocking, the best episode becomes videos/best.mp4, the process is polite
(nice 10, SIGINT ignored), it goes away on stop() and on the block's stop flag, and with
several episodes at an epsilon it follows the evaluation protocol to the same figures."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from config import Config
from models import QNetwork
from pipeline.learning.episode_loop import build_env, single_thread_torch
from pipeline.learning.flat_state import flatten_state, state_numel
from pipeline.learning.policy import network_of
from pipeline.run.evaluator.evaluator import Evaluator
from pipeline.run.evaluator.protocol import EVAL_SEED_OFFSET, EvaluationProtocol, play_protocol, protocol_figures
from pipeline.transport import weights as W
from pipeline.transport.segments import SHM_DIR, create_segment, release, segment_name
from tests.pipeline import producers as P

TAG = P.new_tag("evaluator")
RESULT_TIMEOUT_S = 300.0  # a spawn child imports torch + the env, then plays Catch episodes


@pytest.fixture
def weights_block():
    """A weights block holding a fresh Catch QNetwork (version 1, published at frame 0);
    unlinked afterwards."""
    cfg = Config(env_id="Catch-v0", seed=11)
    torch.manual_seed(0)
    net = network_of(cfg, 3)
    num_floats = state_numel(net.state_dict())
    segment = create_segment(segment_name(TAG, "weights"), W.block_bytes(num_floats))
    block = W.WeightsBlock.initialise(segment.buf, num_floats)
    block.publish(flatten_state(net.state_dict()), learner_step=100, epsilon=0.5, frames=0)
    yield cfg, net, segment, block
    block.close()
    release(segment, unlink=True)
    assert not (SHM_DIR / segment.name).exists()


def wait_for_results(evaluator: Evaluator, count: int = 1) -> list[dict]:
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    results: list[dict] = []
    while len(results) < count:
        assert time.monotonic() < deadline, f"no evaluation within {RESULT_TIMEOUT_S} s (got {results})"
        assert evaluator.alive, f"evaluator died with exit code {evaluator.exitcode}"
        results += evaluator.poll()
        time.sleep(0.05)
    return results


def _proc_status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


def wait_for_start(evaluator: Evaluator, log: Path) -> None:
    """Until the evaluator process logs that its loop starts (it has imported and built its env)."""
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while not (log.exists() and "evaluator started" in log.read_text()):
        assert time.monotonic() < deadline, f"the evaluator did not start within {RESULT_TIMEOUT_S} s"
        assert evaluator.alive, f"evaluator died with exit code {evaluator.exitcode}"
        time.sleep(0.05)


def publish(block: W.WeightsBlock, net: QNetwork, *, learner_step: int, frames: int) -> None:
    block.publish(flatten_state(net.state_dict()), learner_step=learner_step, frames=frames)


def test_evaluates_at_multiples_of_its_interval_keeps_best_video_and_stops(tmp_path, weights_block):
    cfg, net, segment, block = weights_block
    evaluator = Evaluator(cfg, tmp_path, segment.name, interval_frames=1000, episodes=2, max_steps=100)
    assert evaluator.poll() == []  # before start: nothing, no blocking
    try:
        evaluator.start()
        t = time.monotonic()
        assert evaluator.poll() == [] and time.monotonic() - t < 1.0  # never blocks
        wait_for_start(evaluator, tmp_path / "logs" / "evaluator.log")
        # Weights at frames 0 and 999 are not due (the first evaluation is at 1,000):
        # several of its 0.1 s checks pass without an evaluation.
        publish(block, net, learner_step=150, frames=999)
        time.sleep(1.0)
        assert evaluator.poll() == []
        publish(block, net, learner_step=170, frames=1000)
        (first,) = wait_for_results(evaluator)
        pid = evaluator.process.pid
        assert (first["weights_version"], first["learner_step"], first["frames"]) == (3, 170, 1000)
        assert first["episodes"] == 2
        assert first["new_best"] and first["best_return"] == max(first["best_return"], first["mean_return"])
        for key in ("mean_return", "mean_x_pos", "flag_rate", "mean_length"):
            assert np.isfinite(first[key]), key

        # Polite: nice 10 over the parent's, SIGINT ignored (bit 2 of SigIgn), one torch thread.
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
        assert int(_proc_status(pid, "SigIgn"), 16) & (1 << (signal.SIGINT - 1))
        os.kill(pid, signal.SIGINT)

        # The best episode's video: one frame per step of that episode.
        best = json.loads((tmp_path / "videos" / "best.json").read_text())
        assert best["weights_version"] == 3 and best["return"] == first["best_return"]
        assert first["video"] == str(tmp_path / "videos" / "best.mp4")
        imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
        assert imageio_ffmpeg.count_frames_and_secs(first["video"])[0] == best["length"]
        best_mtime = (tmp_path / "videos" / "best.mp4").stat().st_mtime_ns

        # Neither the same weights nor newer ones before the next multiple (2,000) are
        # evaluated; the first weights past it are, and the multiples they jumped over
        # (2,000 and 3,000) are skipped, not queued.
        publish(block, net, learner_step=190, frames=1999)
        time.sleep(1.0)
        assert evaluator.poll() == []
        publish(block, net, learner_step=200, frames=3500)
        (second,) = wait_for_results(evaluator)
        assert (second["weights_version"], second["learner_step"], second["frames"]) == (5, 200, 3500)
        # Same network, same seeds: the same episodes, so no new best and no re-encoding.
        assert second["mean_return"] == first["mean_return"] and not second["new_best"]
        assert second["video"] is None
        assert (tmp_path / "videos" / "best.mp4").stat().st_mtime_ns == best_mtime
        assert evaluator.alive  # SIGINT did not stop it
    finally:
        # A safety net, not a speed check: the evaluator is niced by 10, and on a loaded
        # machine the episode it is playing can take longer than 10 s to reach a stop check.
        evaluator.stop(timeout_s=60)
    assert not evaluator.alive and evaluator.exitcode == 0
    assert not Path(f"/proc/{pid}").exists()  # gone and reaped
    evaluator.stop()  # idempotent
    assert "evaluator started" in (tmp_path / "logs" / "evaluator.log").read_text()


def test_several_episodes_at_an_epsilon_follow_the_protocol(tmp_path, weights_block):
    cfg, net, segment, block = weights_block
    # Back to back, from a resumed run's frames: due at 5,001.
    evaluator = Evaluator(
        cfg, tmp_path, segment.name, interval_frames=1, start_frames=5000, episodes=4, max_steps=60, epsilon=0.3
    )
    try:
        evaluator.start()
        publish(block, net, learner_step=101, frames=5001)
        (result,) = wait_for_results(evaluator)
    finally:
        evaluator.stop(timeout_s=10)
    assert result["episodes"] == 4 and result["epsilon"] == 0.3

    # The same weights played here by the protocol, from the evaluator's seeds: the same figures.
    protocol = EvaluationProtocol(episodes=4, epsilon=0.3, first_seed=cfg.seed + EVAL_SEED_OFFSET, max_steps=60)
    env = build_env(cfg, seed=0)
    try:
        with single_thread_torch():
            episodes = play_protocol(env, net.eval(), protocol, frame_stack=cfg.frame_stack, num_actions=3)
    finally:
        env.close()
    assert len({e.seed for e in episodes}) == 4
    expected = protocol_figures(episodes)
    assert {key: result[key] for key in expected} == expected
    assert "median_x_pos" in expected and result["flag_rate"] == expected["flag_rate"]
    # Beside them, the greedy episode from the first seed (what `play` shows).
    greedy = EvaluationProtocol(episodes=1, epsilon=0.0, first_seed=protocol.first_seed, max_steps=60)
    env = build_env(cfg, seed=0)
    try:
        with single_thread_torch():
            (greedy_episode,) = play_protocol(env, net.eval(), greedy, frame_stack=cfg.frame_stack, num_actions=3)
    finally:
        env.close()
    assert (result["greedy_return"], result["greedy_x_pos"], result["greedy_flag"]) == (
        greedy_episode.ret,
        greedy_episode.x_pos,
        greedy_episode.flag_get,
    )

    # The best of them (random actions and all) is the video, replayed from its seed and actions.
    best = json.loads((tmp_path / "videos" / "best.json").read_text())
    assert best["seed"] in protocol.seeds and best["epsilon"] == 0.3
    assert best["return"] == max(e.ret for e in episodes) == result["best_return"]
    log = (tmp_path / "logs" / "evaluator.log").read_text()
    assert "4 episode(s) at epsilon 0.3" in log and "did not replay identically" not in log


def test_exits_when_the_weights_block_asks_to_stop(tmp_path, weights_block):
    cfg, net, segment, block = weights_block
    evaluator = Evaluator(cfg, tmp_path, segment.name, interval_frames=1, episodes=1, max_steps=30)
    try:
        evaluator.start()
        publish(block, net, learner_step=101, frames=1)
        wait_for_results(evaluator)
        block.request_stop()
        evaluator.process.join(RESULT_TIMEOUT_S)
        assert not evaluator.alive and evaluator.exitcode == 0
    finally:
        evaluator.stop(timeout_s=5)


def test_a_final_evaluation_takes_the_last_weights_and_outlives_the_stop_flag(tmp_path, weights_block):
    """As a run that reached its frames ends: the last weights, not due by the interval,
    are evaluated although the block's stop flag (the collectors' signal) is set, and
    the process then exits by itself."""
    cfg, net, segment, block = weights_block
    evaluator = Evaluator(cfg, tmp_path, segment.name, interval_frames=1_000_000, episodes=2, max_steps=40)
    try:
        evaluator.start()
        wait_for_start(evaluator, tmp_path / "logs" / "evaluator.log")
        publish(block, net, learner_step=123, frames=4567)  # far from the first multiple
        evaluator.request_final()
        block.request_stop()
        assert evaluator.finish(RESULT_TIMEOUT_S)
        (result,) = evaluator.poll()
    finally:
        evaluator.stop(timeout_s=5)
    assert (result["weights_version"], result["learner_step"], result["frames"]) == (2, 123, 4567)
    assert result["final"] and result["episodes"] == 2
    assert evaluator.exitcode == 0
    assert "final evaluation, weights v2 (frames 4567" in (tmp_path / "logs" / "evaluator.log").read_text()


def test_a_final_evaluation_is_not_repeated_and_a_give_up_ends_the_wait(tmp_path, weights_block):
    cfg, net, segment, block = weights_block
    evaluator = Evaluator(cfg, tmp_path, segment.name, interval_frames=1, episodes=1, max_steps=30)
    try:
        assert not evaluator.finish(1.0)  # nothing asked for: no wait
        evaluator.start()
        publish(block, net, learner_step=101, frames=1)
        (first,) = wait_for_results(evaluator)
        assert not first["final"]
        # A Ctrl-C (give_up) ends the wait at once, before the process has finished.
        t = time.monotonic()
        evaluator.request_final()
        # Weights v2 are evaluated already: the final request ends the process without
        # another evaluation (unless the give-up comes first, as here at once).
        assert not evaluator.finish(RESULT_TIMEOUT_S, give_up=lambda: True) or not evaluator.alive
        assert time.monotonic() - t < RESULT_TIMEOUT_S / 2
        assert evaluator.finish(RESULT_TIMEOUT_S)
        assert evaluator.poll() == []
    finally:
        evaluator.stop(timeout_s=5)
    assert evaluator.exitcode == 0


def test_with_a_max_lag_training_is_held_at_each_overdue_evaluation_and_never_by_a_dead_one(tmp_path, weights_block):
    """eval_max_lag_frames: the hold is set before the process starts (its start-up counts
    as overdue too), moves to the next multiple plus the lag once an evaluation starts,
    and is lifted when the evaluator stops, or dies."""
    cfg, net, segment, block = weights_block
    evaluator = Evaluator(
        cfg, tmp_path, segment.name, interval_frames=1000, episodes=1, max_steps=30, max_lag_frames=200
    )
    try:
        evaluator.start()
        assert block.hold_frames == 1200  # first due at 1,000, held from 1,200
        publish(block, net, learner_step=150, frames=1300)  # overdue: collectors would wait here
        assert block.held or block.hold_frames == 2200  # (unless it started on it already)
        (first,) = wait_for_results(evaluator)
        assert first["frames"] == 1300 and block.hold_frames == 2200 and not block.held
        # Its steps and seconds of evaluating, counted as they went (the bench's evaluator part).
        progress = evaluator.progress()
        assert progress["evaluator_steps"] >= first["mean_length"] > 0
        assert progress["evaluator_eval_cpu_s"] > 0 and progress["evaluator_eval_wall_s"] > 0
        evaluator.stop(timeout_s=60)
        assert block.hold_frames == 0  # stopped: nothing to wait for

        again = Evaluator(cfg, tmp_path, segment.name, interval_frames=1000, max_steps=30, max_lag_frames=200)
        again.start()
        assert block.hold_frames == 1200
        again.process.kill()
        again.process.join(30)
        again.poll()  # the learner's next tick sees it dead and lets training go on
        assert block.hold_frames == 0
        again.stop()
    finally:
        evaluator.stop(timeout_s=60)


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="episodes"):
        Evaluator(Config(), tmp_path, "x", interval_frames=1, episodes=0)
    with pytest.raises(ValueError, match="epsilon"):
        Evaluator(Config(), tmp_path, "x", interval_frames=1, epsilon=1.5)
    with pytest.raises(ValueError, match="interval_frames"):
        Evaluator(Config(), tmp_path, "x", interval_frames=0)
    Evaluator(Config(), tmp_path, "x", interval_frames=1).stop()  # stop before start is a no-op
