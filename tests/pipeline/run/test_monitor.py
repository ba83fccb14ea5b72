"""The throughput monitor on snapshots made here: rates over trailing windows, a bounded
history, the CSV and TensorBoard rows, and the evaluator's figures in the log line and
the live table."""

from __future__ import annotations

import csv
import io
import logging
import math
import re

from rich.console import Console
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipeline.run.monitor import Monitor, RateHistory, Snapshot

NAN = float("nan")


def snap(
    t: float,
    frames: float,
    *,
    evaluations: float = 0,
    eval_return: float = NAN,
    eval_x_pos: float = NAN,
    eval_median_x_pos: float = NAN,
) -> Snapshot:
    return Snapshot(
        time=t,
        counters={"frames": frames, "updates": frames / 100},
        gauges={
            "evaluations": evaluations,
            "eval_return": eval_return,
            "eval_x_pos": eval_x_pos,
            "eval_median_x_pos": eval_median_x_pos,
            "eval_flag_rate": NAN,
            "episode_return": 1.0,
        },
    )


def test_rates_over_windows_and_the_whole_run():
    history = RateHistory(interval_s=5.0)
    # 100 frames/s for the first 60 s, then 200 frames/s.
    frames = 0.0
    for t in range(0, 121, 5):
        history.add(snap(float(t), frames))
        frames += 500 if t < 60 else 1000
    assert math.isclose(history.rate("frames", 10), 200.0)
    assert math.isclose(history.rate("frames", 60), 200.0)
    assert math.isclose(history.rate("frames", None), (frames - 1000) / 120)
    assert len(history.samples) == history.samples.maxlen == 14  # 60 s / 5 s + 2: bounded


def test_csv_tensorboard_and_log_line_carry_the_evaluator_figures(tmp_path):
    monitor = Monitor(tmp_path, mode="log", interval_s=1.0)
    try:
        first = monitor.update(snap(1.0, 100.0))
        assert "eval return" not in Monitor.log_line(first)  # no evaluation yet: not shown
        row = monitor.update(snap(2.0, 300.0, evaluations=1, eval_return=42.5))
        assert "eval return 42.5" in Monitor.log_line(row)
        assert math.isclose(row["frames_per_s"], 200.0)
    finally:
        monitor.close()
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["evaluations"] for r in rows] == ["0", "1"]
    assert rows[0]["eval_return"] == "nan" and rows[1]["eval_return"] == "42.5"
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval_return")] == [(300, 42.5)]  # NaN is not written


def test_live_table_shows_the_evaluator_rows(tmp_path):
    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    row = monitor.update(
        snap(1.0, 100.0, evaluations=3, eval_return=1052.0, eval_x_pos=1234.5, eval_median_x_pos=898.0)
    )
    out = io.StringIO()
    Console(file=out, width=160).print(monitor._render_table(row, [], "running"))
    text = out.getvalue()
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
    assert "frontier" not in Monitor.log_line(off)
    assert "frontier starts 0.48 replayed 4321 frames" in Monitor.log_line(on)
    for row, shown in ((off, False), (on, True)):
        out = io.StringIO()
        Console(file=out, width=160).print(monitor._render_table(row, [], "running"))
        assert ("frames replayed to them" in out.getvalue()) is shown
    assert "4,321" in out.getvalue() and "0.48" in out.getvalue()


def test_the_ray_backends_per_node_figures_show_in_the_log_line_and_the_table(tmp_path):
    from pipeline.run.monitor import NODE_GAUGES, node_gauge_key, node_positions

    monitor = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    nodes = Snapshot(time=1.0, counters={"frames": 10.0}, gauges={})
    for position, live in ((0, 1.0), (1, 0.0)):
        values = dict(zip(NODE_GAUGES, (812.0, 4.2, 3.5, 1.0, 128.0, live, 97.0)))
        nodes.gauges.update({node_gauge_key(position, key): value for key, value in values.items()})
    row = monitor.update(nodes)
    assert node_positions(row) == [0, 1] and node_positions({}) == []
    line = Monitor.log_line(row)
    assert "node0 812 frames/s pull 4 ms 3.5 MB restarts 1 lost 128" in line and "node1" in line
    assert line.count("(down)") == 1
    out = io.StringIO()
    Console(file=out, width=160).print(monitor._render_table(row, [], "running"))
    text = out.getvalue()
    assert "in flight MB" in text and "down" in text and "812" in text
    monitor.close()


CSI = re.compile(r"\x1b\[([?0-9;]*)([A-Za-z])")


def screen_lines(output: str, rows: int) -> list[str]:
    """What a terminal of ``rows`` rows holds (scrollback included) after ``output``.

    Enough of a terminal for rich's Live: text, CR, LF, cursor up (``ESC[nA``, never past
    the top of the screen) and erase line (``ESC[2K``); other sequences (colours, cursor
    visibility) change nothing on the screen.
    """
    lines, row, col = [""], 0, 0
    i = 0
    while i < len(output):
        char = output[i]
        if char == "\x1b" and (match := CSI.match(output, i)):
            arg, command = match.groups()
            if command == "A":
                row = max(max(0, len(lines) - rows), row - int(arg or 1))
            elif command == "K" and arg == "2":
                lines[row] = ""
            i = match.end()
            continue
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
            if row == len(lines):
                lines.append("")
        else:
            lines[row] = lines[row].ljust(col)[:col] + char + lines[row][col + 1 :]
            col += 1
        i += 1
    return [line.rstrip() for line in lines]


def test_log_lines_while_the_live_table_is_up_leave_no_stale_header_above_it(tmp_path, monkeypatch):
    """A log handler made before the table started (as main.py's logging is) writes to the
    terminal while the table is up: the line must land above the table, and every redraw
    must cover the whole previous one, so the "starting" header never stays above the
    "running" one (as it did under tmux)."""
    monkeypatch.setenv("TERM", "xterm-256color")
    terminal = io.StringIO()
    console = Console(file=terminal, force_terminal=True, width=120, height=80, color_system=None)
    log = logging.getLogger("mario.test.live")
    handler = logging.StreamHandler(terminal)
    log.addHandler(handler)
    log.propagate = False
    monitor = Monitor(tmp_path, mode="table", interval_s=1.0, tensorboard=False, console=console)
    try:
        monitor.start_display()
        monitor.announce("startup: warming up the learner")
        monitor.live.refresh()  # the "starting" table is on the screen
        log.warning("first log line, during the warm-up")
        monitor.update(snap(1.0, 100.0), status="running")
        monitor.live.refresh()
        log.warning("second log line, while running")
        monitor.announce("evaluation 1: return 12.0")  # redraws as it was: still "running"
        monitor.live.refresh()
        monitor.update(snap(2.0, 300.0), status="running")
    finally:
        monitor.close()
        log.removeHandler(handler)
        log.propagate = True
    assert handler.stream is terminal  # given back when the table stopped
    lines = screen_lines(terminal.getvalue(), rows=80)
    headers = [i for i, line in enumerate(lines) if "Mario DQN" in line]
    assert len(headers) == 1 and lines[headers[0]].split() == ["Mario", "DQN", "running"], "\n".join(lines)
    for text in ("first log line, during the warm-up", "second log line, while running"):
        (at,) = [i for i, line in enumerate(lines) if text in line]
        assert at < headers[0]  # printed above the table, once
    assert any("evaluation 1: return 12.0" in line for line in lines[headers[0] :])
