"""Per-stage figures and table, against hand computations."""

from __future__ import annotations

import json

import pytest

from config import Config
from pipeline.common.errors import UserError
from pipeline.learning.episode_loop import EpisodeResult
from pipeline.run.evaluator.stage_report import StageRow, combined_values, ends_lines, stage_table, stages_played


def episode(x_pos: int, flag: bool = False, stage: int = 1) -> EpisodeResult:
    return EpisodeResult(
        ret=0.0, length=10, x_pos=x_pos, flag_get=flag, world=1, stage=stage, seed=None, truncated=False
    )


def test_a_stage_row_is_the_mean_x_pos_its_share_of_the_stage_and_the_flag_rate() -> None:
    # 1-3 ends at x_pos 2425: episodes at 485, 970 and the flag (2425) average 1,293.33,
    # 1293.33 / 2425 = 0.5333 of the stage; one flag in three.
    row = StageRow.from_results("1-3", [episode(485), episode(970), episode(2425, True)])
    assert row.episodes == 3
    assert row.mean_x_pos == pytest.approx(3880 / 3)
    assert row.along == pytest.approx(3880 / 3 / 2425)
    assert row.flag_rate == pytest.approx(1 / 3)
    assert row.ends == (485, 970)  # the episodes without the flag, in increasing x
    assert row.describe_ends() == "x 485, 970; the flag 1 of 3"
    assert StageRow.from_dict(row.to_dict()) == row
    assert StageRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row  # a list in JSON, a tuple back
    assert StageRow.from_results("", [episode(100)]).along is None  # no one stage: no end
    assert StageRow.of("2-1", 4, 500.0, 0.0).along is None  # an end not recorded
    with pytest.raises(ValueError, match="no episodes"):
        StageRow.from_results("1-1", [])


def test_the_table_has_a_row_per_label_and_stage_by_hand() -> None:
    rows = [
        ("0.1M", StageRow.of("1-1", 20, 1580.5, 0.05)),  # 1580.5 / 3161 = 0.50
        ("0.1M", StageRow.of("1-4", 20, 561.75, 0.0)),  # 561.75 / 2247 = 0.25
        ("0.2M", StageRow.of("5-1", 20, 1234.0, 0.1)),  # no recorded end: "-"
    ]
    lines = stage_table(rows, first="mark")
    assert len(lines) == 4
    assert lines[0].split() == ["mark", "stage", "episodes", "x_pos", "mean", "along", "flag", "rate"]
    assert lines[1].split() == ["0.1M", "1-1", "20", "1,580", "0.50", "0.05"]
    assert lines[2].split() == ["0.1M", "1-4", "20", "562", "0.25", "0.00"]
    assert lines[3].split() == ["0.2M", "5-1", "20", "1,234", "-", "0.10"]
    alone = stage_table([("", StageRow.of("", 5, 10.0, 1.0))])
    assert alone[1].split() == ["all", "5", "10", "-", "1.00"]


def test_the_ends_lines_name_the_mark_and_stage_and_skip_rows_without_ends() -> None:
    rows = [
        ("1M", StageRow.of("1-1", 4, 1000.0, 0.25, [1799, 310, 1795])),
        ("1M", StageRow.of("1-2", 20, 900.0, 0.0)),  # evaluated before rows kept their ends
        ("", StageRow.of("", 2, 10.0, 0.5, [7])),
    ]
    assert ends_lines(rows) == ["  1M 1-1: x 310, 1,795-1,799 (2); the flag 1 of 4", "  all: x 7; the flag 1 of 2"]


def test_values_of_several_stages_weigh_each_by_its_greedy_steps() -> None:
    one = {"greedy_steps": 10.0, "mean_q_taken": 2.0, "mean_return_followed": 4.0, "median_action_gap": 0.1}
    two = {"greedy_steps": 30.0, "mean_q_taken": 6.0, "mean_return_followed": 4.0, "median_action_gap": 0.3}
    none = {"greedy_steps": 0.0}
    combined = combined_values([one, two, none])
    # Q: (10 * 2 + 30 * 6) / 40 = 5; return: 4; ratio 1.25; gaps: median of 0.1 and 0.3.
    assert combined["greedy_steps"] == 40
    assert combined["mean_q_taken"] == pytest.approx(5.0)
    assert combined["mean_return_followed"] == pytest.approx(4.0)
    assert combined["q_over_return"] == pytest.approx(1.25)
    assert combined["median_action_gap"] == pytest.approx(0.2)
    assert combined_values([none]) == {"greedy_steps": 0.0}


def test_the_stages_played_follow_the_env_and_the_runs_list() -> None:
    random = Config(env_id="SuperMarioBrosRandomStages-v0", stages="1-2,1-1")
    assert stages_played(random, random.env_id) == [("1-2", "SuperMarioBros-1-2-v0"), ("1-1", "SuperMarioBros-1-1-v0")]
    assert stages_played(random, random.env_id, "1-4") == [("1-4", "SuperMarioBros-1-4-v0")]
    # One stage of the list played alone: the run's list does not go with it.
    assert stages_played(random, "SuperMarioBros-1-3-v0") == [("1-3", "SuperMarioBros-1-3-v0")]
    assert len(stages_played(Config(), "SuperMarioBrosRandomStages-v0")) == 32
    with pytest.raises(UserError, match="'1-5' does not exist") as info:
        stages_played(random, random.env_id, "1-1,1-5")
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match="only applies to SuperMarioBrosRandomStages"):
        stages_played(Config(), "SuperMarioBros-1-1-v0", "1-1")
