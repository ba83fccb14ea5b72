"""The throughput monitor on snapshots made here: rates over trailing windows, a bounded
history, the CSV and TensorBoard rows, and the live table on a terminal while log lines
arrive."""

from __future__ import annotations

import csv
import io
import logging
import math
import re

from rich.console import Console
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from pipeline.run.monitor.monitor import Monitor, RateHistory, Snapshot
from pipeline.run.monitor.view import log_line

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
        assert "eval return" not in log_line(first)  # no evaluation yet: not shown
        row = monitor.update(snap(2.0, 300.0, evaluations=1, eval_return=42.5))
        assert "eval return 42.5" in log_line(row)
        assert math.isclose(row["frames_per_s"], 200.0)
    finally:
        monitor.close()
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["evaluations"] for r in rows] == ["0", "1"]
    assert rows[0]["eval_return"] == "nan" and rows[1]["eval_return"] == "42.5"
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval_return")] == [(300, 42.5)]  # NaN is not written


def test_a_resumed_csv_gains_the_columns_a_newer_version_adds(tmp_path):
    """A run resumed by a version that reports more figures keeps its earlier rows and
    adds the new columns, empty in those rows, rather than dropping the new figures."""
    first = Monitor(tmp_path, mode="off", interval_s=1.0, tensorboard=False)
    try:
        first.update(snap(1.0, 100.0))
    finally:
        first.close()
    resumed = Monitor(tmp_path, mode="off", interval_s=1.0, resume=True, tensorboard=False)
    try:
        newer = snap(2.0, 300.0)
        newer.gauges["steady_train_agreement"] = 0.93  # a figure the first version did not write
        resumed.update(newer)
        resumed.update(snap(3.0, 500.0))
    finally:
        resumed.close()
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        header = next(csv.reader(handle))
        handle.seek(0)
        rows = list(csv.DictReader(handle))
    assert header[-1] == "steady_train_agreement" and header.count("frames") == 1
    assert [r["frames"] for r in rows] == ["100.0", "300.0", "500.0"]  # nothing lost
    assert [r["steady_train_agreement"] for r in rows] == ["", "0.93", ""]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.csv"]  # the widening copy renamed over it


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
