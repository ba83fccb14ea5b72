"""The monitor snapshot's parts built from slot counters, and the names they carry.

The key names are CSV columns, TensorBoard tags and summary.json keys that plots,
benchmarks and users' scripts read, so they are spelled out here in full.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.common.gauges import EVAL_GAUGES
from pipeline.run.evaluator.evaluations import Evaluations
from pipeline.run.monitor import keys as M
from pipeline.run.monitor.monitor import Monitor, Snapshot
from pipeline.run.trainer.checkpoints import MIN_EPISODES_FOR_BEST, rolling_return
from pipeline.run.trainer.snapshots import (
    collector_rows,
    copy_slot_counters,
    learning_gauges,
    ring_fill_pct,
    snapshot_counters,
)
from pipeline.transport import ring as R
from pipeline.transport.episodes import EpisodeSummary


@pytest.fixture
def ring():
    """A 4-slot ring over ordinary memory (the counters do not need shared memory)."""
    layout = R.RingLayout(num_slots=4, capacity=8, episode_cells=4)
    made = R.TransitionRing.initialise(memoryview(bytearray(layout.total_bytes)), layout)
    yield made
    made.close()


def test_names_are_the_csv_and_tensorboard_names():
    assert M.COUNTER_KEYS == (
        "frames",
        "steps",
        "records",
        "updates",
        "samples",
        "episodes",
        "epochs",
        "replayed_frames",
    )
    assert M.LEARNER_PHASES == ("wait", "sample", "update", "publish", "probe", "consolidate")
    assert M.collector_phase_key("stall") == "collector_stall_ns"
    assert M.learner_phase_key("update") == "learner_update_ns"
    assert M.share_key(M.collector_phase_key("emulate")) == "collector_emulate_pct"


def test_counters_sum_each_collector_phase_over_the_slots(ring):
    for i, slot in enumerate(ring.slots):
        for j, phase in enumerate(R.COLLECTOR_PHASES):
            slot.counters.set_phase_ns(phase, (i + 1) * 10**j)
    totals = dict.fromkeys(M.COUNTER_KEYS, 3)
    counters = snapshot_counters(totals, copy_slot_counters(ring), dict.fromkeys(M.LEARNER_PHASES, 7))
    assert list(counters) == [
        *M.COUNTER_KEYS,
        *(f"collector_{phase}_ns" for phase in R.COLLECTOR_PHASES),
        *(f"learner_{phase}_ns" for phase in M.LEARNER_PHASES),
    ]
    assert counters["frames"] == 3.0
    assert counters["collector_emulate_ns"] == 10.0 and counters["collector_stall_ns"] == 10.0 * 10**4
    assert counters["learner_publish_ns"] == 7.0


def test_collector_rows_sum_a_collectors_slots_and_show_its_home_slot(ring):
    for i, slot in enumerate(ring.slots):
        c = slot.counters
        c.frames, c.steps, c.env_errors, c.weights_version = 100 * (i + 1), 10 * (i + 1), i, 5 + i
        c.set_phase_ns("infer", 1000 * (i + 1))
    supervisor = SimpleNamespace(states=[SimpleNamespace(process=None, restarts=r) for r in (0, 3)])
    rows = collector_rows(copy_slot_counters(ring), [(0, 1), (2, 3)], supervisor, weights_version=9)
    assert list(rows[0]) == [
        "frames",
        "steps",
        "weights_version",
        "weights_lag",
        "restarts",
        "env_errors",
        "cpu_pct",
        "rss_mb",
        *(f"{phase}_ns" for phase in R.COLLECTOR_PHASES),
    ]
    second = rows[1]
    assert (second["frames"], second["steps"], second["env_errors"]) == (700, 70, 5)
    assert (second["weights_version"], second["weights_lag"], second["restarts"]) == (7, 2, 3)
    assert second["infer_ns"] == 3000  # its home slot's (slot 2), not the sum
    assert second["cpu_pct"] == second["rss_mb"] == 0.0  # no live process


def test_ring_fill_counts_committed_unconsumed_records(ring):
    for _ in range(3):
        ring.slots[1].transitions.commit()
    ring.slots[1].transitions.release(1)
    assert ring_fill_pct(copy_slot_counters(ring), capacity=8) == pytest.approx(100.0 * 2 / 32)


def summary(*, x_pos: int, ret: float, flag_get: bool = False, replayed_steps: int = 0) -> EpisodeSummary:
    """A 10-step training episode of World 1-1."""
    return EpisodeSummary(
        ret=ret,
        length=10,
        x_pos=x_pos,
        flag_get=flag_get,
        world=1,
        stage=1,
        collector=0,
        weights_version=1,
        epsilon=0.1,
        truncated=False,
        replayed_steps=replayed_steps,
    )


def test_learning_gauges_are_nan_without_updates_or_episodes():
    gauges = learning_gauges({}, [])
    assert list(gauges) == [
        "loss",
        "td_error",
        "mean_q",
        "grad_norm",
        "episode_return",
        "episode_x_pos",
        "flag_rate",
        "episode_length",
        "frontier_start_share",
    ]
    assert all(math.isnan(v) for v in gauges.values())
    episode = summary(x_pos=40, ret=2.0, flag_get=True)
    gauges = learning_gauges({"loss": 0.5, "td_abs": 0.25}, [episode, episode])
    assert (gauges["loss"], gauges["td_error"], gauges["episode_return"], gauges["flag_rate"]) == (0.5, 0.25, 2.0, 1.0)
    assert gauges["frontier_start_share"] == 0.0


def test_episodes_started_near_the_frontier_stay_out_of_the_level_start_figures():
    """They start part-way into the level: their x_pos is not comparable with evaluation's."""

    def episode(x_pos: int, replayed_steps: int) -> EpisodeSummary:
        return summary(x_pos=x_pos, ret=x_pos / 10, replayed_steps=replayed_steps)

    episodes = [episode(400, 0), episode(2000, 150), episode(600, 0), episode(1800, 90)]
    gauges = learning_gauges({}, episodes)
    assert (gauges["episode_x_pos"], gauges["episode_return"]) == (500.0, 50.0)
    assert gauges["frontier_start_share"] == 0.5

    level_starts = [episode(400, 0)] * MIN_EPISODES_FOR_BEST
    assert rolling_return(level_starts + [episode(3000, 50)] * 20) == 40.0
    assert rolling_return(level_starts[1:] + [episode(3000, 50)]) is None  # too few from the start


def test_eval_gauges_come_in_the_declared_order():
    evaluations = Evaluations()
    gauges = evaluations.gauges()
    assert tuple(gauges) == EVAL_GAUGES
    assert gauges["evaluations"] == 0.0 and math.isnan(gauges["eval_return"])
    evaluations.count, evaluations.seconds = 2, {"wall": 3.0, "cpu": 4.0}
    evaluations.last = {"mean_return": 5.0, "mean_x_pos": 6.0, "weights_version": 7, "frames": 250_000, "cpu_s": 1.5}
    gauges = evaluations.gauges()
    assert (gauges["evaluations"], gauges["eval_return"], gauges["eval_x_pos"]) == (2.0, 5.0, 6.0)
    assert (gauges["eval_weights_version"], gauges["eval_frames"], gauges["eval_cpu_s"]) == (7.0, 250_000.0, 1.5)
    assert (gauges["eval_wall_s_total"], gauges["eval_cpu_s_total"]) == (3.0, 4.0)
    assert math.isnan(gauges["eval_flag_rate"])


def test_the_monitor_row_derives_phase_shares_in_the_csv_order(tmp_path):
    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    try:
        for t in (0.0, 1.0):
            counters = {M.collector_phase_key(p): t * 1e9 for p in R.COLLECTOR_PHASES}
            counters.update({M.learner_phase_key(p): t * 0.5e9 for p in M.LEARNER_PHASES})
            row = monitor.update(Snapshot(time=t, counters=counters, gauges={"replay_size": 1.0}, collectors=[{}]))
    finally:
        monitor.close()
    rates = [f"{k}{suffix}" for k in M.RATE_COUNTERS for suffix in ("_per_s", "_per_s_60s", "_per_s_run", "")]
    assert list(row) == [
        "time_s",
        *rates,
        "replayed_frames",
        "replay_ratio",
        "replay_ratio_run",
        *(f"collector_{p}_pct" for p in ("emulate", "preprocess", "infer", "write", "stall")),
        *(f"learner_{p}_pct" for p in ("wait", "sample", "update", "publish", "probe", "consolidate")),
        "stall_pct",
        "replay_size",
    ]
    assert row["collector_stall_pct"] == row["stall_pct"] == pytest.approx(100.0)
    assert row["learner_update_pct"] == pytest.approx(50.0)


class _FinishedEvaluations:
    """What an evaluator process hands over: a list of results per poll, then nothing."""

    exitcode = None

    def __init__(self, batches: list[list[dict]]) -> None:
        self.batches = batches

    def poll(self) -> list[dict]:
        return self.batches.pop(0) if self.batches else []


def test_the_first_evaluation_with_a_flag_is_dated_in_frames():
    evaluations = Evaluations()
    flagless = {"flag_rate": 0.0, "mean_x_pos": 900.0, "greedy_x_pos": 722, "weights_version": 1}
    flagged = {"flag_rate": 0.1, "mean_x_pos": 2100.0, "greedy_x_pos": 3161, "weights_version": 2}
    evaluations.evaluator = _FinishedEvaluations([[flagless], [flagged], [flagless | {"weights_version": 3}]])
    evaluations.poll(None, stopping=False, log_path=Path("evaluator.log"), frames=100_000.0)
    assert math.isnan(evaluations.first_flag_frames)
    for frames in (200_000.0, 300_000.0):
        evaluations.poll(None, stopping=False, log_path=Path("evaluator.log"), frames=frames)
    evaluations.evaluator = None  # no process to read CPU and memory of
    gauges = evaluations.gauges()
    assert gauges["eval_first_flag_frames"] == 200_000.0  # not moved by a later evaluation
    assert (gauges["evaluations"], gauges["eval_greedy_x_pos"], gauges["eval_flag_rate"]) == (3.0, 722.0, 0.0)
