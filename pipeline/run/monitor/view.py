"""What the monitor shows: the plain log line and the live table (rich) of a derived row.

:class:`~pipeline.run.monitor.monitor.Monitor` derives the row (rates, phase shares, gauges) and
hands it here; these functions only format it. A figure that is NaN (not measured yet, or
not measured by this run) shows as "-" in the table and is left out of the log line where
a whole group of figures is missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pipeline.common.gauges import (
    EVAL_FIRST_FLAG_FRAMES,
    EVAL_FLAG_RATE,
    EVAL_GREEDY_X_POS,
    EVAL_MEDIAN_X_POS,
    EVAL_RETURN,
    EVAL_WEIGHTS_VERSION,
    EVAL_X_POS,
    EVALUATIONS,
    EVALUATOR_CPU_PCT,
    STEADINESS_FIGURES,
    STEADINESS_LABELS,
    steadiness_gauge,
)
from pipeline.run.monitor.keys import (
    LEARNER_PHASES,
    RATE_COUNTERS,
    collector_phase_key,
    learner_phase_key,
    node_gauge_key,
    node_positions,
    share_key,
)
from pipeline.transport.ring import COLLECTOR_PHASES

if TYPE_CHECKING:
    from rich.console import Group


def log_line(row: dict[str, float], status: str = "") -> str:
    """One plain line of a derived row: what the ``log`` mode writes every tick."""

    def g(key: str) -> float:
        return row.get(key, float("nan"))

    def steady(figure: str) -> float:
        return g(steadiness_gauge(figure))

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
            f" | steady agree {steady('agreement'):.3f}"
            + (
                f" (mean {steady('expected_agreement'):.3f}, train/train {steady('train_agreement'):.3f})"
                # NaN with a single batching (steadiness_batchings=1): nothing to compare it with
                if not math.isnan(steady("train_agreement"))
                else ""
            )
            + f" churn {steady('churn'):.3f}"
            f" offset {steady('q_offset'):.3f} gap {steady('action_gap'):.3f}"
            if not math.isnan(steady("agreement"))
            else ""
        )
        + (
            f" | eval return {g(EVAL_RETURN):.1f} x {g(EVAL_X_POS):.0f} greedy {g(EVAL_GREEDY_X_POS):.0f}"
            f" flag {g(EVAL_FLAG_RATE):.2f}"
            if row.get(EVALUATIONS)
            else ""
        )
    ).strip()


def render_table(
    row: dict[str, float],
    collectors: list[dict[str, float]],
    status: str = "",
    startup: dict[str, float] | None = None,
    messages: Iterable[str] = (),
) -> Group:
    """The live table of a derived row, its collectors' rows, and the latest ``messages``
    (announcements) under it."""
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
        ("evaluations", f(EVALUATIONS)),
        ("evaluated weights v", f(EVAL_WEIGHTS_VERSION)),
        ("evaluator CPU %", f(EVALUATOR_CPU_PCT, "{:.0f}")),
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
        ("eval return", f(EVAL_RETURN, "{:.1f}")),
        (
            "eval x_pos mean / median / greedy",
            f"{f(EVAL_X_POS)} / {f(EVAL_MEDIAN_X_POS)} / {f(EVAL_GREEDY_X_POS)}",
        ),
        (
            "eval flag rate (first flag at frames)",
            f"{f(EVAL_FLAG_RATE, '{:.2f}')} ({f(EVAL_FIRST_FLAG_FRAMES)})",
        ),
    ]
    # The steadiness probe's last figures (pipeline.learning.steadiness): half of them on
    # each side, in the order of their labels.
    half = len(STEADINESS_FIGURES) // 2
    for side, figures in ((left, STEADINESS_FIGURES[:half]), (right, STEADINESS_FIGURES[half:])):
        side.extend((STEADINESS_LABELS[name], f(steadiness_gauge(name), "{:.3f}")) for name in figures)
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
    phases.add_row("learner", "  ".join(f"{n} {f(share_key(learner_phase_key(n)), '{:.1f}')}" for n in LEARNER_PHASES))

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
    parts.extend(messages)
    return Group(*parts)
