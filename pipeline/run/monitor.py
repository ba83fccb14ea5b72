"""The built-in throughput monitor: where every second of the run goes.

Every ``monitor_interval_s`` the trainer hands the monitor a :class:`Snapshot` of raw
counters (cumulative frames, records, updates, phase nanoseconds...) and gauges (replay
size, epsilon, loss...). The monitor turns counters into rates over 10 s, 60 s and the
whole run, and shows them as a live table (rich) on a terminal or as one plain log line
otherwise. The same scalars go to a CSV file and TensorBoard in the run directory.

Memory stays bounded: the history is a fixed-size deque of snapshots, enough to cover
the longest window.

Every key a :class:`Snapshot` carries that more than one module names is defined here,
once: the counters (:data:`COUNTER_KEYS`), the phases' keys (:func:`collector_phase_key`,
:func:`learner_phase_key`) and the evaluator's gauges (:data:`EVAL_GAUGES`). The trainer
builds snapshots with them (:mod:`pipeline.run.snapshots`) and the monitor reads them.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, TextIO, get_args

from pipeline.transport.ring import COLLECTOR_PHASES, CollectorPhase

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

logger = logging.getLogger("mario.monitor")

WINDOWS_S: tuple[int, ...] = (10, 60)

# -- snapshot keys ---------------------------------------------------------------------------
# Plain strings typed as Literal (not Enums): they are CSV columns, TensorBoard tags,
# summary.json and checkpoint keys, and must stay plain str there.

# The run's cumulative counters (snapshot counters, checkpoints' "counters", summary.json).
CounterKey = Literal["frames", "steps", "records", "updates", "samples", "episodes", "epochs", "replayed_frames"]
COUNTER_KEYS: Final[tuple[CounterKey, ...]] = get_args(CounterKey)

# Where the learner process's time goes (its event loop's tasks).
LearnerPhase = Literal["wait", "sample", "update", "publish", "probe", "consolidate"]
LEARNER_PHASES: Final[tuple[LearnerPhase, ...]] = get_args(LearnerPhase)


def phase_ns_key(phase: CollectorPhase | LearnerPhase) -> str:
    """Nanoseconds spent in ``phase``: the key in a per-collector row (its home slot's)."""
    return f"{phase}_ns"


def collector_phase_key(phase: CollectorPhase) -> str:
    """Snapshot counter: nanoseconds in ``phase`` summed over every collector slot."""
    return f"collector_{phase_ns_key(phase)}"


def learner_phase_key(phase: LearnerPhase) -> str:
    """Snapshot counter: the learner process's nanoseconds in ``phase``."""
    return f"learner_{phase_ns_key(phase)}"


def share_key(phase_key: str) -> str:
    """The derived row's percent-of-wall-time column of a phase counter (``*_ns`` -> ``*_pct``)."""
    return phase_key.removesuffix("_ns") + "_pct"


# The evaluator's gauges, in the order they are reported (and so the CSV's column order).
EvalGauge = Literal[
    "evaluations",
    "eval_return",
    "eval_x_pos",
    "eval_median_x_pos",
    "eval_max_x_pos",
    "eval_flag_rate",
    "eval_greedy_x_pos",
    "eval_first_flag_frames",
    "eval_length",
    "eval_best_return",
    "eval_weights_version",
    "eval_frames",
    "eval_s",
    "eval_cpu_s",
    "eval_wall_s_total",
    "eval_cpu_s_total",
]
EVAL_GAUGES: Final[tuple[EvalGauge, ...]] = get_args(EvalGauge)
# The gauges that show one field of the newest evaluation result (NaN before the first);
# the field names are those pipeline.run.evaluator puts in its results.
EVAL_RESULT_FIELDS: Final[Mapping[EvalGauge, str]] = MappingProxyType(
    {
        "eval_return": "mean_return",
        "eval_x_pos": "mean_x_pos",
        "eval_median_x_pos": "median_x_pos",
        "eval_max_x_pos": "max_x_pos",
        "eval_flag_rate": "flag_rate",
        "eval_greedy_x_pos": "greedy_x_pos",
        "eval_length": "mean_length",
        "eval_best_return": "best_return",
        "eval_weights_version": "weights_version",
        # The frames of the evaluated weights: a niced evaluator's result arrives later.
        "eval_frames": "frames",
        "eval_s": "eval_s",
        "eval_cpu_s": "cpu_s",
    }
)

# Per collector node with the Ray backend (pipeline.cluster): one gauge of each kind per
# node place, keyed by :func:`node_gauge_key`.
NodeGauge = Literal["frames_per_s", "pull_ms", "inflight_mb", "restarts", "lost", "live", "cpu_pct"]
NODE_GAUGES: Final[tuple[NodeGauge, ...]] = get_args(NodeGauge)


def node_gauge_key(position: int, gauge: NodeGauge) -> str:
    """The snapshot gauge of one collector node (``node0_frames_per_s``...)."""
    return f"node{position}_{gauge}"


def node_positions(row: Mapping[str, float]) -> list[int]:
    """The node places a row has gauges for (none with the local backend)."""
    found = []
    while node_gauge_key(len(found), "frames_per_s") in row:
        found.append(len(found))
    return found


# Counters (cumulative) whose rates the monitor reports, and their display names.
RATE_COUNTERS: dict[CounterKey, str] = {
    "frames": "env frames/s",
    "steps": "agent steps/s",
    "records": "consolidated records/s",
    "updates": "updates/s",
    "samples": "samples/s",
    "episodes": "episodes/s",
}


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

    def _render(self, row: dict[str, float] | None = None):
        """The table as of the last update (``row``: a newer one)."""
        return self._render_table(self.last_row if row is None else row, self._collectors, self._status, self._startup)

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
            logger.info(self.log_line(row, status))
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

    # -- output -----------------------------------------------------------------------------
    @staticmethod
    def log_line(row: dict[str, float], status: str = "") -> str:
        def g(key: str) -> float:
            return row.get(key, float("nan"))

        return (
            f"{status} frames {g('frames'):.0f} | {g('frames_per_s'):.0f} frames/s "
            f"({g('steps_per_s'):.0f} steps/s) | records/s {g('records_per_s'):.0f} | "
            f"stall {g('stall_pct'):.1f}% | ring {g('ring_fill_pct'):.0f}% | replay {g('replay_size'):.0f} | "
            f"updates/s {g('updates_per_s'):.1f} samples/s {g('samples_per_s'):.0f} "
            f"ratio {g('replay_ratio'):.2f} | loss {g('loss'):.4f} q {g('mean_q'):.3f} "
            f"eps {g('epsilon'):.3f} | v{g('weights_version'):.0f} | "
            f"return {g('episode_return'):.1f} x {g('episode_x_pos'):.0f} flag {g('flag_rate'):.2f} | "
            f"restarts {g('restarts'):.0f}"
            + (
                f" | frontier starts {g('frontier_start_share'):.2f} replayed {g('replayed_frames'):.0f} frames"
                if row.get("replayed_frames")
                else ""
            )
            + "".join(
                f" | node{p} {g(node_gauge_key(p, 'frames_per_s')):.0f} frames/s pull "
                f"{g(node_gauge_key(p, 'pull_ms')):.0f} ms {g(node_gauge_key(p, 'inflight_mb')):.1f} MB "
                f"restarts {g(node_gauge_key(p, 'restarts')):.0f} lost {g(node_gauge_key(p, 'lost')):.0f}"
                + ("" if g(node_gauge_key(p, "live")) else " (down)")
                for p in node_positions(row)
            )
            + (
                f" | steady agree {g('steady_agreement'):.3f} (mean {g('steady_expected_agreement'):.3f},"
                f" train/train {g('steady_train_agreement'):.3f}) churn {g('steady_churn'):.3f}"
                f" offset {g('steady_q_offset'):.3f} gap {g('steady_action_gap'):.3f}"
                if not math.isnan(g("steady_agreement"))
                else ""
            )
            + (
                f" | eval return {g('eval_return'):.1f} x {g('eval_x_pos'):.0f} greedy {g('eval_greedy_x_pos'):.0f}"
                f" flag {g('eval_flag_rate'):.2f}"
                if row.get("evaluations")
                else ""
            )
        ).strip()

    def _render_table(
        self,
        row: dict[str, float],
        collectors: list[dict[str, float]],
        status: str = "",
        startup: dict[str, float] | None = None,
    ):
        from rich.console import Group
        from rich.table import Table

        def f(key: str, fmt: str = "{:,.0f}") -> str:
            value = row.get(key)
            return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)

        main = Table(title=f"Mario DQN  {status}", show_header=True, header_style="bold")
        main.add_column("throughput")
        for label in ("10 s", "60 s", "run"):
            main.add_column(label, justify="right")
        for key, label in RATE_COUNTERS.items():
            main.add_row(
                label, f(f"{key}_per_s", "{:,.1f}"), f(f"{key}_per_s_60s", "{:,.1f}"), f(f"{key}_per_s_run", "{:,.1f}")
            )

        state = Table(show_header=True, header_style="bold")
        state.add_column("learner / replay")
        state.add_column("value", justify="right")
        state.add_column("episodes / system")
        state.add_column("value", justify="right")
        left = [
            ("replay size", f("replay_size")),
            ("replay ratio", f("replay_ratio", "{:.2f}")),
            ("loss", f("loss", "{:.4f}")),
            ("TD error", f("td_error", "{:.4f}")),
            ("mean Q", f("mean_q", "{:.3f}")),
            ("epsilon", f("epsilon", "{:.3f}")),
            ("weights version", f("weights_version")),
            ("ring fill %", f("ring_fill_pct", "{:.1f}")),
            ("stall %", f("stall_pct", "{:.1f}")),
            ("longest poll gap ms", f("poll_gap_ms", "{:.1f}")),
            ("evaluations", f("evaluations")),
            ("evaluated weights v", f("eval_weights_version")),
            ("evaluator CPU %", f("evaluator_cpu_pct", "{:.0f}")),
        ]
        right = [
            ("return (last 100)", f("episode_return", "{:.1f}")),
            ("x_pos (last 100)", f("episode_x_pos")),
            ("flag rate", f("flag_rate", "{:.2f}")),
            ("episodes", f("episodes")),
            ("restarts", f("restarts")),
            ("bad episode records", f("bad_episode_records")),
            ("learner CPU %", f("learner_cpu_pct", "{:.0f}")),
            ("learner RSS MB", f("learner_rss_mb")),
            ("GPU util %", f("gpu_util_pct", "{:.0f}")),
            ("GPU mem MB", f("gpu_mem_mb")),
            ("eval return", f("eval_return", "{:.1f}")),
            (
                "eval x_pos mean / median / greedy",
                f"{f('eval_x_pos')} / {f('eval_median_x_pos')} / {f('eval_greedy_x_pos')}",
            ),
            (
                "eval flag rate (first flag at frames)",
                f"{f('eval_flag_rate', '{:.2f}')} ({f('eval_first_flag_frames')})",
            ),
        ]
        # The steadiness probe's last figures (pipeline.learning.steadiness).
        left.append(("BN train/eval agreement", f("steady_agreement", "{:.3f}")))
        right.append(("greedy churn per publish", f("steady_churn", "{:.3f}")))
        left.append(("|Q eval - Q train|", f("steady_q_offset", "{:.3f}")))
        right.append(("median action gap", f("steady_action_gap", "{:.3f}")))
        left.append(("agreement, batchings' mean", f("steady_expected_agreement", "{:.3f}")))
        right.append(("train/train agreement", f("steady_train_agreement", "{:.3f}")))
        if row.get("replayed_frames"):  # restarts near the frontier are on
            left.append(("frontier starts (last 100)", f("frontier_start_share", "{:.2f}")))
            right.append(("frames replayed to them", f("replayed_frames")))
        for (lk, lv), (rk, rv) in zip(left, right, strict=True):
            state.add_row(lk, lv, rk, rv)

        phases = Table(show_header=True, header_style="bold")
        phases.add_column("time split, % of wall time (10 s)")
        phases.add_column("")
        phases.add_row(
            "collectors (mean per process)",
            "  ".join(f"{n} {f(share_key(collector_phase_key(n)), '{:.1f}')}" for n in COLLECTOR_PHASES),
        )
        phases.add_row(
            "learner", "  ".join(f"{n} {f(share_key(learner_phase_key(n)), '{:.1f}')}" for n in LEARNER_PHASES)
        )

        per = Table(show_header=True, header_style="bold")
        for col in ("collector", "frames/s", "steps/s", "weights v", "lag", "restarts", "CPU %", "RSS MB"):
            per.add_column(col, justify="right")
        for i, c in enumerate(collectors):
            per.add_row(
                str(i),
                f"{c.get('frames_per_s', 0):,.0f}",
                f"{c.get('steps_per_s', 0):,.1f}",
                f"{c.get('weights_version', 0):.0f}",
                f"{c.get('weights_lag', 0):.0f}",
                f"{c.get('restarts', 0):.0f}",
                f"{c.get('cpu_pct', 0):.0f}",
                f"{c.get('rss_mb', 0):.0f}",
            )
        parts: list = [main, state, phases, per]
        if node_positions(row):
            nodes = Table(show_header=True, header_style="bold")
            for col in ("node", "state", "frames/s", "pull ms", "in flight MB", "restarts", "lost", "CPU %"):
                nodes.add_column(col, justify="right")
            for p in node_positions(row):
                nodes.add_row(
                    str(p),
                    "up" if row.get(node_gauge_key(p, "live")) else "down",
                    f(node_gauge_key(p, "frames_per_s")),
                    f(node_gauge_key(p, "pull_ms"), "{:.1f}"),
                    f(node_gauge_key(p, "inflight_mb"), "{:.1f}"),
                    f(node_gauge_key(p, "restarts")),
                    f(node_gauge_key(p, "lost")),
                    f(node_gauge_key(p, "cpu_pct")),
                )
            parts.append(nodes)
        if startup:
            parts.append("startup: " + ", ".join(f"{k} {v:.1f} s" for k, v in startup.items()))
        parts.extend(self.messages)
        return Group(*parts)

    def _write_csv(self, row: dict[str, float]) -> None:
        if self._csv_writer is None:
            self.run_path.mkdir(parents=True, exist_ok=True)
            fieldnames = list(row)
            if self._csv_resume:
                with self.csv_path.open(newline="") as existing:
                    header = next(csv.reader(existing), None)
                fieldnames = header or fieldnames
            self._csv_file = self.csv_path.open("a" if self._csv_resume else "w", newline="")
            self._csv_writer = csv.DictWriter(self._csv_file, fieldnames=fieldnames, extrasaction="ignore")
            if not self._csv_resume:
                self._csv_writer.writeheader()
        self._csv_writer.writerow({k: row.get(k, "") for k in self._csv_writer.fieldnames})
        assert self._csv_file is not None
        self._csv_file.flush()

    def _write_tensorboard(self, row: dict[str, float], step: int) -> None:
        if self.writer is None:
            return
        for key, value in row.items():
            if key != "time_s" and isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(key, value, step, walltime=time.time())
        self.writer.flush()
