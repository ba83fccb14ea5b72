"""Restarts near the frontier on random stages: a real collector on World 1-1 and 1-4 drawn at
random restarts each episode along its own stage's searched trajectory, every frame of
which this test re-derives in fixed-stage emulators of its own."""

from __future__ import annotations

import time

import numpy as np
import pytest

from config import Config
from envs import make_env, num_actions
from pipeline.learning.frontier import read_trajectory, stage_signature
from pipeline.learning.policy import network_of
from pipeline.learning.trajectory_search import search_stage
from pipeline.run.collector.stage_frontiers import stage_file
from pipeline.transport import episodes as episode_channel
from pipeline.transport.records import FLAG_FINAL, FLAG_START
from tests.pipeline import producers as P
from tests.pipeline.run.collector.one_collector import one_collector

TAG = P.new_tag("stagefrontier")
STAGES = ("1-1", "1-4")
RESTARTS_PER_STAGE = 2  # episodes started along each stage's trajectory to collect


def test_a_stage_file_names_its_stage_before_the_suffix() -> None:
    assert stage_file("runs/x/frontier/collector-0.npz", "1-3") == "runs/x/frontier/collector-0-1-3.npz"
    assert stage_file("searched.npz", "8-4") == "searched-8-4.npz"
    assert stage_file("", "1-1") == ""  # kept in memory; no trajectory to start from


def collect(cfg: Config, frontier_path: str, start_trajectory: str) -> tuple[np.ndarray, list]:
    """One collector (random actions) until it finished RESTARTS_PER_STAGE restarts on every
    stage; its records and episode summaries."""
    net = network_of(cfg, num_actions(cfg.env_id, cfg.action_set)).eval()
    chunks: list[np.ndarray] = []
    summaries: list[episode_channel.EpisodeSummary] = []
    with one_collector(
        cfg,
        net,
        tag=TAG,
        log_path=str(cfg.run_dir) + "/collector.log",
        epsilon=1.0,
        heartbeat_timeout_s=120.0,
        frontier_path=frontier_path,
        start_trajectory=start_trajectory,
    ) as (ring, weights, supervisor):

        def drain() -> None:
            slot = ring.slots[0]
            count, views = slot.transitions.peek(None)
            chunks.extend(view.copy() for view in views)
            del views
            slot.transitions.release(count)
            summaries.extend(episode_channel.receive(slot.episodes)[0])

        def restarts(stage: str) -> int:
            return sum(f"{s.world}-{s.stage}" == stage and s.replayed_steps > 0 for s in summaries)

        supervisor.start_all()
        deadline = time.monotonic() + 900  # safety net only: a loaded machine is slow
        while min(restarts(stage) for stage in STAGES) < RESTARTS_PER_STAGE:
            assert time.monotonic() < deadline, f"{len(summaries)} episodes, too few restarts per stage"
            drain()
            supervisor.check()
            time.sleep(0.02)
        weights.request_stop()
        supervisor.stop(timeout_s=20)
        drain()
    return np.concatenate(chunks), summaries


@pytest.mark.slow
def test_each_random_stage_restarts_along_its_own_trajectory(tmp_path) -> None:
    cfg = Config(
        env_id="SuperMarioBrosRandomStages-v0",
        stages=",".join(STAGES),
        envs_per_collector=1,
        ring_capacity=256,
        no_progress_steps=40,
        max_episode_steps=250,
        seed=5,
        frontier_start_share=0.5,
        run_dir=str(tmp_path),
    )
    # Each stage's way to its flag, as a run with frontier_trajectory=search keeps it: the
    # collector's random actions cannot go further, so every restart is drawn along it.
    searched = tmp_path / "frontier" / "searched.npz"
    trajectories = {}
    for stage in STAGES:
        stage_cfg = Config(env_id=f"SuperMarioBros-{stage}-v0")
        found = search_stage(stage_cfg, tmp_path / "frontier" / f"searched-{stage}.npz", seed=0)
        assert found.flag
        trajectories[stage] = found.actions
    kept = tmp_path / "frontier" / "collector-0.npz"
    records, summaries = collect(cfg, str(kept), str(searched))

    starts = np.flatnonzero((records["flags"] & FLAG_START) != 0)
    finals = np.flatnonzero((records["flags"] & FLAG_FINAL) != 0)
    episodes = [records[start : final + 1] for start, final in zip(starts, finals, strict=False)][: len(summaries)]
    assert len(episodes) == len(summaries)
    envs = {stage: make_env(f"SuperMarioBros-{stage}-v0", **Config().env_kwargs()) for stage in STAGES}
    try:
        for episode, summary in zip(episodes, summaries):
            stage = f"{summary.world}-{summary.stage}"
            env = envs[stage]
            obs, _ = env.reset()
            for action in trajectories[stage][: summary.replayed_steps].tolist():
                obs, *_ = env.step(action)
            np.testing.assert_array_equal(obs, episode[0]["frame"])  # the START the collector wrote
            for action, record in zip(episode["action"][:-1].tolist(), episode[1:]):
                obs, _, _, _, info = env.step(action)
                np.testing.assert_array_equal(obs, record["frame"])
            assert info["x_pos"] == summary.x_pos
    finally:
        for env in envs.values():
            env.close()
    # Each stage kept its own archive, recorded with its fixed stage's signature.
    for stage in STAGES:
        signature = stage_signature(f"SuperMarioBros-{stage}-v0", cfg.action_set, cfg.frame_skip)
        actions, _ = read_trajectory(stage_file(str(kept), stage), signature)
        assert np.array_equal(actions, trajectories[stage])
