"""The soak part's arithmetic: does training slow down or grow once the replay is full?

From the snapshots of one long training run: the first and the last full minute after
the replay memory filled (frames/s and updates/s), the learner's and the collectors'
RSS growth since then (:func:`soak_figures`), and a per-minute series for the JSON
(:func:`soak_details`). Counters are interpolated between monitor ticks, so the minutes
need not fall on ticks.
"""

from __future__ import annotations

from typing import Any


def _counter_at(snaps: list[Any], t: float, key: str) -> float:
    """A cumulative counter at time ``t``, linearly interpolated between snapshots."""
    previous = snaps[0]
    for snap in snaps:
        if snap.time >= t:
            if snap.time == previous.time:
                return snap.counters.get(key, 0.0)
            share = (t - previous.time) / (snap.time - previous.time)
            a, b = previous.counters.get(key, 0.0), snap.counters.get(key, 0.0)
            return a + share * (b - a)
        previous = snap
    return snaps[-1].counters.get(key, 0.0)


def _rate(snaps: list[Any], start: float, end: float, key: str) -> float:
    """The mean rate of counter ``key`` between times ``start`` and ``end``."""
    return (_counter_at(snaps, end, key) - _counter_at(snaps, start, key)) / (end - start)


def soak_figures(snaps: list[Any], capacity: int, minutes: float) -> dict[str, float]:
    """First and last full minute after the replay is full, and the RSS growth since then."""
    nan = float("nan")
    out = {"minutes": minutes, "replay_capacity": float(capacity)}
    full = next(
        (s for s in snaps if s.gauges.get("replay_size", 0) >= capacity and s.counters.get("updates", 0) > 0), None
    )
    if full is None:
        out.update(replay_full_s=nan, frames_ratio=nan, updates_ratio=nan, rss_growth_pct=nan)
        return out
    out["replay_full_s"] = full.time
    end = snaps[-1].time
    if end - full.time >= 120:  # two minutes that do not overlap
        last_start = end - 60
        for key in ("frames", "updates"):
            first = _rate(snaps, full.time, full.time + 60, key)
            last = _rate(snaps, last_start, last_start + 60, key)
            out[f"{key}_per_s_first"], out[f"{key}_per_s_last"] = first, last
            out[f"{key}_ratio"] = last / first if first else nan
    else:
        out.update(frames_ratio=nan, updates_ratio=nan)
    for prefix, gauge in (("", "learner_rss_mb"), ("collectors_", "collectors_rss_mb")):
        rss_full = full.gauges.get(gauge, nan)
        rss_end = snaps[-1].gauges.get(gauge, nan)
        out[f"{prefix}rss_full_mb"], out[f"{prefix}rss_end_mb"] = rss_full, rss_end
        out[f"{prefix}rss_growth_pct"] = 100.0 * (rss_end - rss_full) / rss_full if rss_full else nan
    return out


def soak_details(snaps: list[Any]) -> dict[str, Any]:
    """Per-minute rates and RSS since the start of the soak run (for the JSON)."""
    end = snaps[-1].time
    start = snaps[0].time
    minutes = []
    t = start
    while t + 60 <= end + 1e-9:
        minutes.append(
            {
                "from_s": t,
                "frames_per_s": _rate(snaps, t, t + 60, "frames"),
                "updates_per_s": _rate(snaps, t, t + 60, "updates"),
                "rss_mb": next(
                    (s.gauges.get("learner_rss_mb") for s in snaps if s.time >= t + 60),
                    snaps[-1].gauges.get("learner_rss_mb"),
                ),
            }
        )
        t += 60
    return {"per_minute": minutes}
