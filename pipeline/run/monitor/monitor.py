"""The built-in throughput monitor: where every second of the run goes.

Every ``monitor_interval_s`` the trainer hands the monitor a :class:`Snapshot` of raw
counters (cumulative frames, records, updates, phase nanoseconds...) and gauges (replay
size, epsilon, loss...). The monitor turns counters into rates over 10 s, 60 s and the
whole run, and shows them as a live table (rich) on a terminal or as one plain log line
otherwise. The same scalars go to a CSV file and TensorBoard in the run directory.

Memory stays bounded: the history is a fixed-size deque of snapshots, enough to cover
the longest window.

The keys a :class:`Snapshot` carries are defined once, in :mod:`pipeline.run.monitor.keys`;
the log line and the table are drawn by :mod:`pipeline.run.monitor.view`.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from pipeline.run.monitor.keys import (
    LEARNER_PHASES,
    RATE_COUNTERS,
    collector_phase_key,
    learner_phase_key,
    share_key,
)
from pipeline.run.monitor.view import log_line, render_table
from pipeline.transport.ring import COLLECTOR_PHASES

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.live import Live

logger = logging.getLogger("mario.monitor")

WINDOWS_S: tuple[int, ...] = (10, 60)


@dataclass
class Snapshot:
    """Raw figures at one instant. ``counters`` are cumulative; ``gauges`` instantaneous."""

    time: float
    counters: dict[str, float]
    gauges: dict[str, float]
    collectors: list[dict[str, float]] = field(default_factory=list)  # per collector counters+gauges
    startup: dict[str, float] = field(default_factory=dict)  # seconds, reported on their own


class RateHistory:
    """Fixed-size history of snapshots; rates over trailing windows and the whole run."""

    def __init__(self, interval_s: float, longest_window_s: float = max(WINDOWS_S)) -> None:
        self.samples: deque[Snapshot] = deque(maxlen=int(math.ceil(longest_window_s / interval_s)) + 2)
        self.first: Snapshot | None = None

    def add(self, snap: Snapshot) -> None:
        if self.first is None:
            self.first = snap
        self.samples.append(snap)

    def _at_or_before(self, t: float) -> Snapshot:
        chosen = self.samples[0]
        for snap in self.samples:  # at most ~14 entries
            if snap.time <= t:
                chosen = snap
        return chosen

    def rate(self, key: str, window_s: float | None, per_collector: int | None = None) -> float:
        if not self.samples:
            return 0.0
        last = self.samples[-1]
        base = self.first if window_s is None else self._at_or_before(last.time - window_s)
        assert base is not None
        dt = last.time - base.time
        if dt <= 0:
            return 0.0
        if per_collector is None:
            return (last.counters.get(key, 0.0) - base.counters.get(key, 0.0)) / dt
        now = last.collectors[per_collector].get(key, 0.0) if per_collector < len(last.collectors) else 0.0
        then = base.collectors[per_collector].get(key, 0.0) if per_collector < len(base.collectors) else 0.0
        return max(0.0, now - then) / dt


def phase_shares(history: RateHistory, phase_keys: list[str], window_s: float) -> dict[str, float]:
    """Percent of wall time per phase counter over the window (summed over processes for
    collectors), keyed by the counter's :func:`share_key`."""
    return {share_key(key): 100.0 * history.rate(key, window_s) / 1e9 for key in phase_keys}


class Monitor:
    """Shows, logs and writes the run's figures (see the module docstring).

    The live table (rich's ``Live``) redraws itself in place by moving the cursor up over
    its last render. Anything else written to the terminal meanwhile shifts the screen
    under it, and the redraw then starts too low, leaving the top of the old render (the
    "starting" header) above the new one. Log records are the usual culprit: the handlers
    that ``logging.basicConfig`` made before the table started hold the real stderr, not
    the stand-in that ``Live`` installs. So while the table is up, every logging handler
    that writes to the terminal writes through the table's console instead, which prints
    the line above the table and redraws the table below it.
    """

    def __init__(
        self,
        run_path: Path,
        *,
        mode: str,
        interval_s: float,
        resume: bool = False,
        tensorboard: bool = True,
        console: Console | None = None,
    ) -> None:
        """``console`` is where the live table goes (default: the terminal on stdout)."""
        self.run_path = Path(run_path)
        self.interval_s = interval_s
        self.history = RateHistory(interval_s)
        self.mode = self._resolve_mode(mode)
        self.console = console
        self.live: Live | None = None
        self._rerouted: list[tuple[logging.StreamHandler, TextIO]] = []  # handler, its own stream
        # What the table shows between updates (an announcement redraws it as it was).
        self._status = "starting"
        self._collectors: list[dict[str, float]] = []
        self._startup: dict[str, float] = {}
        self.csv_path = self.run_path / "metrics.csv"
        self._csv_file = None
        self._csv_writer: csv.DictWriter | None = None
        self._csv_resume = resume and self.csv_path.exists()
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(self.run_path / "tensorboard"))
        self.last_row: dict[str, float] = {}
        self.startup_reported: set[str] = set()
        self.messages: deque[str] = deque(maxlen=4)  # latest announcements, shown under the table

    @staticmethod
    def _resolve_mode(mode: str) -> str:
        if mode == "auto":
            return "table" if sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb" else "log"
        return mode

    # -- lifecycle ------------------------------------------------------------------------
    def start_display(self) -> None:
        if self.mode == "table":
            from rich.live import Live

            terminal = {id(stream) for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}
            self.live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
            self.live.start()
            if self.live.console.is_terminal:  # else Live draws once, at the end, and moves no cursor
                self._reroute_logging(terminal | {id(self.live.console.file)})

    def _reroute_logging(self, terminal: set[int]) -> None:
        """Point every logging handler that writes to the terminal at the live table's console."""
        from rich.file_proxy import FileProxy

        loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for each in loggers:
            for handler in getattr(each, "handlers", []):
                if (
                    isinstance(handler, logging.StreamHandler)
                    and not isinstance(handler, logging.FileHandler)
                    and id(handler.stream) in terminal
                    and all(handler is not seen for seen, _ in self._rerouted)
                ):
                    assert self.live is not None
                    own = handler.setStream(FileProxy(self.live.console, handler.stream))
                    self._rerouted.append((handler, own))

    def _restore_logging(self) -> None:
        for handler, stream in self._rerouted:
            handler.setStream(stream)
        self._rerouted.clear()

    def _render(self, row: dict[str, float] | None = None) -> Group:
        """The table as of the last update (``row``: a newer one)."""
        return render_table(
            self.last_row if row is None else row, self._collectors, self._status, self._startup, self.messages
        )

    def announce(self, message: str) -> None:
        """A startup or lifecycle event: a log line, or a line under the live table."""
        if self.mode == "off":
            return
        self.messages.append(message)
        if self.live is not None:
            self.live.update(self._render())
        else:
            logger.info(message)

    def close(self) -> None:
        if self.live is not None:
            try:
                self.live.stop()
            finally:
                self._restore_logging()  # after the last redraw: a record logged meanwhile still goes above it
                self.live = None
        if self._csv_file is not None:
            self._csv_file.close()
            self._csv_file = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    # -- per tick ---------------------------------------------------------------------------
    def update(self, snap: Snapshot, status: str = "") -> dict[str, float]:
        """Record a snapshot, derive the scalars, and show/log/write them."""
        self.history.add(snap)
        row = self.derive(snap)
        per_collector = self.collector_rows(snap)
        if self.mode == "table" and self.live is not None:
            self._status, self._collectors, self._startup = status, per_collector, dict(snap.startup)
            self.live.update(self._render(row))
        elif self.mode == "log":
            logger.info(log_line(row, status))
        self.last_row = row  # an announcement below redraws the table with this row
        for key, seconds in snap.startup.items():
            if key not in self.startup_reported:
                self.startup_reported.add(key)
                self.announce(f"startup: {key} after {seconds:.1f} s")
        self._write_csv(row)
        self._write_tensorboard(row, int(snap.counters.get("frames", 0)))
        return row

    def derive(self, snap: Snapshot) -> dict[str, float]:
        h = self.history
        row: dict[str, float] = {"time_s": snap.time}
        for key in RATE_COUNTERS:
            row[f"{key}_per_s"] = h.rate(key, WINDOWS_S[0])
            row[f"{key}_per_s_60s"] = h.rate(key, WINDOWS_S[1])
            row[f"{key}_per_s_run"] = h.rate(key, None)
            row[key] = snap.counters.get(key, 0.0)
        row["replayed_frames"] = snap.counters.get("replayed_frames", 0.0)
        # Samples drawn per inserted transition: over the last 10 s (what the limiter is
        # doing now) and over the whole run (including the warm-up fill, so lower).
        row["replay_ratio"] = row["samples_per_s"] / row["records_per_s"] if row["records_per_s"] > 0 else 0.0
        row["replay_ratio_run"] = snap.counters.get("samples", 0.0) / max(1.0, snap.counters.get("records", 0.0))
        collector_keys = [collector_phase_key(phase) for phase in COLLECTOR_PHASES]
        for key, share in phase_shares(h, collector_keys, WINDOWS_S[0]).items():
            row[key] = share / max(1, len(snap.collectors))
        row.update(phase_shares(h, [learner_phase_key(phase) for phase in LEARNER_PHASES], WINDOWS_S[0]))
        # Per collector (its envs' stalls all land on its home slot): at most 100.
        row["stall_pct"] = min(100.0, row[share_key(collector_phase_key("stall"))])
        row.update(snap.gauges)
        return row

    def collector_rows(self, snap: Snapshot) -> list[dict[str, float]]:
        rows = []
        for i, c in enumerate(snap.collectors):
            rows.append(
                {
                    "frames_per_s": self.history.rate("frames", WINDOWS_S[0], per_collector=i),
                    "steps_per_s": self.history.rate("steps", WINDOWS_S[0], per_collector=i),
                    **c,
                }
            )
        return rows

    # -- output (the log line and the table: pipeline.run.monitor.view) -----------------------
    def _write_csv(self, row: dict[str, float]) -> None:
        if self._csv_writer is None:
            self.run_path.mkdir(parents=True, exist_ok=True)
            fieldnames = list(row)
            if self._csv_resume:
                with self.csv_path.open(newline="") as existing:
                    header = next(csv.reader(existing), None)
                if header:
                    new_columns = [key for key in fieldnames if key not in header]
                    fieldnames = header + new_columns
                    if new_columns:
                        self._widen_csv(fieldnames, new_columns)
            self._csv_file = self.csv_path.open("a" if self._csv_resume else "w", newline="")
            self._csv_writer = csv.DictWriter(self._csv_file, fieldnames=fieldnames, extrasaction="ignore")
            if not self._csv_resume:
                self._csv_writer.writeheader()
        self._csv_writer.writerow({k: row.get(k, "") for k in self._csv_writer.fieldnames})
        assert self._csv_file is not None
        self._csv_file.flush()

    def _widen_csv(self, fieldnames: list[str], new_columns: list[str]) -> None:
        """Give the resumed run's CSV the columns this version adds (its earlier rows leave
        them empty), once, before the first new row: else a run resumed by a newer version
        would drop its new figures from the CSV. Written beside it and renamed over it, so
        a crash meanwhile leaves the old file whole."""
        widened = self.csv_path.with_name(self.csv_path.name + ".widening")
        with self.csv_path.open(newline="") as old, widened.open("w", newline="") as new:
            writer = csv.DictWriter(new, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(csv.DictReader(old))  # one pass, row by row: no copy in memory
        os.replace(widened, self.csv_path)
        logger.info("metrics.csv: %d new column(s) from here on (%s)", len(new_columns), ", ".join(new_columns))

    def _write_tensorboard(self, row: dict[str, float], step: int) -> None:
        if self.writer is None:
            return
        for key, value in row.items():
            if key != "time_s" and isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(key, value, step, walltime=time.time())
        self.writer.flush()
