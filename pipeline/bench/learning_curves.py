"""Learning curves from a run's frame marks: evaluate them, sum them up, draw them.

A run trained with ``mark_interval_frames`` keeps its online network at fixed frame
counts (``checkpoints/marks/frames-<N>.pt``). Here each mark is evaluated by the protocol
of :mod:`~pipeline.run.evaluator.protocol` (by default 20 episodes at epsilon 0.05, each from a
seed of its own, the same seeds for every mark, run and variant), with the single greedy
episode that ``python main.py play`` shows beside it. Marks are evaluated in parallel
processes, after training, so evaluation never competes with the run it measures, and
the curve is summed up the way the field reports sample efficiency:

- mean and median x_pos, and the flag rate, at every mark;
- frames to the first mark whose mean x_pos reaches a threshold (1,800 for 1-1, past the
  second pit) and to the first mark with a flag rate above 0;
- the area under the mean x_pos curve as a mean x_pos over the frames covered
  (trapezoids), so a variant that learns earlier scores higher at equal final x_pos.

A run on random stages is evaluated on every stage it trains on, each played as its
fixed-stage id with the whole protocol (:mod:`~pipeline.run.evaluator.stage_report`): a mark keeps
each stage's mean x_pos, how far along the stage that is and its flag rate (``stages``),
and its own figures are those of all its stages' episodes together. A run on one stage
has one such row, its own figures.

Evaluations are cached in ``<run>/learning-eval.json``, keyed by the protocol
(:meth:`~pipeline.run.evaluator.protocol.EvaluationProtocol.key`: episodes, epsilon, seeds, step cap),
for random stages also by the stages played, and the mark's file name: a run that goes
on later, or a report drawn again, evaluates only new marks, and another protocol never
reads an entry made by a different one. Entries of a one-stage run written before marks
kept their stages stay valid: its one row is the mark's own figures.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import statistics
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from config import Config
from pipeline.common.child import process_context
from pipeline.common.cores import usable_cores
from pipeline.common.files import atomic_write_text
from pipeline.run.evaluator.protocol import EVAL_SEED_OFFSET, EvaluationProtocol
from pipeline.run.evaluator.stage_report import StageRow, combined_values, play_stages, stages_played

EVAL_CACHE = "learning-eval.json"
X_POS_GOAL = 1800  # past the second pit of 1-1 (the old default's greedy agent died at 1,423)
BENCH_EPISODES = 20
BENCH_EPSILON = 0.05
BENCH_FIRST_SEED = EVAL_SEED_OFFSET  # the same for every run: variants are judged on the same episodes
GREEDY_SEED = 0  # the seed `play` and `eval` start from by default
CACHE_VERSION = "protocol-v2"  # entries of the one-greedy-episode cache had keys without it


@dataclass
class MarkResult:
    """The evaluation of one mark: the protocol's figures, and the greedy episode's."""

    frames: int  # the mark (nominal frames)
    run_frames: int  # frames the run had when the mark was taken
    mean_x_pos: float
    max_x_pos: int
    flag_rate: float
    mean_return: float
    median_x_pos: float = 0.0
    greedy_x_pos: int = 0
    greedy_flag: bool = False
    greedy_return: float = 0.0
    # The values on the protocol's greedy steps (pipeline.run.evaluator.value_check; None in entries
    # evaluated before the bench kept them): the mean Q of the action taken over the mean
    # discounted return that followed, and the median gap between the two best actions.
    q_over_return: float | None = None
    median_action_gap: float | None = None
    # Per stage (pipeline.run.evaluator.stage_report.StageRow dicts), in the order played. With
    # several stages the greedy figures above are over the stages' greedy episodes: the
    # mean x_pos (rounded) and return, and a flag when every stage's episode got one.
    stages: list[dict[str, Any]] | None = None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MarkResult:
        """A result read back from JSON (names that are no longer fields are dropped)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def bench_protocol(
    episodes: int = BENCH_EPISODES, epsilon: float = BENCH_EPSILON, max_steps: int = 2000, sticky: float | None = None
) -> EvaluationProtocol:
    """The benchmark's protocol: ``episodes`` at ``epsilon`` from :data:`BENCH_FIRST_SEED` on
    (with sticky actions ``sticky``; None: without, as every run trains)."""
    return EvaluationProtocol(
        episodes=episodes, epsilon=epsilon, first_seed=BENCH_FIRST_SEED, max_steps=max_steps, sticky=sticky
    )


def cache_key(protocol: EvaluationProtocol, stages: Sequence[str] = ()) -> str:
    """The cache entry of ``protocol``; ``stages``: the stages a random-stages run plays
    (none for a run on one stage, whose entries keep the key they always had)."""
    key = f"{CACHE_VERSION},{protocol.key()},greedy_seed={GREEDY_SEED}"
    return f"{key},stages={'/'.join(stages)}" if stages else key


def run_stages(run: Path) -> tuple[list[tuple[str, str]], bool]:
    """The (stage, env id) pairs that evaluate the marks of ``run`` (from its config.json),
    and whether it trained on random stages (whose cache entries name the stages)."""
    from envs.ids import parse_env_id

    config = Config.from_dict(json.loads((run / "config.json").read_text())["config"])
    return stages_played(config, config.env_id), parse_env_id(config.env_id).kind == "mario_random_stages"


def mark_files(run: Path) -> list[Path]:
    """A run's marks in frame order."""
    return sorted((run / "checkpoints" / "marks").glob("frames-*.pt"))


def evaluate_mark(path: str, protocol: dict[str, Any]) -> dict[str, Any]:
    """Child process (or in-process): the protocol's episodes and the greedy episode of one
    mark, on one torch thread. Same mark and same protocol, same figures. The episodes are
    played by :func:`~pipeline.run.evaluator.value_check.value_check` (the same episodes as
    ``play_protocol``), so the values against the returns come with them at no extra play."""
    from pipeline.learning.episode_loop import EpisodeResult, run_episode, single_thread_torch
    from pipeline.learning.policy import load_policy
    from pipeline.run.evaluator.protocol import protocol_figures
    from pipeline.run.evaluator.value_check import value_check

    policy = load_policy(path)
    chosen = EvaluationProtocol(**protocol)

    def play(env: Any) -> tuple[list[EpisodeResult], dict[str, float], EpisodeResult]:
        episodes, values = value_check(
            env,
            policy.model,
            chosen,
            frame_stack=policy.frame_stack,
            num_actions=policy.num_actions,
            gamma=policy.config.gamma,
            reward_scale=policy.config.reward_scale,
        )
        greedy = run_episode(
            env,
            policy.model,
            frame_stack=policy.frame_stack,
            num_actions=policy.num_actions,
            seed=GREEDY_SEED,
            max_steps=chosen.max_steps,
        )
        return episodes, values, greedy

    with single_thread_torch():
        pairs = stages_played(policy.config, policy.env_id)
        played = play_stages(policy.config, pairs, play, seed=chosen.first_seed, sticky=chosen.sticky_actions)
    figures = protocol_figures([episode for _, (episodes, _, _) in played for episode in episodes])
    stage_values = [figures for _, (_, figures, _) in played]
    values = stage_values[0] if len(stage_values) == 1 else combined_values(stage_values)
    greedies = [greedy for _, (_, _, greedy) in played]
    return asdict(
        MarkResult(
            frames=int(Path(path).stem.split("-")[1]),
            run_frames=policy.frames,
            mean_x_pos=figures["mean_x_pos"],
            median_x_pos=figures["median_x_pos"],
            max_x_pos=figures["max_x_pos"],
            flag_rate=figures["flag_rate"],
            mean_return=figures["mean_return"],
            greedy_x_pos=round(statistics.fmean(greedy.x_pos for greedy in greedies)),
            greedy_flag=all(greedy.flag_get for greedy in greedies),
            greedy_return=statistics.fmean(greedy.ret for greedy in greedies),
            q_over_return=values.get("q_over_return"),
            median_action_gap=values.get("median_action_gap"),
            stages=[StageRow.from_results(stage, episodes).to_dict() for stage, (episodes, _, _) in played],
        )
    )


def mark_workers(marks: int) -> int:
    """Processes that evaluate ``marks`` marks at once: one per mark, at most one per core
    this process may run on (a mark is one-threaded play)."""
    return max(1, min(marks, usable_cores()))


def evaluate_marks(run: Path, protocol: EvaluationProtocol, *, workers: int | None = None) -> list[MarkResult]:
    """Every mark of ``run`` evaluated by ``protocol`` (cached ones read back), in frame order."""
    cache_path = run / EVAL_CACHE
    cache: dict[str, Any] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    stages, random = run_stages(run)
    key = cache_key(protocol, [stage for stage, _ in stages] if random else ())
    done: dict[str, dict[str, Any]] = cache.setdefault(key, {})
    todo = [path for path in mark_files(run) if path.name not in done]
    if todo:
        workers = workers or mark_workers(len(todo))
        children_before = set(multiprocessing.active_children())
        # Children of the fork server: they do not inherit this process's torch threads.
        with ProcessPoolExecutor(max_workers=workers, mp_context=process_context()) as pool:
            try:
                futures = {pool.submit(evaluate_mark, str(p), protocol.to_dict()): p.name for p in todo}
                # Each mark is kept as it finishes (a mark of 1-1 takes minutes): a Ctrl-C
                # or a mark that fails loses only the marks still being played.
                for future in as_completed(futures):
                    done[futures[future]] = future.result()
                    atomic_write_text(cache_path, json.dumps(cache, indent=1) + "\n")
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)  # the marks not started yet
                # And the marks being played: leaving the block waits for its workers, which
                # play on for minutes when the interrupt reached this process alone (a SIGTERM,
                # a `kill -INT`); a terminal's Ctrl-C has stopped them already. They hold
                # nothing but their own episodes. The pool's workers are this process's only
                # children started since it began.
                for worker in set(multiprocessing.active_children()) - children_before:
                    worker.terminate()
                raise
    curve = sorted((MarkResult.from_dict(value) for value in done.values()), key=lambda r: r.frames)
    for result in curve:
        if result.stages is None and len(stages) == 1:  # an entry from before marks kept their stages
            row = StageRow.of(stages[0][0], protocol.episodes, result.mean_x_pos, result.flag_rate)
            result.stages = [row.to_dict()]
    return curve


def stage_rows(curve: Sequence[MarkResult]) -> list[tuple[str, StageRow]]:
    """The per-stage table's rows of a curve: (mark, stage row) for every stage of every mark."""
    return [(f"{r.frames / 1e6:g}M", StageRow.from_dict(row)) for r in curve for row in r.stages or ()]


def first_frames(curve: Sequence[MarkResult], *, x_pos: float | None = None, flag: bool = False) -> int | None:
    """Frames of the first mark whose mean x_pos reaches ``x_pos`` (or whose flag rate is above 0)."""
    for result in curve:
        if (flag and result.flag_rate > 0) or (x_pos is not None and result.mean_x_pos >= x_pos):
            return result.frames
    return None


def area_under_curve(curve: Sequence[MarkResult], until: int | None = None) -> float | None:
    """Mean x_pos over the frames covered (trapezoids from the first mark to the last, or
    to the last mark at or before ``until`` frames)."""
    if until is not None:
        curve = [r for r in curve if r.frames <= until]
    if len(curve) < 2:
        return None
    area = sum(
        (b.frames - a.frames) * (a.mean_x_pos + b.mean_x_pos) / 2 for a, b in zip(curve[:-1], curve[1:], strict=True)
    )
    return area / (curve[-1].frames - curve[0].frames)


def figure_at(curve: Sequence[MarkResult], frames: int, name: str = "mean_x_pos") -> float | None:
    """Field ``name`` of the mark at exactly ``frames`` (None when the run has no such mark)."""
    return next((float(getattr(r, name)) for r in curve if r.frames == frames), None)


def x_pos_at(curve: Sequence[MarkResult], frames: int) -> float | None:
    """Mean x_pos of the mark at exactly ``frames`` (None when the run has no such mark)."""
    return figure_at(curve, frames)


def plot_curves(variants: dict[str, list[list[MarkResult]]], path: Path, title: str) -> Path:
    """One axis of the protocol's mean x_pos by frames (one colour per variant, its seeds
    overlaid) and one of its flag rate, written as a PNG. Drawn once, after the runs."""
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
    x_axis.set_ylabel("mean evaluation x_pos")
    x_axis.set_title(title)
    if variants:
        x_axis.legend(loc="upper left")
    flag_axis.set_ylabel("flag rate")
    flag_axis.set_xlabel("emulator frames (millions)")
    flag_axis.set_ylim(-0.05, 1.05)
    FigureCanvasAgg(figure).print_png(str(path))
    return path
