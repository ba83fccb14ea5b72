"""What each part reports: every figure's label, format, meaning and target.

:data:`FIGURES` maps part -> figure key -> :class:`FigureSpec`; the report prints the
figures in the order each part filled them and looks their specs up here.
:func:`target_met` judges a value against its spec's target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.run.monitor.keys import LEARNER_PHASES
from pipeline.transport.records import RECORD_BYTES

TARGET_EFFICIENCY = 0.90
TARGET_RECORDS_PER_S = 50_000.0
TARGET_CONFIGURED_SPEEDUP = 1.0  # the learner in use is at least as fast as eager fp32
# The update's GEMM-bound arithmetic at 60 % of what the same threads do on a large product.
TARGET_LEARNER_EFFICIENCY = 0.6
# A run at 60 % of the machine's floor (the emulator's and the learner's arithmetic's cost at
# their measured speeds, spread over every core).
TARGET_FLOOR_SHARE = 0.6
TARGET_SOAK_RATIO = 0.95
TARGET_RATIO_TOLERANCE = 0.05
TARGET_RSS_GROWTH_PCT = 5.0
# At the configured interval the evaluator costs collection under 2 %: below the 2-6 %
# by which two identical training runs of this bench differ on a 2-core box.
TARGET_EVALUATOR_RATIO = 0.98
TARGET_RAY_EFFICIENCY = 0.90  # the Ray backend keeps 90 % of the local frames/s with the same collectors
TARGET_PULL_PATH_RATIO = 20.0  # one pull path carries 20x what one node's collectors produce


@dataclass(frozen=True)
class FigureSpec:
    """How one figure is printed: table label, format, meaning, and target if it has one."""

    label: str
    fmt: str
    meaning: str
    target: tuple[str, float] | None = None  # (">=" or "<=", threshold)


def _spec(label: str, fmt: str, meaning: str, target: tuple[str, float] | None = None) -> FigureSpec:
    return FigureSpec(label, fmt, meaning, target)


# One entry per phase of pipeline.transport.ring.COLLECTOR_PHASES, plus "other" (the rest of
# the wall time); a test checks that they still match.
PHASE_MEANING = {
    "emulate": "% of wall time in the emulator (env.step minus preprocessing)",
    "preprocess": "% of wall time in grayscale + resize",
    "infer": "% of wall time evaluating the Q-network (CPU, 1 thread)",
    "write": "% of wall time writing records into the ring",
    "stall": "% of wall time waiting for a full ring",
    "other": "% of wall time in none of the above (loop, counters, resets)",
}

FIGURES: dict[str, dict[str, FigureSpec]] = {
    "raw": {
        "raw_frames_per_s": _spec(
            "bare emulator frames/s", "{:,.0f}", "1 process, MarioEnv, 1 NES frame per step, random actions"
        ),
        "wrapped_frames_per_s": _spec(
            "wrapped env frames/s", "{:,.0f}", "1 process, make_env stack (frame skip, grayscale, resize, limits)"
        ),
        "wrapped_steps_per_s": _spec(
            "wrapped env agent steps/s", "{:,.1f}", "agent steps (1 step = frame_skip frames)"
        ),
        "wrapper_efficiency": _spec("wrapped / bare frames", "{:.3f}", "emulator speed left after the wrappers"),
    },
    "collector": {
        "collector_frames_per_s": _spec(
            "collector frames/s", "{:,.0f}", "1 real collector, epsilon 0 (network on every step), ring + consolidator"
        ),
        "collector_steps_per_s": _spec("collector agent steps/s", "{:,.1f}", "agent steps of that collector"),
        "wrapped_before_frames_per_s": _spec(
            "wrapped env frames/s, before", "{:,.0f}", "1 wrapped-env process just before"
        ),
        "wrapped_after_frames_per_s": _spec(
            "wrapped env frames/s, after", "{:,.0f}", "1 wrapped-env process just after"
        ),
        "collector_efficiency": _spec(
            "collector efficiency", "{:.3f}", "collector / mean(wrapped before, after)", (">=", TARGET_EFFICIENCY)
        ),
        "env_share": _spec("collector env share", "{:.3f}", "(emulate + preprocess) / wall time of the collector"),
        **{f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning) for name, meaning in PHASE_MEANING.items()},
        "infer_ms_per_step": _spec("inference ms/step", "{:.2f}", "Q-network forward per agent step"),
        "collector_cpu_pct": _spec("collector CPU %", "{:.0f}", "of one core"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "consolidator process, of one core"),
    },
    "pipeline": {
        "collectors": _spec("collectors", "{:.0f}", "NUM_PROCESSES"),
        "epsilon": _spec("epsilon", "{:.2f}", "fixed exploration (network runs on 1 - epsilon of steps)"),
        "pipeline_frames_per_s": _spec("pipeline frames/s", "{:,.0f}", "all collectors, learner draining"),
        "pipeline_steps_per_s": _spec("pipeline agent steps/s", "{:,.1f}", "all collectors"),
        "wrapped_before_frames_per_s": _spec(
            "wrapped env frames/s, before", "{:,.0f}", "NUM_PROCESSES wrapped-env processes at once, just before"
        ),
        "wrapped_after_frames_per_s": _spec("wrapped env frames/s, after", "{:,.0f}", "the same, just after"),
        "pipeline_efficiency": _spec(
            "pipeline efficiency", "{:.3f}", "pipeline / mean(wrapped before, after)", (">=", TARGET_EFFICIENCY)
        ),
        "env_share": _spec("collector env share", "{:.3f}", "(emulate + preprocess) / wall, mean per collector"),
        **{
            f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning + ", mean per collector")
            for name, meaning in PHASE_MEANING.items()
        },
        "collectors_cpu_pct": _spec("collectors CPU %", "{:.0f}", "sum over collectors (100 = one core)"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "consolidator process"),
    },
    "consolidator": {
        "records_per_s": _spec(
            "records/s", "{:,.0f}", "drained into replay from flooding producers", (">=", TARGET_RECORDS_PER_S)
        ),
        "mb_per_s": _spec("MB/s", "{:,.0f}", "record bytes per second"),
        "producers": _spec("producers", "{:.0f}", "flooding producer processes"),
        "stall_pct": _spec("producer stall %", "{:.1f}", "producers waiting on a full ring"),
    },
    "learner": {
        "threads": _spec("torch threads", "{:.0f}", "the learner's intra-op threads in training"),
        "batch_size": _spec("batch size", "{:.0f}", "samples per update"),
        **{
            f"{v}_updates_per_s": _spec(
                f"{v.replace('_', '+')} updates/s", "{:,.1f}", "Learner.update only, after warm-up"
            )
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        **{
            f"{v}_samples_per_s": _spec(f"{v.replace('_', '+')} samples/s", "{:,.0f}", "updates/s x batch size")
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        **{
            f"{v}_warmup_s": _spec(f"{v.replace('_', '+')} warm-up s", "{:.1f}", "compile (if any) + 3 warm-up updates")
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        "update_gflop": _spec("GFLOP per update", "{:.2f}", "counted (convolutions and matrix products)"),
        "fp32_peak_gflop_per_s": _spec("fp32 GEMM peak GFLOP/s", "{:,.0f}", "1024x1024 product, same threads"),
        "bf16_peak_gflop_per_s": _spec("bf16 GEMM peak GFLOP/s", "{:,.0f}", "1024x1024 product, same threads"),
        "fp16_peak_gflop_per_s": _spec("fp16 GEMM peak GFLOP/s", "{:,.0f}", "1024x1024 product, same threads"),
        **{
            f"{v}_efficiency": _spec(
                f"{v.replace('_', '+')} efficiency", "{:.2f}", "updates/s x GFLOP / the GEMM peak of its precision"
            )
            for v in ("eager", "eager_amp", "compiled", "compiled_amp")
        },
        "efficiency": _spec(
            "efficiency in use",
            "{:.2f}",
            "the variant in use: its GFLOP/s over its precision's GEMM peak",
            (">=", TARGET_LEARNER_EFFICIENCY),
        ),
        "compiled_speedup": _spec("compiled / eager", "{:.2f}", "updates/s ratio, fp32"),
        "amp_speedup": _spec("eager+AMP / eager", "{:.2f}", "updates/s ratio, no compile"),
        "compiled_amp_speedup": _spec("compiled+AMP / eager", "{:.2f}", "updates/s ratio"),
        "changed_updates_per_s": _spec(
            "changed updates/s", "{:,.1f}", "the variant in use with --learner-set (details: changed_settings)"
        ),
        "changed_ratio": _spec("changed / configured", "{:.2f}", "updates/s ratio, timed in the same rounds"),
        "configured_speedup": _spec(
            "configured / eager",
            "{:.2f}",
            "updates/s of the variant compile/amp resolve to on this machine (details: in_use) / eager fp32",
            (">=", TARGET_CONFIGURED_SPEEDUP),
        ),
    },
    "training": {
        "frames_per_s": _spec("frames/s", "{:,.0f}", "emulator frames collected while training"),
        "steps_per_s": _spec("agent steps/s", "{:,.1f}", "agent steps collected while training"),
        "updates_per_s": _spec("updates/s", "{:,.1f}", "learner updates"),
        "samples_per_s": _spec("samples/s", "{:,.0f}", "updates/s x batch size"),
        "replay_ratio": _spec("replay ratio", "{:.2f}", "samples drawn / transitions inserted in the window"),
        "replay_ratio_target": _spec("configured replay ratio", "{:.2f}", "REPLAY_RATIO the limiter holds"),
        "replay_ratio_held": _spec(
            "replay ratio / configured", "{:.3f}", "held within 5 % on any machine", ("within", TARGET_RATIO_TOLERANCE)
        ),
        "max_poll_gap_ms": _spec("longest poll gap ms", "{:,.0f}", "longest the event loop went without draining"),
        "collectors_cpu_pct": _spec("collectors CPU %", "{:.0f}", "sum over collectors (100 = one core)"),
        "learner_cpu_pct": _spec("learner CPU %", "{:.0f}", "learner process (all its threads)"),
        "machine_cpu_pct": _spec("machine CPU %", "{:.0f}", "collectors + learner, of all cores (100 = every core)"),
        **{
            f"learner_{name}_pct": _spec(f"learner {name} %", "{:.1f}", f"% of learner wall time in {name}")
            for name in LEARNER_PHASES
        },
        **{
            f"{name}_pct": _spec(f"collector {name} %", "{:.1f}", meaning + ", mean per collector")
            for name, meaning in PHASE_MEANING.items()
        },
        "collector_cpu_ms_per_frame": _spec(
            "collector CPU ms/frame", "{:.2f}", "collectors' CPU per frame in the run (emulate, preprocess, act)"
        ),
        "core_peak_gflop_per_s": _spec("core GEMM peak GFLOP/s", "{:,.0f}", "one thread, the run's precision"),
        "learner_ms_per_frame_at_peak": _spec(
            "learner ms/frame at peak", "{:.2f}", "counted update FLOPs x updates per frame / the core's peak"
        ),
        "floor_frames_per_s": _spec(
            "floor frames/s", "{:,.0f}", "every core busy with only those two: cores / (collector + learner) per frame"
        ),
        "floor_share": _spec(
            "frames/s / floor", "{:.2f}", "the run's frames/s as a share of the floor", (">=", TARGET_FLOOR_SHARE)
        ),
    },
    "startup": {
        "compile_s": _spec("compile + warm-up s", "{:.1f}", "before the collectors start"),
        "first_transition_s": _spec("first transition s", "{:.1f}", "collectors started -> first record in replay"),
        "first_update_s": _spec(
            "first update s", "{:.1f}", "collectors started -> first update (learning_starts below)"
        ),
        "learning_starts": _spec("learning_starts", "{:,.0f}", "transitions before the first update (bench setting)"),
    },
    "evaluator": {
        "frames_per_s_without": _spec(
            "frames/s without evaluator",
            "{:,.0f}",
            "training, mean of the runs before and after (--quick: the training part's run)",
        ),
        "frames_per_s_with": _spec("frames/s with evaluator", "{:,.0f}", "training, evaluator evaluating back to back"),
        "frames_ratio": _spec("frames/s with / without", "{:.3f}", "worst case: evaluating back to back"),
        "updates_ratio": _spec("updates/s with / without", "{:.3f}", "worst case: evaluating back to back"),
        "evaluations": _spec("evaluations in the window", "{:.0f}", "finished while measuring"),
        "evaluator_cpu_pct": _spec("evaluator CPU %", "{:.0f}", "of one core, niced (+10)"),
        "eval_steps_per_s": _spec("evaluator steps/s", "{:,.1f}", "agent steps it played per s of evaluating"),
        "cpu_ms_per_eval_step": _spec("evaluator CPU ms per step", "{:.2f}", "its CPU per agent step"),
        "max_steps_per_evaluation": _spec(
            "most steps per evaluation", "{:,.0f}", "(eval_episodes + greedy) x eval_max_steps"
        ),
        "wall_s_per_evaluation_at_most": _spec(
            "wall s per evaluation, at most", "{:,.1f}", "most steps at the measured steps/s"
        ),
        "cpu_s_per_evaluation_at_most": _spec(
            "CPU s per evaluation, at most", "{:,.1f}", "most steps at the measured CPU per step"
        ),
        "wall_s_per_evaluation": _spec(
            "wall s per evaluation", "{:.1f}", "mean over the evaluations the run finished (n/a: none)"
        ),
        "cpu_s_per_evaluation": _spec("CPU s per evaluation", "{:.1f}", "mean over the evaluations the run finished"),
        "eval_interval_frames": _spec(
            "configured eval interval frames", "{:,.0f}", "eval_interval_frames of the preset"
        ),
        "eval_interval_s": _spec("that interval in s", "{:.0f}", "its frames at the frames/s without the evaluator"),
        "busy_share_at_interval": _spec(
            "evaluator busy share at that interval",
            "{:.3f}",
            "wall s per evaluation (at most, if none finished) / interval",
        ),
        "frames_ratio_at_interval": _spec(
            "frames/s ratio at that interval",
            "{:.4f}",
            "1 - (1 - worst-case ratio) x busy share",
            (">=", TARGET_EVALUATOR_RATIO),
        ),
        "machine_pct_at_interval": _spec(
            "machine CPU % at that interval", "{:.2f}", "CPU s per evaluation / interval / cores"
        ),
    },
    "soak": {
        "minutes": _spec("minutes", "{:.1f}", "soak length"),
        "replay_capacity": _spec("replay capacity", "{:,.0f}", "small so that it fills early"),
        "replay_full_s": _spec("replay full at s", "{:.0f}", "warm-up ends: replay full and training"),
        "frames_per_s_first": _spec("frames/s, first minute", "{:,.0f}", "first full minute after the replay is full"),
        "frames_per_s_last": _spec("frames/s, last minute", "{:,.0f}", "last full minute"),
        "frames_ratio": _spec(
            "frames/s last / first", "{:.3f}", "collection does not slow down", (">=", TARGET_SOAK_RATIO)
        ),
        "updates_per_s_first": _spec(
            "updates/s, first minute", "{:,.1f}", "first full minute after the replay is full"
        ),
        "updates_per_s_last": _spec("updates/s, last minute", "{:,.1f}", "last full minute"),
        "updates_ratio": _spec(
            "updates/s last / first", "{:.3f}", "training does not slow down", (">=", TARGET_SOAK_RATIO)
        ),
        "rss_full_mb": _spec("learner RSS at full, MB", "{:,.0f}", "when the replay became full"),
        "rss_end_mb": _spec("learner RSS at end, MB", "{:,.0f}", "at the last monitor tick"),
        "rss_growth_pct": _spec(
            "learner RSS growth %", "{:.1f}", "after the replay is full", ("<=", TARGET_RSS_GROWTH_PCT)
        ),
        "collectors_rss_full_mb": _spec(
            "collectors RSS at full, MB", "{:,.0f}", "sum over collectors when the replay became full"
        ),
        "collectors_rss_end_mb": _spec("collectors RSS at end, MB", "{:,.0f}", "at the last monitor tick"),
        "collectors_rss_growth_pct": _spec(
            "collectors RSS growth %", "{:.1f}", "after the replay is full", ("<=", TARGET_RSS_GROWTH_PCT)
        ),
    },
    "ray": {
        "collectors": _spec("collectors", "{:.0f}", "the same collectors, local and on the node agent"),
        "local_before_frames_per_s": _spec("local frames/s, before", "{:,.0f}", "local backend, just before"),
        "ray_frames_per_s": _spec("ray frames/s", "{:,.0f}", "one-node Ray: a node agent runs them, the learner pulls"),
        "local_after_frames_per_s": _spec("local frames/s, after", "{:,.0f}", "local backend, just after"),
        "ray_efficiency": _spec(
            "ray / local frames/s", "{:.3f}", "the cost of the extra hop", (">=", TARGET_RAY_EFFICIENCY)
        ),
        "node_records_per_s": _spec("node records/s", "{:,.0f}", "what the node's collectors produced over Ray"),
        "pull_records_per_s": _spec("pull path records/s", "{:,.0f}", "one agent, flooding producers, into replay"),
        "pull_mb_per_s": _spec("pull path MB/s", "{:,.1f}", f"the same in MB ({RECORD_BYTES:,} B a record)"),
        "pull_ms": _spec("pull latency ms", "{:.1f}", "mean, request to records on the learner"),
        "pull_max_gap_ms": _spec("longest poll gap ms", "{:.1f}", "the learner's loop while pulling"),
        "pull_records": _spec("records pulled", "{:,.0f}", "in the window"),
        "pull_path_ratio": _spec(
            "pull path / node's records", "{:.1f}", "headroom of one pull path", (">=", TARGET_PULL_PATH_RATIO)
        ),
    },
}


def target_met(spec: FigureSpec, value: float) -> bool | None:
    """Whether ``value`` meets ``spec``'s target; None without a target or a number to judge."""
    if spec.target is None or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    op, threshold = spec.target
    if op == "within":  # a ratio to the configured value, within +-threshold of 1
        return abs(value - 1.0) <= threshold
    return value >= threshold if op == ">=" else value <= threshold
