"""The suite's training parts: learner, training, startup, evaluator and soak.

What training costs and how it holds up: ``Learner.update`` alone per compile/AMP
variant (``learner``, timed by :mod:`~pipeline.learning.learner_speed`); the whole system
training (``training``; ``startup`` reads the same run's start-up times); the
in-training evaluator's cost, a run with it between two runs without (``evaluator``;
with --quick, beside the training part's run); and a long run once the replay is full
(``soak``, figures by :mod:`~pipeline.bench.soak`).
"""

from __future__ import annotations

import math
import os
from typing import Any

from pipeline.bench.figures import FIGURES, PHASE_MEANING
from pipeline.bench.soak import soak_details, soak_figures
from pipeline.bench.suite_base import PartResult, SuiteBase, log
from pipeline.bench.trainer_run import TRAINER_START_ALLOWANCE_S, run_trainer, window_figures
from pipeline.common.child import ChildError
from pipeline.common.cores import usable_cores
from pipeline.common.gauges import (
    EVAL_CPU_S_TOTAL,
    EVAL_WALL_S_TOTAL,
    EVALUATIONS,
    EVALUATOR_CPU_PCT,
    EVALUATOR_EVAL_CPU_S,
    EVALUATOR_EVAL_WALL_S,
    EVALUATOR_STEPS,
)
from pipeline.learning.learner_choice import choose_learner
from pipeline.learning.learner_speed import CHANGED, LEARNER_VARIANTS, learner_spec, time_floor, time_learners
from pipeline.run.monitor.keys import LEARNER_PHASES

EVALUATOR_BACK_TO_BACK_FRAMES = 1  # eval_interval_frames of the evaluator part's middle run
# The niced evaluator gets a few % of a core on a busy 2-core box: a longer window counts
# more of its steps (it need not finish an evaluation in it; see evaluation_cost).
EVALUATOR_MIN_WINDOW_S = 45.0
SOAK_REPLAY_CAPACITY = 3_000  # fills within about a minute on a loaded 2-core CPU box


def evaluation_cost(window: dict[str, float], cfg: Any) -> dict[str, float]:
    """What one evaluation costs, from the with-evaluator run's window (:func:`window_figures`).

    Measured from the evaluator's steps as they went (:mod:`~pipeline.run.evaluator.progress`),
    not from finished evaluations only: niced beside two collectors and the learner on 2
    cores it gets a few percent of a core, and one evaluation of the default protocol (up
    to 11 episodes of 2,000 steps) takes it many minutes, far past a part of seconds.
    ``*_at_most`` are an evaluation of the protocol's most steps at the window's step rate
    and CPU per step; ``wall_s_per_evaluation`` and ``cpu_s_per_evaluation`` are the
    means over the evaluations the run finished (NaN when none did).
    """
    nan = float("nan")
    # In the window; with none in it (a starved evaluator), the run's so far.
    span = "window" if window[f"{EVALUATOR_STEPS}_window"] > 0 else "run"
    steps, wall, cpu = (
        window[f"{key}_{span}"] for key in (EVALUATOR_STEPS, EVALUATOR_EVAL_WALL_S, EVALUATOR_EVAL_CPU_S)
    )
    steps_per_s = steps / wall if wall > 0 else nan
    cpu_per_step = cpu / steps if steps > 0 else nan
    max_steps = (cfg.eval_episodes + (1 if cfg.eval_epsilon > 0 else 0)) * cfg.eval_max_steps
    done = window[f"{EVALUATIONS}_run"]
    return {
        "eval_steps_per_s": steps_per_s,
        "cpu_ms_per_eval_step": 1000.0 * cpu_per_step,
        "max_steps_per_evaluation": float(max_steps),
        "wall_s_per_evaluation_at_most": max_steps / steps_per_s if steps_per_s > 0 else nan,
        "cpu_s_per_evaluation_at_most": max_steps * cpu_per_step,
        "wall_s_per_evaluation": window[EVAL_WALL_S_TOTAL] / done if done else nan,
        "cpu_s_per_evaluation": window[EVAL_CPU_S_TOTAL] / done if done else nan,
    }


class TrainingParts(SuiteBase):
    """The ``learner``, ``training``, ``startup``, ``evaluator`` and ``soak`` parts."""

    def part_learner(self, result: PartResult) -> None:
        from pipeline.learning.learner_device import resolve_device

        cfg = self.cfg
        device = resolve_device(cfg.device)  # a UserError without CUDA
        # What compile/amp resolve to on this machine (measured once and cached, as a run does).
        in_use = choose_learner(cfg, str(device)).variant
        # --quick times only eager and the variant in use, in 2 rounds instead of 4.
        variants = list(dict.fromkeys(["eager", in_use])) if self.options.quick else list(LEARNER_VARIANTS)
        replay_device = device if cfg.replay_device == "auto" else resolve_device(cfg.replay_device)
        spec = learner_spec(
            cfg,
            device,
            variants=variants,
            rounds=2 if self.options.quick else 4,
            seconds_per_variant=max(2.0, self.seconds / 2),
            replay_device=replay_device,
            changed=None if self.options.changed_config is None else (in_use, self.options.changed_config),
        )
        try:
            out = time_learners(spec)
        except ChildError as exc:
            result.details["traceback"] = exc.traceback
            raise RuntimeError("learner benchmark failed: " + exc.last_line) from None
        result.figures.update({"threads": float(spec["threads"]), "batch_size": float(cfg.batch_size)})
        result.figures.update({k: v for k, v in out.items() if k in FIGURES["learner"]})
        result.figures["configured_speedup"] = out[f"{in_use}_updates_per_s"] / out["eager_updates_per_s"]
        if f"{in_use}_efficiency" in out:
            result.figures["efficiency"] = out[f"{in_use}_efficiency"]
        if self.options.changed_config is not None:
            result.figures["changed_ratio"] = out[f"{CHANGED}_updates_per_s"] / out[f"{in_use}_updates_per_s"]
            result.details["changed_settings"] = list(self.options.learner_set)
        result.details.update(
            {
                "in_use": in_use,
                "device": str(device),
                "variants": spec["variants"],
                "rounds": spec["rounds"],
                "seconds_per_variant": spec["seconds_per_variant"],
                **{k: v for k, v in out.items() if k not in FIGURES["learner"]},
            }
        )

    def _learning_starts(self, capacity: int) -> int:
        wanted = 500 if self.options.quick else 2_000
        return max(self.cfg.batch_size * 4, min(wanted, self.cfg.learning_starts, capacity // 2))

    def _training_window(
        self, name: str, eval_interval_frames: int = 0, window_s: float | None = None
    ) -> dict[str, Any]:
        """One whole-system training run, measured for ``window_s`` (default ``--seconds``)
        from 2 s after the first update (with an evaluator: and its first evaluation).

        No evaluator unless ``eval_interval_frames > 0`` (the evaluator part compares both).
        """
        window_s = self.seconds if window_s is None else window_s
        capacity = self.cfg.replay_capacity
        cfg = self.part_config(
            name,
            learning_starts=self._learning_starts(capacity),
            monitor_interval_s=1.0,
            eval_interval_frames=eval_interval_frames,
        )
        ready = "evaluating" if eval_interval_frames > 0 else "training"
        run = run_trainer(
            cfg,
            name,
            sources=self.resolved.sources,
            train=True,
            throttle=True,
            window_s=window_s,
            warmup_s=2.0,
            ready=ready,
            time_limit_s=TRAINER_START_ALLOWANCE_S + window_s + 30,
        )
        summary = run.summary
        return {
            "window": window_figures(run.snaps, run.window[0], run.window[-1]),
            "startup": summary.get("startup_s", run.startup),
            "learning_starts": cfg.learning_starts,
            "replay_ratio": cfg.replay_ratio,
            "batch_size": cfg.batch_size,
            "compiled": summary.get("compiled"),
            "amp_dtype": summary.get("amp_dtype"),
            "collectors": cfg.num_processes,
        }

    def _train_run(self) -> dict[str, Any]:
        """The training part's run (shared with the startup and evaluator parts)."""
        if self._training is None:
            self._training = self._training_window("training")
        return self._training

    def part_training(self, result: PartResult) -> None:
        run = self._train_run()
        w = run["window"]
        f = result.figures
        for key in (
            "frames_per_s",
            "steps_per_s",
            "updates_per_s",
            "samples_per_s",
            "replay_ratio",
            "collectors_cpu_pct",
            "learner_cpu_pct",
        ):
            f[key] = w[key]
        f["replay_ratio_target"] = run["replay_ratio"]
        f["replay_ratio_held"] = w["replay_ratio"] / run["replay_ratio"]
        f["max_poll_gap_ms"] = w["max_poll_gap_ms"]
        # CPU % counts 100 per core; the machine's share divides by its cores.
        f["machine_cpu_pct"] = (w["collectors_cpu_pct"] + w["learner_cpu_pct"]) / (os.cpu_count() or 1)
        for name in LEARNER_PHASES:
            f[f"learner_{name}_pct"] = w[f"learner_{name}_pct"]
        for name in PHASE_MEANING:
            f[f"{name}_pct"] = w[f"{name}_pct"]
        f.update(self._floor(run))
        result.details.update(
            {k: run[k] for k in ("learning_starts", "batch_size", "compiled", "amp_dtype", "collectors")}
        )
        result.details["window_s"] = w["window_s"]

    def _floor(self, run: dict[str, Any]) -> dict[str, float]:
        """The machine's floor for the training run and the run's share of it (a CPU learner).

        The floor is the frames/s of every core kept busy with only the work a frame cannot
        do without: the collectors' CPU per frame as the run measured it (emulation,
        preprocessing, acting), and the learner's FLOPs per frame (one update's, counted,
        times the run's updates per frame) at one core's GEMM peak in the run's precision,
        both measured here: ``cores / (collector s + learner s)`` per frame.
        """
        from pipeline.learning.learner_device import resolve_device

        w = run["window"]
        device = resolve_device(self.cfg.device)
        if device.type != "cpu" or w["frames_per_s"] <= 0 or w["collectors_cpu_pct"] <= 0:
            return {}
        spec = learner_spec(self.cfg, device, variants=[], rounds=1, seconds_per_variant=0.0)
        # The summary names the AMP dtype ("torch.bfloat16"), or "None" for an fp32 learner.
        amp_dtype = str(run["amp_dtype"])
        core = time_floor(spec, amp_dtype if amp_dtype.startswith("torch.") else "torch.float32")
        collector_s = w["collectors_cpu_pct"] / 100.0 / w["frames_per_s"]
        updates_per_frame = w["updates_per_s"] / w["frames_per_s"]
        learner_s = core["update_gflop"] * updates_per_frame / core["core_peak_gflop_per_s"]
        floor = usable_cores() / (collector_s + learner_s)
        return {
            "collector_cpu_ms_per_frame": 1000.0 * collector_s,
            "core_peak_gflop_per_s": core["core_peak_gflop_per_s"],
            "learner_ms_per_frame_at_peak": 1000.0 * learner_s,
            "floor_frames_per_s": floor,
            "floor_share": w["frames_per_s"] / floor,
        }

    def part_startup(self, result: PartResult) -> None:
        run = self._train_run()
        startup = run["startup"]
        f = result.figures
        f["compile_s"] = float(startup.get("compile+warm-up", float("nan")))
        f["first_transition_s"] = float(startup.get("first transition", float("nan")))
        f["first_update_s"] = float(startup.get("first update", float("nan")))
        f["learning_starts"] = float(run["learning_starts"])

    def part_evaluator(self, result: PartResult) -> None:
        seconds = self.seconds if self.options.quick else max(self.seconds, EVALUATOR_MIN_WINDOW_S)
        f = result.figures
        # --quick compares with the training part's run (no evaluator, the same window)
        # instead of bracketing the evaluator's run with two runs of its own: a smoke run
        # that takes one training run's start-up instead of three.
        quick = self.options.quick
        before = (
            self._train_run()["window"] if quick else self._training_window("no-evaluator", window_s=seconds)["window"]
        )
        f["frames_per_s_without"] = before["frames_per_s"]  # the mean of both once the third run is in
        with_evaluator = self._training_window(
            "evaluator", eval_interval_frames=EVALUATOR_BACK_TO_BACK_FRAMES, window_s=seconds
        )["window"]
        after = before if quick else self._training_window("no-evaluator-again", window_s=seconds)["window"]
        f["frames_per_s_without"] = (before["frames_per_s"] + after["frames_per_s"]) / 2
        f["frames_per_s_with"] = with_evaluator["frames_per_s"]
        f["frames_ratio"] = f["frames_per_s_with"] / f["frames_per_s_without"]
        f["updates_ratio"] = with_evaluator["updates_per_s"] / ((before["updates_per_s"] + after["updates_per_s"]) / 2)
        f["evaluations"] = with_evaluator[EVALUATIONS]
        f["evaluator_cpu_pct"] = with_evaluator[EVALUATOR_CPU_PCT]
        f.update(evaluation_cost(with_evaluator, self.cfg))
        # At the configured interval the evaluator is busy for one evaluation's wall time
        # per interval and idle (asleep) otherwise, so it costs that fraction of the
        # back-to-back slowdown. The interval is in frames: in seconds it is that many
        # frames at this machine's speed without the evaluator.
        f["eval_interval_frames"] = float(self.cfg.eval_interval_frames)
        interval = self.cfg.eval_interval_frames / f["frames_per_s_without"] if f["frames_per_s_without"] else 0.0
        f["eval_interval_s"] = interval
        done = with_evaluator[f"{EVALUATIONS}_run"]
        # Finished evaluations' own figures where there are some; else the most one can cost.
        wall = f["wall_s_per_evaluation"] if done else f["wall_s_per_evaluation_at_most"]
        cpu = f["cpu_s_per_evaluation"] if done else f["cpu_s_per_evaluation_at_most"]
        if interval > 0 and not math.isnan(wall):
            f["busy_share_at_interval"] = min(1.0, wall / interval)
            f["frames_ratio_at_interval"] = 1.0 - (1.0 - f["frames_ratio"]) * f["busy_share_at_interval"]
            f["machine_pct_at_interval"] = 100.0 * cpu / interval / (os.cpu_count() or 1)
        result.details.update(
            {
                "frames_per_s": {
                    "before": before["frames_per_s"],
                    "with": with_evaluator["frames_per_s"],
                    "after": after["frames_per_s"],
                },
                "updates_per_s": {
                    "before": before["updates_per_s"],
                    "with": with_evaluator["updates_per_s"],
                    "after": after["updates_per_s"],
                },
                "eval_episodes": self.cfg.eval_episodes,
                "eval_max_steps": self.cfg.eval_max_steps,
                "window_s": with_evaluator["window_s"],
                "evaluations_in_run": done,
                "at_interval_from": "finished evaluations" if done else "at most: max steps at the measured step rate",
            }
        )

    def part_soak(self, result: PartResult) -> None:
        minutes = self.options.soak_minutes
        n = self.cfg.num_processes
        capacity = max(64 * n, self.cfg.batch_size, min(self.cfg.replay_capacity, SOAK_REPLAY_CAPACITY))
        capacity -= capacity % n  # so "full" is exactly capacity
        cfg = self.part_config(
            "soak",
            replay_capacity=capacity,
            learning_starts=max(self.cfg.batch_size * 4, min(1_000, capacity // 4)),
            monitor_interval_s=min(5.0, self.cfg.monitor_interval_s),
            checkpoint_interval_s=self.cfg.checkpoint_interval_s,  # as in a real run
            # No evaluator: its evaluations every few minutes would make the
            # minutes unequal (the first ones come before its first evaluation);
            # what it costs is the evaluator part's figure.
            eval_interval_frames=0,
        )
        run = run_trainer(
            cfg,
            "soak",
            sources=self.resolved.sources,
            train=True,
            throttle=True,
            window_s=float("inf"),
            warmup_s=0.0,
            ready="training",
            time_limit_s=minutes * 60.0,
        )
        result.figures.update(soak_figures(run.snaps, capacity, minutes))
        result.details.update(soak_details(run.snaps))
        if math.isnan(result.figures.get("frames_ratio", math.nan)):
            result.details["note"] = (
                "the minute ratios need two full minutes after the replay is full; use a longer --soak"
            )
            log(f"soak: {result.details['note']}")
        result.details["learning_starts"] = cfg.learning_starts
