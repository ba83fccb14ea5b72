"""``python main.py explore``: a search on the real emulator writes a trajectory that a run can start from."""

from __future__ import annotations

import pytest

from config import Config
from envs import make_env
from pipeline.commands.explore import explore_command
from pipeline.common.errors import UserError
from pipeline.learning.frontier import read_trajectory, stage_signature
from pipeline.learning.trajectory_search import play_actions


def test_explore_writes_a_trajectory_that_replays_alive_to_its_x(tmp_path, capsys):
    out = tmp_path / "trajectories" / "1-1.npz"  # the folder is made
    assert explore_command(["--env", "SuperMarioBros-1-1-v0", "--iterations", "6", "--out", str(out)]) == 0
    cfg = Config(env_id="SuperMarioBros-1-1-v0")
    actions, best_x = read_trajectory(out, stage_signature(cfg.env_id, "right_only", cfg.frame_skip))
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].startswith("iteration 1: x ")  # every improvement, the first one first
    assert f"wrote {out}: {len(actions)} steps of SuperMarioBros-1-1-v0 (right_only) to x {best_x}" in printed
    assert f"--set frontier_trajectory={out}" in printed
    env = make_env(cfg.env_id, **cfg.env_kwargs())
    try:
        replay = play_actions(env, actions)
    finally:
        env.close()
    assert not replay.ended and int(replay.x_pos[-1]) == best_x > 0


def test_explore_records_the_action_set_it_searched_with(tmp_path):
    out = tmp_path / "simple.npz"
    assert explore_command(["--action-set", "simple", "--iterations", "2", "--out", str(out)]) == 0
    actions, _ = read_trajectory(out, stage_signature("SuperMarioBros-1-1-v0", "simple", Config().frame_skip))
    assert actions.max() < 7  # SIMPLE's seven actions


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--action-set", "everything"], "action_set"),
        (["--env", "SuperMarioBros-9-1-v0"], "SuperMarioBros-9-1-v0"),
    ],
)
def test_a_bad_env_or_action_set_is_one_line(argv, fragment, tmp_path):
    with pytest.raises(UserError, match=fragment) as info:
        explore_command([*argv, "--out", str(tmp_path / "x.npz")])
    assert "\n" not in str(info.value) and not (tmp_path / "x.npz").exists()
