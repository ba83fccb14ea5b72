"""Learner speed: updates/s of ``Learner.update`` alone, for each compile/AMP variant.

Used by the bench's learner part and by the learner's own choice of compile and
precision for the machine (:mod:`pipeline.learning.learner_choice`). In a spawned
process with the training thread count, every variant is built and warmed up on batches
pre-sampled from a replay memory of synthetic episodes, then the variants are timed in
interleaved rounds, so that machine load drifting during the measurement hits every
variant alike. :func:`learner_spec` says what to measure; :func:`time_learners`
measures it in a child process (its compiled graphs and threads die with it).

A spec can also carry a **changed learner**: one variant again with other settings (the
bench's ``--learner-set quantiles=32``), timed in the same rounds as the rest, so the
price of a learning option in learner time is a ratio measured side by side.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from pipeline.common.child import ChildExited, ChildTimeout, run_in_child
from pipeline.common.cores import learner_thread_range

if TYPE_CHECKING:  # torch and the replay are imported in the child only
    import torch

    from config import Config
    from pipeline.learning.replay import ReplayMemory

LEARNER_VARIANTS: dict[str, tuple[bool, bool]] = {  # name -> (compile, amp)
    "eager": (False, False),
    "eager_amp": (False, True),
    "compiled": (True, False),
    "compiled_amp": (True, True),
}
CHANGED = "changed"  # the name the changed learner's figures go by
LEARNER_REPLAY_CAPACITY = 8_192
# Building, compiling and warming up every variant before the timed rounds; on top of it
# a minute per variant.
LEARNER_START_ALLOWANCE_S = 900.0


def training_threads(cfg: Config) -> int:
    """The learner's intra-op threads at the start of training (the fewest it runs with)."""
    return learner_thread_range(cfg.learner_threads, cfg.learner_threads_max, cfg.num_processes)[0]


def learner_spec(
    cfg: Config,
    device: torch.device | str,
    *,
    variants: list[str],
    rounds: int,
    seconds_per_variant: float,
    replay_device: torch.device | str | None = None,
    changed: tuple[str, Config] | None = None,
) -> dict[str, Any]:
    """What the learner child measures (plain data: it is pickled to the child).

    ``changed`` (variant, config): that variant's learner is timed once more, built from
    the other config's settings (``CHANGED`` in the figures).
    """
    from dataclasses import asdict

    import envs
    from pipeline.learning.learner_settings import LearnerSettings

    unknown = [v for v in variants if v not in LEARNER_VARIANTS]
    if unknown:
        raise ValueError(f"unknown learner variant(s) {unknown}; known: {list(LEARNER_VARIANTS)}")
    return {
        "variants": list(variants),
        "rounds": rounds,
        "round_s": seconds_per_variant / rounds,
        "seconds_per_variant": seconds_per_variant,
        "threads": training_threads(cfg),
        "device": str(device),
        "replay_device": str(device if replay_device is None else replay_device),
        "batch_size": cfg.batch_size,
        "num_actions": envs.num_actions(cfg.env_id, cfg.action_set),
        "streams": max(1, cfg.num_processes),
        "capacity": min(cfg.replay_capacity, LEARNER_REPLAY_CAPACITY),
        "frame_stack": cfg.frame_stack,
        "n_step": cfg.n_step,
        "gamma": cfg.gamma,
        "seed": cfg.seed,
        # compile, amp and device are set per variant in the child.
        "settings": asdict(LearnerSettings.from_config(cfg, compile=False, amp=False, device=str(device))),
        "changed": None
        if changed is None
        else {
            "variant": changed[0],
            "num_actions": envs.num_actions(changed[1].env_id, changed[1].action_set),
            "settings": asdict(LearnerSettings.from_config(changed[1], compile=False, amp=False, device=str(device))),
        },
    }


def time_learners(spec: dict[str, Any]) -> dict[str, float]:
    """Run :func:`_measure_learners` in a spawned process; its figures.

    Raises :class:`~pipeline.common.child.ChildError` (with the child's traceback) if the
    measurement failed, RuntimeError if the process died or overran.
    """
    timed = len(spec["variants"]) + (spec.get("changed") is not None)
    limit = LEARNER_START_ALLOWANCE_S + timed * (spec["seconds_per_variant"] + 60)
    try:
        return run_in_child(_learner_worker, (spec,), name="learner-speed", timeout_s=limit)
    except ChildTimeout:
        raise RuntimeError(f"learner speed measurement did not finish in {limit:.0f} s") from None
    except ChildExited as exc:
        raise RuntimeError(f"learner speed measurement process died (exit code {exc.exitcode})") from None


def _learner_worker(conn: Connection, spec: dict[str, Any]) -> None:
    """Spawn target: time ``Learner.update`` for each variant, interleaved in rounds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    conn.send(_measure_learners(spec))


def _synthetic_replay(spec: dict[str, Any], device: torch.device) -> ReplayMemory:
    """A replay memory full of random 200-step episodes, one stream per collector."""
    import numpy as np

    from pipeline.learning.replay import ReplayMemory
    from pipeline.transport.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, RECORD_DTYPE

    streams = spec["streams"]
    memory = ReplayMemory(
        spec["capacity"],
        streams,
        frame_stack=spec["frame_stack"],
        n_step=spec["n_step"],
        gamma=spec["gamma"],
        device=device,
        seed=spec["seed"],
    )
    rng = np.random.default_rng(spec["seed"])
    per = memory.capacity_per_stream
    episode = 200  # 199 steps, then the FINAL record
    for stream in range(streams):
        records = np.zeros(per, RECORD_DTYPE)
        records["frame"] = rng.integers(0, 256, (per, 84, 84), dtype=np.uint8)
        records["action"] = rng.integers(0, spec["num_actions"], per)
        records["reward"] = rng.standard_normal(per).astype(np.float32)
        position = np.arange(per) % episode
        records["flags"] = np.where(position == 0, FLAG_START, 0)
        records["flags"] |= np.where(position == episode - 2, FLAG_TERMINATED, 0).astype(np.uint8)
        records["flags"] |= np.where(position == episode - 1, FLAG_FINAL, 0).astype(np.uint8)
        memory.add(stream, records)
    return memory


def _measure_learners(spec: dict[str, Any]) -> dict[str, float]:
    """Warm every variant up, then time them in rounds; updates/s, samples/s and speed-ups."""
    import torch

    from pipeline.learning.learner import Learner
    from pipeline.learning.learner_settings import LearnerSettings

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    device = torch.device(spec["device"])
    replay = _synthetic_replay(spec, torch.device(spec["replay_device"]))
    batch_size = spec["batch_size"]
    batches = [replay.sample(batch_size) for _ in range(16)]

    sync = _synchronizer(device)
    learners: dict[str, Learner] = {}
    out: dict[str, float] = {}
    # (name, variant, settings, actions): each variant, then the changed learner if any.
    builds = [(name, name, spec["settings"], spec["num_actions"]) for name in spec["variants"]]
    if spec.get("changed"):
        changed = spec["changed"]
        builds.append((CHANGED, changed["variant"], changed["settings"], changed["num_actions"]))
    for name, variant, base, num_actions in builds:
        compile_, amp = LEARNER_VARIANTS[variant]
        settings = LearnerSettings(**{**base, "compile": compile_, "amp": amp, "device": str(device)})
        learner = Learner(num_actions, settings)
        out[f"{name}_warmup_s"] = learner.warmup(batch_size)
        for batch in batches[:2]:  # the real batch types once, untimed
            learner.update(batch)
        sync()
        if compile_ and not learner.compiled:
            out[f"{name}_compile_failed"] = 1.0
        learners[name] = learner
    elapsed = dict.fromkeys(learners, 0.0)
    updates = dict.fromkeys(learners, 0)
    for round_ in range(spec["rounds"]):
        for name in _round_order(list(learners), round_):
            n, seconds = _timed_round(learners[name], batches, spec["round_s"], sync)
            elapsed[name] += seconds
            updates[name] += n
    for name in learners:
        rate = updates[name] / elapsed[name]
        out[f"{name}_updates_per_s"] = rate
        out[f"{name}_samples_per_s"] = rate * batch_size
    out.update(_efficiencies(learners, batches[0], out, device))
    eager = out.get("eager_updates_per_s")
    if eager:
        for name, key in (
            ("compiled", "compiled_speedup"),
            ("eager_amp", "amp_speedup"),
            ("compiled_amp", "compiled_amp_speedup"),
        ):
            if f"{name}_updates_per_s" in out:
                out[key] = out[f"{name}_updates_per_s"] / eager
    return out


def _efficiencies(
    learners: dict[str, Any], batch: Any, rates: dict[str, float], device: torch.device
) -> dict[str, float]:
    """The FLOPs of one update, the GEMM peak of each precision timed, and each learner's
    efficiency: its updates/s x FLOPs over the peak of the precision it runs in.

    The FLOPs are counted on an eager learner (the same arithmetic as the compiled one,
    whose fused kernels the counter cannot see); the peaks are timed here, after the
    rounds, at the same threads.
    """
    import torch

    from pipeline.learning.learner_floor import gemm_peak_flops, update_flops

    # The changed learner is another network or loss: its arithmetic is not the others'.
    same = {name: learner for name, learner in learners.items() if name != CHANGED}
    eager = next((learner for learner in same.values() if not learner.compiled), None)
    if eager is None:
        return {}
    out = {"update_gflop": update_flops(eager, batch) / 1e9}
    peaks: dict[torch.dtype, float] = {}
    for name, learner in same.items():
        dtype = learner.amp_dtype or torch.float32
        if dtype not in peaks:
            peaks[dtype] = gemm_peak_flops(dtype, device=device) / 1e9
            out[f"{_DTYPE_NAMES[str(dtype)]}_peak_gflop_per_s"] = peaks[dtype]
        out[f"{name}_efficiency"] = rates[f"{name}_updates_per_s"] * out["update_gflop"] / peaks[dtype]
    return out


# How the figures name a precision.
_DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def time_batch_sizes(spec: dict[str, Any], batch_sizes: list[int]) -> dict[int, float]:
    """Updates/s of the eager fp32 learner at each batch size, in one child process.

    Eager only: compiling once per batch size would cost more than the whole measurement;
    the tuning scales these by the chosen variant's speed-up at the run's batch size.
    """
    limit = LEARNER_START_ALLOWANCE_S + len(batch_sizes) * (spec["seconds_per_variant"] + 60)
    try:
        rates = run_in_child(_batch_worker, (spec, list(batch_sizes)), name="learner-batches", timeout_s=limit)
    except ChildTimeout:
        raise RuntimeError(f"learner speed measurement did not finish in {limit:.0f} s") from None
    except ChildExited as exc:
        raise RuntimeError(f"learner speed measurement process died (exit code {exc.exitcode})") from None
    return {int(b): float(r) for b, r in rates.items()}


def _batch_worker(conn: Connection, spec: dict[str, Any], batch_sizes: list[int]) -> None:
    """Spawn target: one eager learner timed at each batch size."""
    import torch

    from pipeline.learning.learner import Learner
    from pipeline.learning.learner_settings import LearnerSettings

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    device = torch.device(spec["device"])
    replay = _synthetic_replay(spec, torch.device(spec["replay_device"]))
    settings = LearnerSettings(**{**spec["settings"], "compile": False, "amp": False, "device": str(device)})
    learner = Learner(spec["num_actions"], settings)
    batches = {size: [replay.sample(size) for _ in range(8)] for size in batch_sizes}
    for size in batch_sizes:
        for batch in batches[size][:2]:  # allocator and caches warm for this shape, untimed
            learner.update(batch)
    # Interleaved rounds, each size's best kept: timed one after the other, the first size
    # ran while the child was still warming up and read up to 30 % slow, enough to flip
    # the tuning's batch-size choice on a CPU where every size costs the same per sample.
    sync = _synchronizer(device)
    rates = dict.fromkeys(batch_sizes, 0.0)
    for round_ in range(spec["rounds"]):
        for size in _round_order(batch_sizes, round_):
            n, seconds = _timed_round(learner, batches[size], spec["round_s"], sync)
            rates[size] = max(rates[size], n / seconds)
    conn.send(rates)


def time_floor(spec: dict[str, Any], dtype: str) -> dict[str, float]:
    """What one core does at the floor, in a spawned process on one thread: the FLOPs of one
    update of ``spec``'s learner (``update_gflop``, counted) and the core's GEMM peak in the
    precision ``dtype`` as a run's summary names it (``torch.float32``, ``torch.bfloat16``,
    ``torch.float16``; ``core_peak_gflop_per_s``)."""
    try:
        limit = LEARNER_START_ALLOWANCE_S
        return run_in_child(_floor_worker, (spec, dtype), name="learner-floor", timeout_s=limit)
    except ChildTimeout:
        raise RuntimeError(f"learner floor measurement did not finish in {LEARNER_START_ALLOWANCE_S:.0f} s") from None
    except ChildExited as exc:
        raise RuntimeError(f"learner floor measurement process died (exit code {exc.exitcode})") from None


def _floor_worker(conn: Connection, spec: dict[str, Any], dtype: str) -> None:
    """Spawn target: count one eager update's FLOPs, time one thread's GEMM peak."""
    import torch

    from pipeline.learning.learner import Learner
    from pipeline.learning.learner_compile import random_batch
    from pipeline.learning.learner_floor import gemm_peak_flops, update_flops
    from pipeline.learning.learner_settings import LearnerSettings

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    settings = LearnerSettings(**{**spec["settings"], "compile": False, "amp": False, "device": spec["device"]})
    learner = Learner(spec["num_actions"], settings)
    batch = random_batch(spec["num_actions"], spec["frame_stack"], spec["batch_size"])
    conn.send(
        {
            "update_gflop": update_flops(learner, batch) / 1e9,
            "core_peak_gflop_per_s": gemm_peak_flops(
                getattr(torch, dtype.removeprefix("torch.")), device=spec["device"]
            )
            / 1e9,
        }
    )


def _synchronizer(device: torch.device) -> Callable[[], None]:
    """Waits for the device's queued work (CUDA runs asynchronously), so the clock sees it."""
    import torch

    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _round_order(keys: list[Any], round_: int) -> list[Any]:
    """Every other round reversed: no variant or size is always timed first."""
    return keys if round_ % 2 == 0 else keys[::-1]


def _timed_round(learner: Any, batches: list[Any], seconds: float, sync: Callable[[], None]) -> tuple[int, float]:
    """Updates done and seconds taken by one timed round of at least ``seconds``."""
    learner.update(batches[0])  # back in cache after whatever ran before, untimed
    sync()
    start = time.perf_counter()
    deadline = start + seconds
    n = 0
    while True:
        learner.update(batches[n % len(batches)])
        n += 1
        if n % 4 == 0:  # synchronising after every update would time the sync
            sync()
            if time.perf_counter() >= deadline:
                return n, time.perf_counter() - start
