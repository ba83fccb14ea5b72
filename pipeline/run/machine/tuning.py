"""The ``auto`` preset's measurements: settings balanced for the machine at hand, cached.

Machines differ several-fold in emulator speed (~190 to ~890 frames/s per core) and in
which learner precision is fastest, so a table of presets cannot be right everywhere.
:func:`tune` measures, on this machine:

* the emulator's frames/s on one core, stepping the real wrapped env (frame skip,
  grayscale, resize) with random actions in a child process, as a collector does;
* the learner's updates/s: compile/precision by :mod:`pipeline.learning.learner_choice`
  at the preset's batch size, then the chosen variant at each candidate batch size;
* the RAM and /dev/shm available (:mod:`pipeline.run.machine.preflight`);
* what other processes used of the cores meanwhile (:mod:`pipeline.run.machine.load`).

Then it balances collection against learning at the configured replay ratio ``R``: an
agent step costs a collector ``skip / f`` CPU-seconds, and needs ``R / B`` learner
updates of ``1 / u(B)`` seconds each, so one core-second of the machine yields
``1 / (skip / f + R / (B u(B)))`` agent steps. The batch size with the most steps per
core-second among those the learning benchmark has measured (:data:`MEASURED_LEARNING`)
is chosen, and the fewest collectors that keep the machine busy at that
balance are started; the learner starts on the cores they leave (at least one) and takes
more while they stall (:mod:`pipeline.run.trainer.thread_handover`). The preset's batch
size is kept unless another costs at least 10 % less per sample (the batch size changes
learning, not only speed). The same balance at replay ratios 4, 8 and 16 gives the
frames/s each would run at: the wall-time cost of more updates per frame on this
machine. The result (measurements and choices) is cached per machine and torch version;
``python main.py tune`` measures again and prints it. Figures measured while other
processes kept a quarter of the cores or more busy are likely low: they are used for the
run at hand but not cached (``python main.py tune --force`` caches them, marked busy).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from config import LEARNING_AS_MEASURED, Config
from configuration.resolution import ResolvedConfig, resolve_config
from pipeline.common.child import run_in_child
from pipeline.common.files import atomic_write
from pipeline.learning.learner_choice import (
    LEARNER_VARIANTS,
    apply_choice,
    cache_dir,
    choose_learner,
    machine_signature,
)
from pipeline.learning.learner_speed import learner_spec, time_batch_sizes
from pipeline.run.machine.load import LoadMeter
from pipeline.run.machine.preflight import MachineLimits

# The learning settings (batch size, replay ratio, learning rate) the learning benchmark
# has measured on 1-1 (config.LEARNING_AS_MEASURED, which every Mario preset learns with). The batch size
# changes what is learned per frame at a given ratio and learning rate, so auto chooses
# only among these; the rest of its plan (collectors, learner threads) is speed alone.
MEASURED_LEARNING: tuple[tuple[int, float, float], ...] = (
    (LEARNING_AS_MEASURED["batch_size"], LEARNING_AS_MEASURED["replay_ratio"], LEARNING_AS_MEASURED["learning_rate"]),
)
BATCH_SIZES = tuple(sorted({batch for batch, _, _ in MEASURED_LEARNING}))
ENV_SECONDS = 6.0
BATCH_CHANGE_GAIN = 0.9  # another batch size must cost at most this much per sample
INFER_OVERHEAD = 1.1  # acting (batched forward passes) and ring writes: ~10 % of a collector's time
# The replay ratios whose expected speed tune prints: the sample-efficient Atari agents
# replay each transition 8-16 times or more, and this is what it costs the machine.
RATIO_SWEEP = (4.0, 8.0, 16.0)
TUNING_VERSION = 2  # 2: AMP learners got slower (fp32 targets), so their cached rates are stale


@dataclass
class Tuning:
    """Measured figures and the settings chosen from them (the ``auto`` preset's values)."""

    emulator_frames_per_s: float
    updates_per_s: dict[str, float]  # batch size -> updates/s of the chosen variant
    cores: int
    memory_available_gb: float
    shm_free_gb: float
    settings: dict[str, Any]  # Config field -> value
    explanation: str
    # Mean cores other processes kept busy while measuring (None: not known), and whether
    # that made the figures suspect (caches written before these fields read as quiet).
    other_cores: float | None = None
    busy: bool = False
    # Replay ratio -> frames/s expected with that ratio (older caches: none).
    frames_per_s_at_ratio: dict[str, float] = field(default_factory=dict)

    def load_line(self) -> str:
        """What the rest of the machine did while measuring, in words."""
        if self.other_cores is None:
            return "the load of other processes while measuring is not known here"
        return f"other processes used {self.other_cores:.1f} of the {self.cores} core(s) while measuring"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _emulator_worker(conn: Connection, env_id: str, env_kwargs: dict[str, Any], seconds: float) -> None:
    import numpy as np
    import torch

    from envs import make_env

    torch.set_num_threads(1)
    env = make_env(env_id, seed=0, **env_kwargs)
    rng = np.random.default_rng(0)
    actions = int(env.action_space.n)
    env.reset(seed=0)
    frames_per_step = 1 if env_id.startswith("Catch") else int(env_kwargs["frame_skip"])

    def step() -> None:
        # Random play ends episodes (on some stages within the warm-up): the emulator
        # refuses a step past the end, so every end is followed by a reset.
        _, _, terminated, truncated, _ = env.step(int(rng.integers(actions)))
        if terminated or truncated:
            env.reset()

    for _ in range(50):  # warm up: the first steps load the ROM and build caches
        step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    conn.send(steps * frames_per_step / (time.perf_counter() - start))


def measure_emulator(cfg: Config, seconds: float = ENV_SECONDS) -> float:
    """Frames/s of one wrapped env on one core (random actions, as early training plays)."""
    return float(
        run_in_child(
            _emulator_worker, (cfg.env_id, cfg.env_kwargs(), seconds), name="tune-emulator", timeout_s=seconds + 180
        )
    )


@dataclass(frozen=True)
class Plan:
    """How a machine's cores are best split at a replay ratio, and what that yields."""

    batch_size: int
    collectors: int
    learner_threads: int
    frames_per_s: float  # emulator frames per second expected
    step_cost: float  # collector CPU-seconds per agent step
    learn_cost: float  # learner seconds per agent step at the batch size

    @property
    def collector_share(self) -> float:
        return self.step_cost / (self.step_cost + self.learn_cost)


def plan(cfg: Config, frames_per_s: float, updates_per_s: dict[int, float], cores: int) -> Plan:
    """The split with the most agent steps per second at ``cfg.replay_ratio`` (see the module docstring)."""
    frames_per_step = 1 if cfg.env_id.startswith("Catch") else cfg.frame_skip
    step_cost = INFER_OVERHEAD * frames_per_step / frames_per_s  # collector CPU-seconds per agent step

    def learn_cost(batch: int) -> float:  # learner seconds per agent step
        return cfg.replay_ratio / (batch * updates_per_s[batch])

    # The batch size changes what is learned per sample, not only its speed: keep the
    # preset's unless another is clearly cheaper per sample (on CPUs the cost per sample
    # is nearly flat: 419, 416 and 435 samples/s at 32, 64 and 128 on this project's box).
    batch = min(updates_per_s, key=lambda b: step_cost + learn_cost(b))
    if cfg.batch_size in updates_per_s and learn_cost(batch) > BATCH_CHANGE_GAIN * learn_cost(cfg.batch_size):
        batch = cfg.batch_size
    total = step_cost + learn_cost(batch)

    def steps_per_s(collectors: int) -> float:
        # Bounded by the collectors, by the learner, and by the whole machine's CPU. The
        # learner may use every core: the collectors run below its priority and it takes
        # their cores' threads while they stall (pipeline.run.trainer.thread_handover), so only
        # the machine's CPU bounds it, not the cores the collectors leave.
        return min(collectors / step_cost, cores / learn_cost(batch), cores / total)

    best = max(steps_per_s(p) for p in range(1, cores + 1))
    collectors = next(p for p in range(1, cores + 1) if steps_per_s(p) >= best * 0.999)  # fewest that reach it
    return Plan(
        batch_size=batch,
        collectors=collectors,
        learner_threads=max(1, cores - collectors),
        frames_per_s=best * frames_per_step,
        step_cost=step_cost,
        learn_cost=learn_cost(batch),
    )


def balance(
    cfg: Config, frames_per_s: float, updates_per_s: dict[int, float], cores: int
) -> tuple[dict[str, Any], str]:
    """Batch size, collectors and learner threads for the most agent steps per second at the replay ratio."""
    p = plan(cfg, frames_per_s, updates_per_s, cores)
    batch = p.batch_size
    why = (
        f"emulator {frames_per_s:,.0f} frames/s per core -> {1 / p.step_cost:,.0f} agent steps/s per collector; "
        f"learner {updates_per_s[batch]:,.1f} updates/s at batch {batch} -> "
        f"{batch * updates_per_s[batch] / cfg.replay_ratio:,.0f} agent steps/s at replay ratio {cfg.replay_ratio:g}; "
        f"collectors take {p.collector_share:.0%} of the work: {p.collectors} collector(s), "
        f"{p.learner_threads} learner thread(s), ~{p.frames_per_s:,.0f} frames/s expected on {cores} core(s); "
        f"{learning_setting(batch, cfg.replay_ratio, cfg.learning_rate)}"
    )
    return {"batch_size": batch, "num_processes": p.collectors, "learner_threads": p.learner_threads}, why


def learning_setting(batch: int, replay_ratio: float, learning_rate: float) -> str:
    """Says whether a run learns with a setting the learning benchmark has measured."""
    setting = f"batch {batch}, replay ratio {replay_ratio:g}, learning rate {learning_rate:g}"
    if (batch, replay_ratio, learning_rate) in MEASURED_LEARNING:
        return f"learning: {setting}, as the learning benchmark measured it (docs/learning.md)"
    return f"learning: {setting}, a setting the learning benchmark has not measured"


def frames_per_s_at_ratios(
    cfg: Config, frames_per_s: float, updates_per_s: dict[int, float], cores: int, ratios: tuple[float, ...]
) -> dict[str, float]:
    """Emulator frames/s expected at each replay ratio, each with its own best split: what
    more updates per frame cost this machine in wall time."""
    out = {}
    for ratio in ratios:
        at_ratio = Config(**{**cfg.to_dict(), "replay_ratio": ratio})
        out[f"{ratio:g}"] = plan(at_ratio, frames_per_s, updates_per_s, cores).frames_per_s
    return out


def tune(
    cfg: Config,
    device: str = "cpu",
    log: Callable[[str], None] = print,
    *,
    env_seconds: float = ENV_SECONDS,
    learner_seconds: float = 3.0,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
) -> Tuning:
    """Measure this machine for ``cfg`` (the preset before tuning) and choose its settings.

    The measurement is bracketed by a :class:`~pipeline.run.machine.load.LoadMeter`: the
    result says what other processes used of the cores meanwhile, and whether that was
    enough to make the figures suspect (``busy``).
    """
    meter = LoadMeter()
    limits = MachineLimits.probe()
    log(f"tune: emulator speed ({cfg.env_id}, {env_seconds:.0f} s on one core) ...")
    frames_per_s = measure_emulator(cfg, env_seconds)
    log(f"tune: {frames_per_s:,.0f} frames/s per core; learner compile/precision at batch {cfg.batch_size} ...")
    cfg = Config(**{**cfg.to_dict(), "learner_threads": 1})  # rates per core; balance() splits the cores
    choice = choose_learner(cfg, device)
    log(f"tune: learner {choice.variant} ({choice.reason}); updates/s per batch size ...")
    compile_, amp = choice.compile, choice.amp
    variant = choice.variant
    spec = learner_spec(cfg, device, variants=["eager"], rounds=3, seconds_per_variant=learner_seconds)
    eager = time_batch_sizes(spec, sorted({*batch_sizes, cfg.batch_size}))
    # The chosen variant's speed-up over eager, measured at the preset's batch size, applied to all.
    speedup = choice.updates_per_s[variant] / choice.updates_per_s["eager"] if "eager" in choice.updates_per_s else 1.0
    rates = {batch: eager[batch] * speedup for batch in batch_sizes}
    for batch in batch_sizes:
        log(f"tune:   batch {batch}: {rates[batch]:,.1f} updates/s ({variant})")
    load = meter.stop()
    settings, why = balance(cfg, frames_per_s, rates, limits.cores)
    settings.update(compile="on" if compile_ else "off", amp="on" if amp else "off")
    tuning = Tuning(
        emulator_frames_per_s=frames_per_s,
        updates_per_s={str(b): r for b, r in rates.items()},
        cores=limits.cores,
        memory_available_gb=limits.memory_available_bytes / 2**30,
        shm_free_gb=limits.shm_free_bytes / 2**30,
        settings=settings,
        explanation=f"{why}; learner {variant}: {choice.reason}",
        other_cores=None if load is None else round(load.other_cores, 2),
        busy=load is not None and load.busy,
        frames_per_s_at_ratio=frames_per_s_at_ratios(cfg, frames_per_s, rates, limits.cores, RATIO_SWEEP),
    )
    log(f"tune: {tuning.load_line()}")
    return tuning


def tuning_path(cfg: Config, device: str = "cpu") -> Path:
    """The cache file of this machine's tuning for ``cfg``'s env and learner shape."""
    key = {
        "version": TUNING_VERSION,
        **machine_signature(device),
        "env_id": cfg.env_id,
        "replay_ratio": cfg.replay_ratio,
        "frame_stack": cfg.frame_stack,
        # Only a QR-DQN learner adds its shape, so the caches of every other run stay valid.
        **({"quantiles": cfg.quantiles} if cfg.quantiles else {}),
        "variants": list(LEARNER_VARIANTS),
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / f"tuning-{digest}.json"


def load_tuning(path: Path) -> Tuning | None:
    try:
        data = json.loads(path.read_text())
        return Tuning(**data)
    except (OSError, ValueError, TypeError):
        return None


def save_tuning(path: Path, tuning: Tuning) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as handle:
        json.dump(tuning.to_json(), handle, indent=2)


def learner_device(cfg: Config) -> str:
    """The device the learner will use (what the tuning and the learner choice are measured on)."""
    if cfg.device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def busy_advice(tuning: Tuning) -> str:
    """Why busy figures were not cached, and how to measure again."""
    return (
        f"{tuning.load_line()}, so the figures are likely low and were not cached; measure again on a quiet "
        "machine with: python main.py tune (or cache these anyway with: python main.py tune --force)"
    )


def resolve_for_machine(
    cli: dict[str, Any],
    preset: str | None,
    log: Callable[[str], None],
    *,
    retune: bool = False,
    force: bool = False,
) -> ResolvedConfig:
    """The run's settings as on the command line, with what ``auto`` leaves open measured.

    With the ``auto`` preset, the machine's tuning (cached; measured on first use or with
    ``retune``) replaces the preset's hardware guesses; then ``compile``/``amp`` left at
    ``auto`` are chosen by timing the learner (cached). The sources say which is which.
    A tuning measured on a busy machine is used but not cached, unless ``force``
    (``resolved.tuning.busy`` tells the caller; a training start says so through ``log``).
    """
    resolved = resolve_config(cli, preset=preset)
    cfg = resolved.config
    device = learner_device(cfg)
    if resolved.preset.startswith("auto"):
        path = tuning_path(cfg, device)
        tuning = None if retune else load_tuning(path)
        if tuning is None:
            log(f"measuring this machine once for the auto preset (cached in {path}) ...")
            tuning = tune(cfg, device, log)
            if not tuning.busy or force:
                save_tuning(path, tuning)
            elif not retune:  # a training start; the tune command reports it itself
                log(f"tune: {busy_advice(tuning)}; this run uses them")
        resolved = resolve_config(cli, preset=preset, tuned=tuning.settings, tuned_label=f"tuned: {path}")
        resolved.tuning = tuning
        cfg = resolved.config
    choice = choose_learner(cfg, device)
    cfg, sources = apply_choice(cfg, resolved.sources, choice)
    resolved.config, resolved.sources = cfg, sources
    return resolved
