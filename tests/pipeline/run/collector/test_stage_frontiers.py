"""Restarts near the frontier on random stages: a real collector on World 1-1 and 1-4 drawn at
random restarts each episode along its own stage's searched trajectory, every frame of
which this test re-derives in fixed-stage emulators of its own."""

from __future__ import annotations

import numpy as np
import pytest

from config import Config
from envs import make_env
from pipeline.learning.frontier import read_trajectory, stage_signature
from pipeline.learning.trajectory_search import search_stage
from pipeline.run.collector.stage_frontiers import stage_file
from pipeline.transport.records import FLAG_FINAL, FLAG_START
from tests.pipeline import producers as P
from tests.pipeline.run.collector.one_collector import collect_random

TAG = P.new_tag("stagefrontier")
STAGES = ("1-1", "1-4")
RESTARTS_PER_STAGE = 2  # episodes started along each stage's trajectory to collect


def test_a_stage_file_names_its_stage_before_the_suffix() -> None:
    assert stage_file("runs/x/frontier/collector-0.npz", "1-3") == "runs/x/frontier/collector-0-1-3.npz"
    assert stage_file("searched.npz", "8-4") == "searched-8-4.npz"
    assert stage_file("", "1-1") == ""  # kept in memory; no trajectory to start from


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

    def enough(summaries: list) -> bool:
        restarts = [f"{s.world}-{s.stage}" for s in summaries if s.replayed_steps > 0]
        return all(restarts.count(stage) >= RESTARTS_PER_STAGE for stage in STAGES)

    records, summaries, _ = collect_random(
        cfg,
        tag=TAG,
        log_path=str(tmp_path / "collector.log"),
        enough=enough,
        frontier_path=str(kept),
        start_trajectory=str(searched),
    )

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
