"""The figures the collector and pipeline parts share, and their specs."""

from __future__ import annotations

import pytest

from pipeline.bench.figures import FIGURES, PHASE_MEANING
from pipeline.bench.parts_collection import collection_figures
from pipeline.transport.ring import COLLECTOR_PHASES


def _window():
    window = {"frames_per_s": 900.0, "steps_per_s": 225.0, "env_share": 0.8}
    window.update({f"{name}_pct": 10.0 + i for i, name in enumerate(PHASE_MEANING)})
    return window


@pytest.mark.parametrize("part", ["collector", "pipeline"])
def test_collection_figures_divide_by_the_mean_of_before_and_after(part):
    figures = collection_figures(part, _window(), before=800.0, after=1200.0)
    assert figures[f"{part}_frames_per_s"] == 900.0 and figures[f"{part}_steps_per_s"] == 225.0
    assert figures[f"{part}_efficiency"] == pytest.approx(0.9)
    assert figures["wrapped_before_frames_per_s"] == 800.0 and figures["wrapped_after_frames_per_s"] == 1200.0
    assert figures["other_pct"] == 10.0 + len(PHASE_MEANING) - 1
    # Every figure has a spec in its part's table.
    assert set(figures) <= set(FIGURES[part])


def test_phase_meanings_cover_the_monitor_phases():
    """One meaning per collector phase of the monitor, plus "other": a renamed phase fails here."""
    assert list(PHASE_MEANING) == [*COLLECTOR_PHASES, "other"]
