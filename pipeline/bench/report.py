"""The suite's output: one table of every figure (rich or plain text), and the JSON.

Rows come in the order the parts ran and each part filled its figures; labels, formats,
meanings and targets come from :data:`pipeline.bench.figures.FIGURES`. Each part opens
with the CPU other processes used while it ran; a part measured on a busy machine says
BUSY there and beside each of its figures, and a part that measured nothing says why.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pipeline.bench.figures import FIGURES, FigureSpec, target_met

if TYPE_CHECKING:
    from pipeline.bench.options import BenchOptions
    from pipeline.bench.suite_base import PartResult


def _format(spec: FigureSpec | None, value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return (spec.fmt if spec else "{:.3g}").format(value)


BUSY = "BUSY"


def load_row(part: str, result: PartResult) -> tuple[str, str, str, str, str]:
    """The part's first row: what other processes used of the cores while it ran."""
    if result.other_cores is None:
        return (part, "other processes' CPU", "n/a", "", "not known here (no /proc/stat)")
    if result.busy:
        return (part, "other processes' CPU", f"{result.other_cores:.2f} cores", BUSY, "its figures are likely low")
    return (part, "other processes' CPU", f"{result.other_cores:.2f} cores", "", "quiet while measuring")


def table_rows(results: dict[str, PartResult]) -> list[tuple[str, str, str, str, str]]:
    """(part, figure, value, target, meaning) rows in the suite's order."""
    rows = []
    for part, result in results.items():
        specs = FIGURES.get(part, {})
        rows.append(load_row(part, result))
        if result.error:
            rows.append((part, "ERROR", "-", "", result.error))
        if result.unmeasured:
            rows.append((part, "NOT MEASURED", "-", BUSY, result.unmeasured))
        for key, value in result.figures.items():
            spec = specs.get(key)
            target = ""
            if spec is not None and spec.target is not None:
                met = target_met(spec, value)
                op, threshold = spec.target
                verdict = "?" if met is None else ("ok" if met else "MISS")
                target = f"{op} {threshold:g} {verdict}"
            if result.busy:
                target = f"{target} {BUSY}".strip()
            rows.append((part, spec.label if spec else key, _format(spec, value), target, spec.meaning if spec else ""))
    return rows


def render_table(results: dict[str, PartResult], header: str, *, rich_output: bool | None = None) -> None:
    """Print the table: rich on a terminal (``rich_output=None``), plain text otherwise."""
    rows = table_rows(results)
    if rich_output is None:
        rich_output = sys.stdout.isatty() and os.environ.get("TERM", "") != "dumb"
    if rich_output:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=header, show_header=True, header_style="bold")
        for name, justify in (
            ("part", "left"),
            ("figure", "left"),
            ("value", "right"),
            ("target", "left"),
            ("meaning", "left"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        previous = None
        for part, *rest in rows:
            style = "red" if "MISS" in rest[2] or rest[0] == "ERROR" else "yellow" if BUSY in rest[2] else None
            table.add_row(part if part != previous else "", *rest, style=style, end_section=False)
            previous = part
        Console().print(table)
        return
    print(header)
    widths = [max(len(r[i]) for r in rows + [("part", "figure", "value", "target", "meaning")]) for i in range(4)]
    line = f"{'part':<{widths[0]}}  {'figure':<{widths[1]}}  {'value':>{widths[2]}}  {'target':<{widths[3]}}  meaning"
    print(line)
    print("-" * len(line))
    for part, figure, value, target, meaning in rows:
        print(f"{part:<{widths[0]}}  {figure:<{widths[1]}}  {value:>{widths[2]}}  {target:<{widths[3]}}  {meaning}")


def _json_safe(value: Any) -> Any:
    # JSON has no NaN or infinity: a figure that could not be measured is null.
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def results_json(
    results: dict[str, PartResult], options: BenchOptions, resolved: Any, argv: Sequence[str], elapsed_s: float
) -> dict[str, Any]:
    """The ``--json`` document: command, machine, configuration, every part, target verdicts."""
    import torch

    cfg = resolved.config
    targets = []
    for part, result in results.items():
        for key, value in result.figures.items():
            spec = FIGURES.get(part, {}).get(key)
            if spec is not None and spec.target is not None:
                targets.append(
                    {
                        "part": part,
                        "figure": key,
                        "value": value,
                        "op": spec.target[0],
                        "threshold": spec.target[1],
                        "met": target_met(spec, value),
                    }
                )
    return _json_safe(
        {
            "command": "python main.py bench " + " ".join(argv),
            "quick": options.quick,
            "seconds_per_part": options.seconds,
            "elapsed_s": elapsed_s,
            "machine": {
                "cores": os.cpu_count(),
                "torch": torch.__version__,
                "loadavg_1m_at_end": os.getloadavg()[0],
                "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            },
            "config": {
                "preset": resolved.preset,
                **{
                    k: getattr(cfg, k)
                    for k in (
                        "env_id",
                        "num_processes",
                        "batch_size",
                        "replay_capacity",
                        "replay_ratio",
                        "ring_capacity",
                        "frame_skip",
                        "action_set",
                        "device",
                        "compile",
                        "amp",
                        "learner_threads",
                    )
                },
                "num_processes_source": resolved.sources.get("num_processes"),
            },
            "parts": {
                part: {
                    "figures": r.figures,
                    "details": r.details,
                    "error": r.error or None,
                    "seconds": r.seconds,
                    # Mean cores other processes kept busy meanwhile, and whether that was
                    # enough to make the figures suspect (machine.load.BUSY_SHARE).
                    "other_cores": r.other_cores,
                    "busy": r.busy,
                    "unmeasured": r.unmeasured or None,
                }
                for part, r in results.items()
            },
            "busy_parts": [part for part, r in results.items() if r.busy],
            "targets": targets,
        }
    )
