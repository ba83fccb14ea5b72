"""The soak part's arithmetic on synthetic snapshots."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from pipeline.bench.soak import soak_details, soak_figures


def _snap(t, frames, updates, replay, rss, collectors=2):
    return SimpleNamespace(
        time=t,
        counters={"frames": frames, "updates": updates},
        gauges={"replay_size": replay, "learner_rss_mb": rss},
        collectors=[{}] * collectors,
    )


def test_soak_figures_compare_first_and_last_minute_after_the_replay_is_full():
    # Replay full at t=30; frames at 100/s then 90/s from t=90; updates at 10/s throughout.
    snaps = []
    for t in range(0, 181, 5):
        frames = 100 * t if t <= 90 else 9000 + 90 * (t - 90)
        snaps.append(_snap(t, frames, 10 * max(0, t - 10), min(3000, 100 * t), 1000 + (t >= 30) * (t - 30) / 3))
    figures = soak_figures(snaps, capacity=3000, minutes=3)
    assert figures["replay_full_s"] == 30
    assert figures["frames_per_s_first"] == pytest.approx(100.0)  # minute [30, 90]
    assert figures["frames_per_s_last"] == pytest.approx(90.0)  # the last minute, [120, 180]
    assert figures["frames_ratio"] == pytest.approx(0.9)
    assert figures["updates_ratio"] == pytest.approx(1.0)
    assert figures["rss_growth_pct"] == pytest.approx(5.0)
    details = soak_details(snaps)
    assert [m["from_s"] for m in details["per_minute"]] == [0, 60, 120]


def test_soak_figures_without_a_full_replay_are_nan():
    snaps = [_snap(t, 100 * t, t, 10 * t, 1000) for t in range(0, 61, 5)]
    figures = soak_figures(snaps, capacity=3000, minutes=1)
    assert math.isnan(figures["frames_ratio"]) and math.isnan(figures["rss_growth_pct"])
