"""The options removed after the tag ``pre-option-removal``, and what the code now always does.

Each option lost on the learning benchmark (docs/learning-history.md records each, docs/learning.md lists them) or never
measured left the Config with its code; this table is its one home in the config layer.
A checkpoint saved before the removal holds these fields:

- at the value the code now always behaves as (``REMOVED``), or at any value where the
  option only acted through another one that is refused (``ANY_VALUE``): the checkpoint
  was trained as the code trains today, so it loads silently (resume, eval, play, marks);
- at another value: it was trained by code that is gone, and :func:`check_saved` refuses
  it before anything starts, in one line naming the option, its value and the tag.

``RETIRED`` holds values of fields that stay whose code path went with a removed option.
A config saved before a field existed reads as ``config.SAVED_BEFORE`` says before this
check runs (an old checkpoint without ``bn_calibration_states`` used the running average).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from config_validation import ConfigError

__all__ = [
    "ANY_VALUE",
    "REMOVED",
    "REMOVED_COMMIT",
    "REMOVED_TAG",
    "RETIRED",
    "RemovedOptionError",
    "check_saved",
    "removed_setting",
]

REMOVED_TAG: Final = "pre-option-removal"
# The commit the tag names: a clone that fetched no tags can still check it out.
REMOVED_COMMIT: Final = "8669a59"


class _AnyValue:
    """Marks a removed option whose every value loads (it acted only through another one)."""

    def __repr__(self) -> str:
        return "ANY_VALUE"


ANY_VALUE: Final = _AnyValue()

# Removed field -> the value the code now always behaves as.
REMOVED: Final[dict[str, Any]] = {
    # Lost on the learning benchmark.
    "no_progress_terminal": False,
    "no_progress_penalty": 0.0,
    "advantage_learning": 0.0,
    "bn_momentum": ANY_VALUE,  # read only by the running average, bn_calibration_states=0 (RETIRED)
    "batch_renorm": False,
    "augment_shift": 0,
    "exploration": "epsilon",
    "ez_mu": ANY_VALUE,  # read only by exploration="ez"
    "ez_max_steps": ANY_VALUE,  # read only by exploration="ez"
    "prev_action_input": False,
    "frontier_point_episodes": 1,
    "batch_norm": True,
    # Never measured: now fixed values, each a constant where the code uses it.
    "grad_accum": 1,
    "steadiness_probe_states": 1024,
    "steadiness_batchings": 4,
    "weights_check_steps": 200,
    "model_update_frequency": 1,
    "priority_beta_start": 0.4,
    "priority_beta_frames": 2_000_000,
    "adam_eps": 1.5e-4,
    "eval_final_timeout_s": 600.0,
    "keep_checkpoints": 3,
    "reset_shrink": 0.8,
    # A measurement's cadence, never a learning setting: the steadiness probe now measures
    # at the target-copy cadence (target_sync_updates, 2,000 by default, as it always ran).
    "steadiness_interval_updates": ANY_VALUE,
}

# Kept field -> (the value whose code path was removed, what that path was).
RETIRED: Final[dict[str, tuple[Any, str]]] = {
    "bn_calibration_states": (0, "the running-average BatchNorm of bn_momentum"),
}


class RemovedOptionError(ConfigError):
    """A saved config was trained with an option (or a value) removed after ``REMOVED_TAG``."""


def removed_setting(saved: Mapping[str, Any]) -> tuple[str, Any, str] | None:
    """The first ``(name, value, what)`` of ``saved`` that the code no longer has: a removed
    field at a value other than the one the code now behaves as, or a kept field at a
    retired value (``what`` names the removed path, '' for a removed field). None: none."""
    for name, now in REMOVED.items():
        if name in saved and now is not ANY_VALUE and saved[name] != now:
            return name, saved[name], ""
    for name, (retired, what) in RETIRED.items():
        if name in saved and saved[name] == retired:
            return name, saved[name], what
    return None


def check_saved(saved: Mapping[str, Any], source: str) -> None:
    """Raise :class:`RemovedOptionError` (one line) if ``saved``, the config of ``source``
    (e.g. ``"checkpoint runs/x/final.pt"``), needs code removed after the tag."""
    found = removed_setting(saved)
    if found is None:
        return
    name, value, what = found
    option = f"{name}={value!r}" + (f" ({what})" if what else "")
    raise RemovedOptionError(
        f"{source} was trained with {option}, an option removed after the tag {REMOVED_TAG} "
        f"(commit {REMOVED_COMMIT}); check out that tag to resume or evaluate it"
    )
