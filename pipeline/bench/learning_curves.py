"""Learning curves from a run's frame marks: evaluate them, sum them up, draw them.

A run trained with ``mark_interval_frames`` keeps its online network at fixed frame
counts (``checkpoints/marks/frames-<N>.pt``). Here each mark is played greedily (in
parallel processes, after training, so evaluation never competes with the run it
measures), and the curve is summed up the way the field reports sample efficiency:

- evaluation x_pos and flag rate at every mark;
- frames to the first mark whose mean x_pos reaches a threshold (1,800 for 1-1, past the
  second pit) and to the first mark that reaches the flag;
- the area under the x_pos curve as a mean x_pos over the frames covered (trapezoids), so
  a variant that learns earlier scores higher at equal final x_pos.

Evaluations are cached in ``<run>/learning-eval.json`` (keyed by mark file and episode
count): a run that goes on later, or a report drawn again, evaluates only new marks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pipeline.common.files import atomic_write_text

EVAL_CACHE = "learning-eval.json"
X_POS_GOAL = 1800  # past the second pit of 1-1 (the old default's greedy agent died at 1,423)


@dataclass
class MarkResult:
    """The greedy evaluation of one mark."""

    frames: int  # the mark (nominal frames)
    run_frames: int  # frames the run had when the mark was taken
    mean_x_pos: float
    max_x_pos: int
    flag_rate: float
    mean_return: float


def mark_files(run: Path) -> list[Path]:
    """A run's marks in frame order."""
    return sorted((run / "checkpoints" / "marks").glob("frames-*.pt"))


def _evaluate_mark(path: str, episodes: int, max_steps: int, epsilon: float) -> dict[str, Any]:
    """Child process: play ``episodes`` episodes of one mark (one torch thread), greedy or
    with ``epsilon`` random actions (seeded per episode, so a cached result is reproducible)."""
    import numpy as np

    from pipeline.learning.policy import build_env, load_policy, run_episode, single_thread_torch, summarise

    policy = load_policy(path)
    env = build_env(policy.config, policy.env_id, seed=0)
    try:
        with single_thread_torch():
            results = [
                run_episode(
                    env,
                    policy.model,
                    frame_stack=policy.frame_stack,
                    num_actions=policy.num_actions,
                    seed=episode,
                    max_steps=max_steps,
                    epsilon=epsilon,
                    rng=np.random.default_rng(episode),
                )
                for episode in range(episodes)
            ]
    finally:
        env.close()
    summary = summarise(results)
    return asdict(
        MarkResult(
            frames=int(Path(path).stem.split("-")[1]),
            run_frames=policy.frames,
            mean_x_pos=summary["mean_x_pos"],
            max_x_pos=summary["max_x_pos"],
            flag_rate=summary["flag_rate"],
            mean_return=summary["mean_return"],
        )
    )


def evaluate_marks(
    run: Path, *, episodes: int, max_steps: int, epsilon: float = 0.0, workers: int | None = None
) -> list[MarkResult]:
    """Every mark of ``run`` evaluated (cached ones read back), in frame order."""
    cache_path = run / EVAL_CACHE
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    key = f"episodes={episodes},max_steps={max_steps}" + (f",epsilon={epsilon:g}" if epsilon else "")
    done: dict[str, dict[str, Any]] = cache.get(key, {})
    todo = [path for path in mark_files(run) if path.name not in done]
    if todo:
        workers = workers or max(1, min(len(todo), len(os.sched_getaffinity(0))))
        # spawn: the evaluating children must not inherit this process's torch threads.
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = {p.name: pool.submit(_evaluate_mark, str(p), episodes, max_steps, epsilon) for p in todo}
            for name, future in futures.items():
                done[name] = future.result()
        cache[key] = done
        atomic_write_text(cache_path, json.dumps(cache, indent=1) + "\n")
    return sorted((MarkResult(**value) for value in done.values()), key=lambda r: r.frames)


def first_frames(curve: Sequence[MarkResult], *, x_pos: float | None = None, flag: bool = False) -> int | None:
    """Frames of the first mark whose mean x_pos reaches ``x_pos`` (or that reaches the flag)."""
    for result in curve:
        if (flag and result.flag_rate > 0) or (x_pos is not None and result.mean_x_pos >= x_pos):
            return result.frames
    return None


def area_under_curve(curve: Sequence[MarkResult]) -> float | None:
    """Mean x_pos over the frames covered (trapezoids from the first mark to the last)."""
    if len(curve) < 2:
        return None
    area = sum(
        (b.frames - a.frames) * (a.mean_x_pos + b.mean_x_pos) / 2 for a, b in zip(curve[:-1], curve[1:], strict=True)
    )
    return area / (curve[-1].frames - curve[0].frames)


def x_pos_at(curve: Sequence[MarkResult], frames: int) -> float | None:
    """Mean x_pos of the mark at exactly ``frames`` (None when the run has no such mark)."""
    return next((r.mean_x_pos for r in curve if r.frames == frames), None)


def plot_curves(variants: dict[str, list[list[MarkResult]]], path: Path, title: str) -> Path:
    """One axis of mean x_pos by frames (one colour per variant, its seeds overlaid) and one
    of flag rate, written as a PNG. Drawn once, after the runs."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 6.5), layout="constrained")
    x_axis, flag_axis = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    colours = [f"C{i}" for i in range(10)]
    for (name, seeds), colour in zip(variants.items(), colours * 10):
        for index, curve in enumerate(seeds):
            frames = [r.frames / 1e6 for r in curve]
            label = name if index == 0 else None
            x_axis.plot(frames, [r.mean_x_pos for r in curve], color=colour, alpha=0.85, label=label, marker=".")
            flag_axis.plot(frames, [r.flag_rate for r in curve], color=colour, alpha=0.85, marker=".")
    x_axis.axhline(X_POS_GOAL, color="grey", linestyle="--", linewidth=1)
    x_axis.set_ylabel("greedy evaluation x_pos")
    x_axis.set_title(title)
    x_axis.legend(loc="upper left")
    flag_axis.set_ylabel("flag rate")
    flag_axis.set_xlabel("emulator frames (millions)")
    flag_axis.set_ylim(-0.05, 1.05)
    FigureCanvasAgg(figure).print_png(str(path))
    return path
