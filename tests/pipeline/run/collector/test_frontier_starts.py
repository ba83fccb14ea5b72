"""A real collector on the real World 1-1 returns to states of its furthest trajectory.

The collector (one env, random actions, half the episodes started near the frontier)
writes its records into real shared memory. Everything it did can be re-derived here
from those records alone: the first episode starts at the level's start, every episode's
actions from the level's start are its replayed prefix plus its recorded actions, and
the furthest trajectory so far is the prefix of such an episode. Replaying each episode
that way in an emulator of the test's own must reproduce every recorded frame, the START
frame of the episodes that began near the frontier first of all. Given a trajectory file
(``frontier_trajectory``, what ``explore`` writes), the collector starts from it.
"""

from __future__ import annotations

import numpy as np
import pytest

from config import Config
from envs import make_env
from pipeline.learning.frontier import EpisodeTrace, FrontierArchive, stage_signature, write_trajectory
from pipeline.learning.trajectory_search import search_trajectory
from pipeline.transport import episodes as episode_channel
from pipeline.transport.records import FLAG_FINAL, FLAG_START
from tests.pipeline import producers as P
from tests.pipeline.run.collector.one_collector import collect_random

TAG = P.new_tag("frontier")
FRONTIER_EPISODES = 4  # episodes started near the frontier to collect


def collect(
    cfg: Config, log_path: str, frontier_path: str
) -> tuple[np.ndarray, list[episode_channel.EpisodeSummary], int]:
    """Run one collector until it finished FRONTIER_EPISODES frontier episodes; return its
    records, its episode summaries and its replayed-frames counter."""
    return collect_random(
        cfg,
        tag=TAG,
        log_path=log_path,
        enough=lambda summaries: sum(s.replayed_steps > 0 for s in summaries) >= FRONTIER_EPISODES,
        frontier_path=frontier_path,
        start_trajectory=cfg.frontier_trajectory,
    )


def split_episodes(records: np.ndarray) -> list[np.ndarray]:
    """The finished episodes' records (START step ... FINAL), in order."""
    starts = np.flatnonzero((records["flags"] & FLAG_START) != 0)
    finals = np.flatnonzero((records["flags"] & FLAG_FINAL) != 0)
    assert starts[0] == 0
    return [records[start : final + 1] for start, final in zip(starts, finals, strict=False)]


def rederive(
    cfg: Config,
    episodes: list[np.ndarray],
    summaries: list[episode_channel.EpisodeSummary],
    archive: FrontierArchive,
    trajectories: list[np.ndarray] | None = None,
) -> tuple[list[int], int, int]:
    """Replay every episode in an emulator of the test's own, from the level's start through
    its replayed prefix (drawn from ``archive``, the collector's replica, which every finished
    episode is offered to) and its recorded actions, checking every frame the collector wrote.
    Returns the steps replayed for each frontier start, and the x of the last level start and
    of the furthest frontier start; ``trajectories`` gets the replica's trajectory at each
    episode's start."""
    env = make_env(cfg.env_id, **cfg.env_kwargs())
    trace = EpisodeTrace(cfg.max_episode_steps)
    replayed: list[int] = []  # steps replayed for each frontier start
    level_start_x = frontier_start_x = 0
    try:
        for episode, summary in zip(episodes, summaries):
            steps = summary.replayed_steps
            assert steps <= len(archive.actions)  # a prefix of today's trajectory
            prefix = archive.actions[:steps].copy()
            if trajectories is not None:
                trajectories.append(archive.actions.copy())
            if steps:
                replayed.append(steps)
            obs, info = env.reset()
            trace.clear()
            for action in prefix.tolist():
                obs, _, _, _, info = env.step(action)
                trace.append(action, info["x_pos"])
            np.testing.assert_array_equal(obs, episode[0]["frame"])  # the START the collector wrote
            if steps:
                frontier_start_x = max(frontier_start_x, info["x_pos"])
            else:
                level_start_x = info["x_pos"]
            actions = episode["action"][:-1].tolist()  # the FINAL record carries no action
            for action, record in zip(actions, episode[1:]):
                obs, _, _, _, info = env.step(action)
                trace.append(action, info["x_pos"])
                np.testing.assert_array_equal(obs, record["frame"])
            assert info["x_pos"] == summary.x_pos
            archive.offer(trace)
    finally:
        env.close()
    return replayed, level_start_x, frontier_start_x


@pytest.mark.slow
def test_a_collector_returns_to_its_furthest_trajectory(tmp_path, capfd) -> None:
    """By replaying the trajectory's prefix for every frontier start; and it closes its
    shared memory at the stop (no view left behind: no BufferError at exit)."""
    # Short episodes, so that many end (and offer their trajectories) within the test.
    cfg = Config(envs_per_collector=1, ring_capacity=256, no_progress_steps=40, max_episode_steps=250, seed=11)
    cfg.frontier_start_share = 0.5
    kept = tmp_path / "frontier" / "collector-0.npz"
    records, summaries, replayed_frames = collect(cfg, str(tmp_path / "collector.log"), str(kept))
    # The collector's process wrote to this stderr; the frontier starter held a view into
    # the ring that its close() did not drop, so the segment's close failed at exit.
    assert "BufferError" not in capfd.readouterr().err
    episodes = split_episodes(records)[: len(summaries)]
    assert len(episodes) == len(summaries)
    assert summaries[0].replayed_steps == 0  # nothing to return to yet

    archive = FrontierArchive(0.5, np.random.default_rng(0))  # only offer() is used: the test's replica
    replayed, level_start_x, frontier_start_x = rederive(cfg, episodes, summaries, archive)

    frontier = [s.replayed_steps for s in summaries if s.replayed_steps > 0]
    assert len(frontier) >= FRONTIER_EPISODES
    assert frontier_start_x > level_start_x > 0  # some episode started well into the level
    log = tmp_path / "collector.log"
    assert "ended the episode" not in (log.read_text() if log.exists() else "")  # every return reached a live state
    # A start restores the snapshot a replay left nearest before it and steps only the rest:
    # fewer frames than the replays from the level's start that the test did (the episode
    # running at the stop may add one more start, drawn from the kept trajectory).
    replay_frames = cfg.frame_skip * sum(replayed)
    assert 0 < replayed_frames < replay_frames
    # The collector kept its trajectory on disk: a collector started again (restarted, or
    # the run resumed) carries on from the one every finished episode had offered.
    reloaded = FrontierArchive(
        0.5, np.random.default_rng(0), str(kept), stage_signature(cfg.env_id, cfg.action_set, cfg.frame_skip)
    )
    assert reloaded.best_x == archive.best_x > 0
    np.testing.assert_array_equal(reloaded.actions, archive.actions)


@pytest.mark.slow
@pytest.mark.parametrize("demo_steps", [0, 4])
def test_a_collector_restarts_along_a_searched_trajectory_from_its_first_episode(tmp_path, demo_steps: int) -> None:
    """``frontier_trajectory``: the collector's archive starts from a file ``explore`` writes,
    so its restarts are drawn along a way into the stage that its own episodes never went;
    with ``frontier_demo_steps`` each restart's first actions are the trajectory's."""
    cfg = Config(envs_per_collector=1, ring_capacity=256, no_progress_steps=40, max_episode_steps=250, seed=11)
    cfg.frontier_start_share = 0.5
    cfg.frontier_demo_steps = demo_steps
    signature = stage_signature(cfg.env_id, cfg.action_set, cfg.frame_skip)
    env = make_env(cfg.env_id, **cfg.env_kwargs())
    try:
        found = search_trajectory(env, np.random.default_rng(0), 8)
    finally:
        env.close()
    given = tmp_path / "explored.npz"
    write_trajectory(given, found.actions, found.best_x, signature)
    cfg.frontier_trajectory = str(given)
    kept = tmp_path / "frontier" / "collector-0.npz"
    records, summaries, _ = collect(cfg, str(tmp_path / "collector.log"), str(kept))
    episodes = split_episodes(records)[: len(summaries)]
    # The replica starts from the same file: had the collector not, the first frontier
    # start's replayed prefix would not reproduce the START frame it wrote.
    archive = FrontierArchive(0.5, np.random.default_rng(0), "", signature, start_from=str(given))
    trajectories: list[np.ndarray] = []
    replayed, _, frontier_start_x = rederive(cfg, episodes, summaries, archive, trajectories)
    assert len(replayed) >= FRONTIER_EPISODES and frontier_start_x > 0
    first = next(i for i, s in enumerate(summaries) if s.replayed_steps > 0)
    assert summaries[first].replayed_steps <= len(found.actions)  # drawn along the given trajectory
    # A restart from past the first step plays the trajectory's next demo_steps actions
    # before its policy's (random ones here: 4 in a row match with chance 5**-4).
    later = [(e, s.replayed_steps, t) for e, s, t in zip(episodes, summaries, trajectories) if s.replayed_steps > 1]
    assert later
    demonstrated = [
        np.array_equal(episode["action"][:4], trajectory[steps : steps + 4])
        for episode, steps, trajectory in later
        if steps + 4 <= len(trajectory) and len(episode) > 4
    ]
    assert demonstrated and all(demonstrated) == (demo_steps == 4)
    reloaded = FrontierArchive(0.5, np.random.default_rng(0), str(kept), signature)
    assert reloaded.best_x == archive.best_x >= found.best_x  # kept as the collector's own, or beaten
