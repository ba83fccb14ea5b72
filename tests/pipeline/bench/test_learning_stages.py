"""The learning benchmark per stage: a random-stages run's marks evaluated on each of its
stages, the per-stage table, and the cache of one-stage runs kept valid."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from config import Config
from envs import num_actions
from pipeline.bench.learning_curves import (
    EVAL_CACHE,
    MarkResult,
    bench_protocol,
    cache_key,
    evaluate_mark,
    evaluate_marks,
    stage_rows,
)
from pipeline.learning.checkpoint import save_checkpoint
from pipeline.learning.policy import network_of
from pipeline.run.evaluator.stage_report import ends_lines, stage_table


def write_run(run: Path, config: Config) -> Path:
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"config": config.to_dict()}))
    (run / "checkpoints" / "marks").mkdir(parents=True)
    return run


def save_mario_mark(run: Path, config: Config, frames: int) -> Path:
    """A mark of a Mario network (the config's actions, fixed weights) as a run writes it."""
    actions = num_actions(config.env_id, config.action_set)
    torch.manual_seed(4)
    net = network_of(config, actions)
    payload = {"learner": {"online": net.state_dict()}, "counters": {"frames": frames}, "config": config.to_dict()}
    payload["num_actions"] = actions
    path = run / "checkpoints" / "marks" / f"frames-{frames:09d}.pt"
    save_checkpoint(path, payload)
    return path


def test_an_old_cache_entry_of_a_1_1_run_stays_valid_and_gives_its_one_row(tmp_path: Path) -> None:
    protocol = bench_protocol()
    key = "protocol-v2,episodes=20,epsilon=0.05,seeds=5000000..5000019,max_steps=2000,greedy_seed=0"
    assert cache_key(protocol) == key  # the key entries of one-stage runs always had
    run = write_run(tmp_path / "old-s0", Config(env_id="SuperMarioBros-1-1-v0"))
    (run / "checkpoints" / "marks" / "frames-000100000.pt").write_bytes(b"")  # never loaded: cached
    entry = {"frames": 100_000, "run_frames": 100_007, "mean_x_pos": 790.25, "max_x_pos": 1200}
    entry |= {"flag_rate": 0.05, "mean_return": 500.0, "median_x_pos": 700.0, "greedy_x_pos": 722}
    (run / EVAL_CACHE).write_text(json.dumps({key: {"frames-000100000.pt": entry}}))
    written = (run / EVAL_CACHE).read_text()
    (result,) = evaluate_marks(run, protocol)
    assert (run / EVAL_CACHE).read_text() == written  # read back, nothing played
    assert result.mean_x_pos == 790.25 and result.greedy_x_pos == 722
    # 790.25 / 3161 = 0.25 of 1-1, the mark's 20 episodes and flag rate.
    # It kept no ends (None), and the report leaves its line out.
    expected = {"stage": "1-1", "episodes": 20, "mean_x_pos": 790.25, "flag_rate": 0.05, "along": 0.25, "ends": None}
    assert result.stages == [pytest.approx(expected)]
    assert ends_lines(stage_rows([result])) == []
    lines = stage_table(stage_rows([result]), first="mark")
    assert lines[1].split() == ["0.1M", "1-1", "20", "790", "0.25", "0.05"]


def test_the_per_stage_table_of_a_curve_by_hand() -> None:
    def mark(frames: int, rows: list[tuple[str, float, float]]) -> MarkResult:
        stages = [{"stage": s, "episodes": 20, "mean_x_pos": x, "flag_rate": f, "along": None} for s, x, f in rows]
        return MarkResult(frames, frames, 0.0, 0, 0.0, 0.0, stages=stages)

    curve = [
        mark(100_000, [("1-1", 632.2, 0.0), ("1-2", 316.1, 0.0)]),  # 632.2 / 3161 = 0.20, 316.1 / 3161 = 0.10
        mark(200_000, [("1-1", 3161.0, 1.0), ("1-3", 1212.5, 0.25)]),  # 1.00; 1212.5 / 2425 = 0.50
    ]
    rows = [line.split() for line in stage_table(stage_rows(curve), first="mark")[1:]]
    assert rows == [
        ["0.1M", "1-1", "20", "632", "0.20", "0.00"],
        ["0.1M", "1-2", "20", "316", "0.10", "0.00"],
        ["0.2M", "1-1", "20", "3,161", "1.00", "1.00"],
        ["0.2M", "1-3", "20", "1,212", "0.50", "0.25"],
    ]


@pytest.mark.slow
def test_a_random_stages_mark_is_evaluated_on_each_listed_stage_and_cached_by_them(tmp_path: Path) -> None:
    protocol = bench_protocol(episodes=2, epsilon=0.5, max_steps=20)
    config = Config(env_id="SuperMarioBrosRandomStages-v0", stages="1-4,1-1")
    run = write_run(tmp_path / "w1-s0", config)
    save_mario_mark(run, config, 100_000)
    (result,) = evaluate_marks(run, protocol, workers=1)  # a spawned process, as the bench does
    assert [row["stage"] for row in result.stages] == ["1-4", "1-1"]
    cache = json.loads((run / EVAL_CACHE).read_text())
    assert list(cache) == [cache_key(protocol, ["1-4", "1-1"])] and cache_key(protocol) not in cache
    # Each stage's row is what the same weights score on that stage alone, by the same protocol.
    for stage in ("1-4", "1-1"):
        alone_config = Config(env_id=f"SuperMarioBros-{stage}-v0")
        alone = write_run(tmp_path / f"alone-{stage}", alone_config)
        path = save_mario_mark(alone, alone_config, 100_000)
        figures = MarkResult.from_dict(evaluate_mark(str(path), protocol.to_dict()))
        (row,) = [row for row in result.stages if row["stage"] == stage]
        assert row["episodes"] == 2
        assert row["mean_x_pos"] == pytest.approx(figures.mean_x_pos)
        assert row["flag_rate"] == pytest.approx(figures.flag_rate)
        assert row["along"] == pytest.approx(figures.mean_x_pos / {"1-4": 2247, "1-1": 3161}[stage])
        assert row["ends"] == figures.stages[0]["ends"] and len(row["ends"]) == 2  # no flag in 20 steps
    # The mark's own figures are those of all four episodes: the mean of the two means.
    assert result.mean_x_pos == pytest.approx(statistics.fmean(row["mean_x_pos"] for row in result.stages))
    # Read back, not played again.
    written = (run / EVAL_CACHE).read_text()
    assert evaluate_marks(run, protocol) == [result] and (run / EVAL_CACHE).read_text() == written
