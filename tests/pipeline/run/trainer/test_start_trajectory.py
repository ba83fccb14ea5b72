"""The trajectory a run's collectors restart along: a given file, or the run's own search of
its stage (frontier_trajectory=search), found once and kept for a resume."""

from __future__ import annotations

import numpy as np

from config import Config
from pipeline.learning.episode_loop import build_env
from pipeline.learning.frontier import read_trajectory, stage_signature
from pipeline.learning.trajectory_search import play_actions, search_stage
from pipeline.run.trainer.pieces import RunPaths, search_start_trajectory, start_trajectory


class Announced:
    """The monitor's announce, kept for the test."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def announce(self, line: str) -> None:
        self.lines.append(line)


def test_the_collectors_start_from_the_given_file_the_searched_one_or_none(tmp_path) -> None:
    paths = RunPaths(tmp_path / "run")
    assert start_trajectory(Config(), paths) == ""
    given = Config(frontier_start_share=0.5, frontier_trajectory="explored.npz")
    assert start_trajectory(given, paths) == "explored.npz"
    searched = Config(frontier_start_share=0.5, frontier_trajectory="search")
    assert start_trajectory(searched, paths) == str(tmp_path / "run" / "frontier" / "searched.npz")


def test_a_run_searches_its_stage_once_as_explore_does(tmp_path) -> None:
    cfg = Config(frontier_start_share=0.5, frontier_trajectory="search", seed=0)
    paths = RunPaths(tmp_path / "run")
    monitor = Announced()
    search_start_trajectory(cfg, paths, monitor)  # type: ignore[arg-type]
    signature = stage_signature(cfg.env_id, cfg.action_set, cfg.frame_skip)
    actions, best_x = read_trajectory(paths.searched_trajectory, signature)
    # explore with the run's seed writes the same steps.
    explored = search_stage(cfg, tmp_path / "explored.npz", seed=0)
    assert np.array_equal(actions, explored.actions) and best_x == explored.best_x
    assert explored.flag and monitor.lines[-1].startswith(f"startup: the flag in {len(actions)} steps")
    env = build_env(cfg, seed=0)
    try:  # the kept steps replay alive to the x the file names
        replayed = play_actions(env, actions)
    finally:
        env.close()
    assert not replayed.ended and int(replayed.x_pos[-1]) == best_x
    # A resumed run keeps what it found: no second search.
    written = paths.searched_trajectory.stat().st_mtime_ns
    search_start_trajectory(cfg, paths, monitor)  # type: ignore[arg-type]
    assert paths.searched_trajectory.stat().st_mtime_ns == written and len(monitor.lines) == 2


def test_a_run_with_a_file_or_none_searches_nothing(tmp_path) -> None:
    paths = RunPaths(tmp_path / "run")
    monitor = Announced()
    for cfg in (Config(), Config(frontier_start_share=0.5, frontier_trajectory="explored.npz")):
        search_start_trajectory(cfg, paths, monitor)  # type: ignore[arg-type]
    assert not paths.frontier.exists() and monitor.lines == []


def test_a_random_stages_run_searches_each_of_its_stages(tmp_path) -> None:
    cfg = Config(
        env_id="SuperMarioBrosRandomStages-v0",
        stages="1-1,1-4",
        frontier_start_share=0.5,
        frontier_trajectory="search",
        seed=0,
    )
    paths = RunPaths(tmp_path / "run")
    monitor = Announced()
    search_start_trajectory(cfg, paths, monitor)  # type: ignore[arg-type]
    assert sorted(p.name for p in paths.frontier.iterdir()) == ["searched-1-1.npz", "searched-1-4.npz"]
    for stage in ("1-1", "1-4"):
        stage_cfg = Config(env_id=f"SuperMarioBros-{stage}-v0")
        actions, best_x = read_trajectory(
            paths.frontier / f"searched-{stage}.npz", stage_signature(stage_cfg.env_id, cfg.action_set, cfg.frame_skip)
        )
        explored = search_stage(stage_cfg, tmp_path / f"explored-{stage}.npz", seed=0)
        assert explored.flag and np.array_equal(actions, explored.actions) and best_x == explored.best_x
    assert [line.split(" for ")[0] for line in monitor.lines[::2]] == [
        "startup: searching SuperMarioBros-1-1-v0",
        "startup: searching SuperMarioBros-1-4-v0",
    ]
