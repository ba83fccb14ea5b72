"""Compile and precision of the learner, chosen by measuring them on the machine at hand.

Neither ``torch.compile`` nor bf16 autocast pays everywhere: on a CPU with native bf16
(AVX512-BF16 / AMX) compiled bf16 ran 1.66x eager fp32, on a Cascade Lake without it
0.56x, and compile alone ran 0.87x there. So with ``compile=auto`` / ``amp=auto`` the
learner's variants (eager and compiled, fp32 and AMP) are timed on a replay of synthetic
episodes at the run's batch size, thread count and network shape, in a child process
(:mod:`pipeline.learning.learner_speed`), and the fastest one is used. A variant must beat
the simpler one by :data:`MARGIN` to be preferred (timing noise must not pick compile).

The result is cached per machine (CPU model and its bf16/AMX flags, or the GPU's name),
torch version and learner shape, in ``$MARIO_DQN_CACHE`` (default
``~/.cache/mario-dqn``), so it costs nothing the second time. ``on``/``off`` settings
are taken as they are; when only one of the two is ``auto``, only the variants the other
allows are timed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import Config
from pipeline.common.files import atomic_write
from pipeline.learning.learner_speed import LEARNER_VARIANTS, learner_spec, time_learners

logger = logging.getLogger(__name__)

MARGIN = 1.03  # a more complex variant must be this much faster than a simpler one
SECONDS_PER_VARIANT = 3.0
ROUNDS = 2
# 2: the target forwards run in fp32 under AMP, which changed the AMP variants' speed.
CACHE_VERSION = 2
# Simplest first: on a tie within MARGIN the earlier one wins.
PREFERENCE = ("eager", "eager_amp", "compiled", "compiled_amp")


@dataclass(frozen=True)
class LearnerChoice:
    """What the learner will run with, and why (shown by ``--print-config`` and at startup)."""

    compile: bool
    amp: bool
    reason: str
    updates_per_s: dict[str, float]  # variant -> measured rate (empty when nothing was measured)

    @property
    def variant(self) -> str:
        return next(name for name, flags in LEARNER_VARIANTS.items() if flags == (self.compile, self.amp))


def cache_dir() -> Path:
    return Path(os.environ.get("MARIO_DQN_CACHE") or Path.home() / ".cache" / "mario-dqn")


def machine_signature(device: str) -> dict[str, str]:
    """What decides which variant is fastest: the processor (with its bf16 flags) or the GPU, and torch."""
    import torch

    if device.startswith("cuda"):
        processor = torch.cuda.get_device_name(torch.device(device))
    else:
        processor = platform.processor() or platform.machine()
        flags = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name") and processor in ("", platform.machine()):
                    processor = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = " ".join(f for f in line.split(":", 1)[1].split() if "bf16" in f or f.startswith("amx"))
                    break
        except OSError:
            pass
        processor = f"{processor} [{flags or 'no bf16'}]"
    return {"processor": processor, "torch": torch.__version__, "device": device.split(":")[0]}


def _allowed(setting: str) -> tuple[bool, ...]:
    return {"on": (True,), "off": (False,), "auto": (False, True)}[setting]


def candidate_variants(cfg: Config) -> list[str]:
    """The variants the settings leave open, simplest first."""
    return [
        name
        for name in PREFERENCE
        if LEARNER_VARIANTS[name][0] in _allowed(cfg.compile) and LEARNER_VARIANTS[name][1] in _allowed(cfg.amp)
    ]


def pick_fastest(rates: dict[str, float]) -> str:
    """The fastest variant; a later (more complex) one only when it beats the current pick by MARGIN."""
    best = None
    for name in PREFERENCE:
        if name in rates and (best is None or rates[name] > rates[best] * MARGIN):
            best = name
    if best is None:
        raise ValueError("no variant was measured")
    return best


def choose_learner(
    cfg: Config,
    device: str,
    *,
    measure: Callable[[dict[str, Any]], dict[str, float]] = time_learners,
    replay_device: str | None = None,
) -> LearnerChoice:
    """Compile and AMP for this run: as set, or the fastest measured (cached) when ``auto``."""
    variants = candidate_variants(cfg)
    if len(variants) == 1:
        compile_, amp = LEARNER_VARIANTS[variants[0]]
        return LearnerChoice(compile_, amp, f"set (compile={cfg.compile}, amp={cfg.amp})", {})
    spec = learner_spec(
        cfg,
        device,
        variants=variants,
        rounds=ROUNDS,
        seconds_per_variant=SECONDS_PER_VARIANT,
        replay_device=replay_device,
    )
    key = {
        "version": CACHE_VERSION,
        **machine_signature(str(device)),
        "threads": spec["threads"],
        "batch_size": cfg.batch_size,
        "num_actions": spec["num_actions"],
        "frame_stack": cfg.frame_stack,
        "variants": variants,
    }
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"learner-{digest}.json"
    rates = _read_cache(path, key)
    source = f"cached in {path}"
    if rates is None:
        logger.info("timing the learner's variants %s once for this machine (~%d s)", variants, 10 * len(variants))
        figures = measure(spec)
        rates = {v: figures[f"{v}_updates_per_s"] for v in variants if f"{v}_updates_per_s" in figures}
        for v in variants:
            if figures.get(f"{v}_compile_failed"):
                rates.pop(v, None)  # it ran eager: not a real compiled figure
        _write_cache(path, key, rates)
        source = f"measured now, cached in {path}"
    best = pick_fastest(rates)
    compile_, amp = LEARNER_VARIANTS[best]
    table = ", ".join(f"{v} {rates[v]:.1f}" for v in PREFERENCE if v in rates)
    return LearnerChoice(compile_, amp, f"fastest of {table} updates/s ({source})", dict(rates))


def apply_choice(cfg: Config, sources: dict[str, str], choice: LearnerChoice) -> tuple[Config, dict[str, str]]:
    """The config with ``auto`` compile/amp replaced by the choice, and sources saying why."""
    values, sources = {}, dict(sources)
    for name, chosen in (("compile", choice.compile), ("amp", choice.amp)):
        if getattr(cfg, name) == "auto":
            values[name] = "on" if chosen else "off"
            sources[name] = f"auto: {choice.reason}"
    return dataclasses.replace(cfg, **values), sources


def _read_cache(path: Path, key: dict[str, Any]) -> dict[str, float] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != key or not isinstance(data.get("updates_per_s"), dict):
        return None
    return {str(k): float(v) for k, v in data["updates_per_s"].items()}


def _write_cache(path: Path, key: dict[str, Any], rates: dict[str, float]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "w") as handle:
            json.dump({"key": key, "updates_per_s": rates}, handle, indent=2)
    except OSError as exc:  # a read-only home: measure again next time, say so once
        logger.warning("could not cache the learner timing in %s (%s)", path, exc)
