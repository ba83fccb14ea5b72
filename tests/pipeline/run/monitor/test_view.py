"""What the monitor shows, on rows derived here: the evaluator's, the frontier's, the
collector nodes' and the steadiness probe's figures in the log line and the live table,
each shown only when the run measures it."""

from __future__ import annotations

import io

from rich.console import Console

from pipeline.run.monitor.keys import NODE_GAUGES, node_gauge_key, node_positions
from pipeline.run.monitor.monitor import Monitor, Snapshot
from pipeline.run.monitor.view import log_line, render_table
from tests.pipeline.run.monitor.test_monitor import NAN, snap


def shown(table) -> str:
    out = io.StringIO()
    Console(file=out, width=160).print(table)
    return out.getvalue()


def test_live_table_shows_the_evaluator_rows(tmp_path):
    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    row = monitor.update(
        snap(1.0, 100.0, evaluations=3, eval_return=1052.0, eval_x_pos=1234.5, eval_median_x_pos=898.0)
    )
    text = shown(render_table(row, [], "running"))
    assert "eval return" in text and "1052.0" in text and "evaluations" in text
    assert "1,234 / 898" in text  # mean and median x_pos of the evaluation's episodes
    monitor.close()


def test_frontier_starts_show_only_when_on(tmp_path):
    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    try:
        off = monitor.update(snap(1.0, 100.0))
        on = snap(2.0, 300.0)
        on.counters["replayed_frames"] = 4321.0
        on.gauges["frontier_start_share"] = 0.48
        on = monitor.update(on)
    finally:
        monitor.close()
    assert "frontier" not in log_line(off)
    assert "frontier starts 0.48 replayed 4321 frames" in log_line(on)
    assert "frames replayed to them" not in shown(render_table(off, [], "running"))
    text = shown(render_table(on, [], "running"))
    assert "frames replayed to them" in text and "4,321" in text and "0.48" in text


def test_the_ray_backends_per_node_figures_show_in_the_log_line_and_the_table(tmp_path):
    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    nodes = Snapshot(time=1.0, counters={"frames": 10.0}, gauges={})
    for position, live in ((0, 1.0), (1, 0.0)):
        values = dict(zip(NODE_GAUGES, (812.0, 4.2, 3.5, 1.0, 128.0, live, 97.0)))
        nodes.gauges.update({node_gauge_key(position, key): value for key, value in values.items()})
    row = monitor.update(nodes)
    assert node_positions(row) == [0, 1] and node_positions({}) == []
    line = log_line(row)
    assert "node0 812 frames/s pull 4 ms 3.5 MB restarts 1 lost 128" in line and "node1" in line
    assert line.count("(down)") == 1
    text = shown(render_table(row, [], "running"))
    assert "in flight MB" in text and "down" in text and "812" in text
    monitor.close()


def steady_row(*, batchings: int) -> dict[str, float]:
    """A row with the steadiness probe's figures, as the watch reports them."""
    several = batchings > 1
    return {
        "steady_agreement": 0.951,
        "steady_churn": 0.1,
        "steady_q_offset": 0.219,
        "steady_action_gap": 0.346,
        "steady_expected_agreement": 0.968 if several else NAN,
        "steady_train_agreement": 0.935 if several else NAN,
    }


def test_the_steadiness_figures_show_once_measured():
    assert "steady" not in log_line({"steady_agreement": NAN})  # no measurement yet
    line = log_line(steady_row(batchings=4))
    assert "steady agree 0.951 (mean 0.968, train/train 0.935) churn 0.100 offset 0.219 gap 0.346" in line
    text = shown(render_table(steady_row(batchings=4), [], "running"))
    for label, value in (
        ("train/eval agreement", "0.951"),
        ("agreement, batchings' mean", "0.968"),
        ("train/train agreement", "0.935"),
        ("churn per publish", "0.100"),
        ("|Q_eval - Q_train|", "0.219"),
        ("median action gap", "0.346"),
    ):
        (line,) = [each for each in text.splitlines() if label in each]
        assert line.split(label)[1].split()[:2] == ["│", value], line


def test_a_single_batching_leaves_the_batchings_figures_out_of_the_log_line():
    """With steadiness_batchings=1 there is nothing to average or compare: the line keeps
    the probe's other figures and drops the two NaNs; the table shows them as "-"."""
    line = log_line(steady_row(batchings=1))
    steady = line.split(" | steady ")[1]
    assert steady == "agree 0.951 churn 0.100 offset 0.219 gap 0.346", line
    text = shown(render_table(steady_row(batchings=1), [], "running"))
    (row,) = [each for each in text.splitlines() if "agreement, batchings' mean" in each]
    assert row.split("agreement, batchings' mean")[1].split()[:2] == ["│", "-"], row
    assert "nan" not in text
