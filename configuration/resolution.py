"""How a run's settings are resolved: hardware detection, the auto preset, and the merge.

:func:`resolve_config` merges, highest first,

    command line  >  knobs in config.py  >  preset  >  dataclass defaults

(plus, for the ``auto`` preset, what ``python main.py tune`` measured) and returns the
final :class:`config.Config` with where each value came from in a
:class:`ResolvedConfig` (``python main.py --print-config`` shows both). The knobs and
presets themselves live in :mod:`config`, the file users edit; this module reads them at
call time, so an edited knob takes effect without anything else changing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

import config
from config import FIELD_NAMES, KNOBS, PRESET_NAMES, PRESETS, Config, ConfigError, validate
from pipeline.transport.records import TRANSITION_BYTES

__all__ = [
    "Hardware",
    "ResolvedConfig",
    "auto_preset",
    "detect_hardware",
    "knob_values",
    "parse_field_values",
    "resolve_config",
]


@dataclass
class Hardware:
    """What auto-detection saw."""

    cores: int
    memory_gb: float
    gpu: bool


def detect_hardware() -> Hardware:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        memory_gb = 8.0
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        gpu = False
    return Hardware(cores=cores, memory_gb=memory_gb, gpu=gpu)


def auto_preset(hw: Hardware) -> tuple[str, dict[str, Any]]:
    """Pick the preset closest to the hardware, then size collectors and replay to it."""
    if hw.gpu and hw.cores >= 16:
        name = "server"
    elif hw.gpu and hw.cores >= 8:
        name = "desktop"
    elif hw.cores >= 4:
        name = "laptop"
    else:
        name = "cpu"
    values = dict(PRESETS[name])
    # One core stays with the learner; the rest collect.
    values["num_processes"] = max(1, hw.cores - 1)
    # At most a quarter of the RAM for replay.
    max_replay = int(hw.memory_gb * 2**30 / 4 / TRANSITION_BYTES)
    values["replay_capacity"] = max(10_000, min(values["replay_capacity"], max_replay))
    return name, values


@dataclass
class ResolvedConfig:
    """The final configuration and, per field, where its value came from."""

    config: Config
    sources: dict[str, str] = field(default_factory=dict)
    preset: str = ""
    tuning: Any = None  # the auto preset's measurements (pipeline.run.machine.tuning.Tuning), when used

    def describe(self) -> str:
        width = max(len(n) for n in FIELD_NAMES)
        lines = [f"preset: {self.preset}"]
        if self.tuning is not None:
            lines.append(f"tuned: {self.tuning.explanation}")
        for f in fields(Config):
            lines.append(f"{f.name:<{width}}  {getattr(self.config, f.name)!r:<28}  ({self.sources[f.name]})")
        return "\n".join(lines)


def knob_values(module_globals: dict[str, Any] | None = None) -> dict[str, Any]:
    """The knobs of config.py that are set (not None), as Config field values."""
    g = vars(config) if module_globals is None else module_globals
    return {fname: g[knob] for knob, fname in KNOBS.items() if g.get(knob) is not None}


def resolve_config(
    cli: dict[str, Any] | None = None,
    *,
    preset: str | None = None,
    knobs: dict[str, Any] | None = None,
    hardware: Hardware | None = None,
    tuned: dict[str, Any] | None = None,
    tuned_label: str = "measured",
) -> ResolvedConfig:
    """Merge defaults < preset < knobs < command line, then validate.

    ``preset`` is the command line's --preset (None = the PRESET knob). ``knobs`` default
    to the knobs in config.py; tests pass their own. ``tuned``: the ``auto`` preset's
    measured settings (``python main.py tune``), which replace its hardware guesses.
    """
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    knobs = knob_values() if knobs is None else {k: v for k, v in knobs.items() if v is not None}
    preset_name = preset if preset is not None else config.PRESET
    preset_source = "preset" if preset is None else "preset (--preset)"
    if preset_name not in PRESET_NAMES:
        raise ConfigError(
            f"preset: unknown preset {preset_name!r}; choose one of {', '.join(PRESET_NAMES)} "
            f"(--preset NAME or PRESET in config.py)"
        )
    if preset_name == "auto":
        chosen, preset_values = auto_preset(hardware or detect_hardware())
        preset_label = f"auto -> {chosen}"
        tuned = tuned or {}
    else:
        preset_values, preset_label = dict(PRESETS[preset_name]), preset_name
        tuned = {}

    unknown = sorted(set(cli) - FIELD_NAMES) + sorted(set(knobs) - FIELD_NAMES)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(unknown)}; known settings are the Config fields")

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in fields(Config):
        for layer, source in (
            (cli, "command line"),
            (knobs, "config.py knob"),
            (tuned, f"{preset_source} {preset_label}, {tuned_label}"),
            (preset_values, f"{preset_source} {preset_label}"),
        ):
            if f.name in layer:
                values[f.name], sources[f.name] = layer[f.name], source
                break
        else:
            sources[f.name] = "default"
    resolved = Config(**values)
    validate(resolved)
    return ResolvedConfig(config=resolved, sources=sources, preset=preset_label)


def parse_field_values(items: list[str], flag: str) -> dict[str, Any]:
    """FIELD=VALUE pairs of a command line's ``flag`` (``--set``), each value parsed as its
    Config field's type; a :class:`ConfigError` naming the pair and the fix otherwise."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in config.FIELD_TYPES:
            raise ConfigError(
                f"{flag} {item!r}: expected FIELD=VALUE with FIELD a config.py setting (see --print-config)"
            )
        kind = config.FIELD_TYPES[name]
        try:
            if kind == "bool":
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                values[name] = text.lower() in ("true", "1", "yes")
            else:
                values[name] = {"int": int, "float": float, "str": str}[kind](text)
        except ValueError:
            raise ConfigError(f"{flag} {item!r}: {name} takes a {kind} value, got {text!r}") from None
    return values
