"""The options removed from the code, each removal after a tag, and what the code now always does.

Each option lost on the learning benchmark (docs/learning-history.md records each, docs/learning.md lists them) or never
measured left the Config with its code; this table is its one home in the config layer.
Options left in removals (:class:`Removal`): the first after the tag ``pre-option-removal``,
then ``bootstrap_epsilon`` after ``pre-expected-sarsa-removal``, ``epsilon_schedule`` after
``pre-epsilon-schedule-removal``, and the never-measured and losing options of
``HOUSE_REMOVAL`` after ``pre-house-removal``, ``held_jump`` after
``pre-held-jump-removal``, the ``right_only_full`` action set after
``pre-full-jump-removal``, ``explore_hold_steps`` after ``pre-explore-hold-removal``,
``save_replay`` after ``pre-replay-switch-removal``, ``frontier_start_draw`` after
``pre-failures-draw-removal``, ``sticky_actions`` (training with them) after
``pre-sticky-training-removal``. A
checkpoint saved before a removal holds its fields:

- at the value the code now always behaves as (``REMOVED``), or at any value where the
  option only acted through another one that is refused (``ANY_VALUE``): the checkpoint
  was trained as the code trains today, so it loads silently (resume, eval, play, marks);
- at another value: it was trained by code that is gone, and :func:`check_saved` refuses
  it before anything starts, in one line naming the option, its value and the tag to
  check out.

``RETIRED`` holds values of fields that stay whose code path went with a removed option.
A config saved before a field existed reads as ``config.SAVED_BEFORE`` says before this
check runs (an old checkpoint without ``bn_calibration_states`` used the running average).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from configuration.validation import ConfigError

__all__ = [
    "ANY_VALUE",
    "EPSILON_SCHEDULE_REMOVAL",
    "EXPECTED_SARSA_REMOVAL",
    "EXPLORE_HOLD_REMOVAL",
    "FAILURES_DRAW_REMOVAL",
    "FULL_JUMP_REMOVAL",
    "HELD_JUMP_REMOVAL",
    "HOUSE_REMOVAL",
    "OPTION_REMOVAL",
    "REMOVALS",
    "REMOVED",
    "REPLAY_SWITCH_REMOVAL",
    "RETIRED",
    "STICKY_TRAINING_REMOVAL",
    "Removal",
    "RemovedOptionError",
    "check_saved",
    "removed_setting",
]


class _AnyValue:
    """Marks a removed option whose every value loads (it acted only through another one)."""

    def __repr__(self) -> str:
        return "ANY_VALUE"


ANY_VALUE: Final = _AnyValue()


@dataclass(frozen=True)
class Removal:
    """One clean-up of the options: what it removed, and the code just before it.

    ``commit`` is the tag's commit: a clone that fetched no tags can still check it out.
    ``options``: removed field -> the value the code now always behaves as. ``retired``:
    kept field -> (the value whose code path went, what that path was).
    """

    tag: str
    commit: str
    options: Mapping[str, Any]
    retired: Mapping[str, tuple[Any, str]] = field(default_factory=dict)


OPTION_REMOVAL: Final = Removal(
    tag="pre-option-removal",
    commit="8669a59",
    options={
        # Lost on the learning benchmark.
        "no_progress_terminal": False,
        "no_progress_penalty": 0.0,
        "advantage_learning": 0.0,
        "bn_momentum": ANY_VALUE,  # read only by the running average, bn_calibration_states=0 (retired)
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
        "priority_beta_start": ANY_VALUE,  # read only by prioritized_replay (refused since pre-house-removal)
        "priority_beta_frames": ANY_VALUE,  # read only by prioritized_replay
        "adam_eps": 1.5e-4,
        "eval_final_timeout_s": 600.0,
        "keep_checkpoints": 3,
        # Read only by shrink-and-perturb resets (reset_interval_updates > 0), refused since
        # pre-house-removal; every value loads where they were off.
        "reset_shrink": ANY_VALUE,
        # A measurement's cadence, never a learning setting: the steadiness probe now measures
        # at the target-copy cadence (target_sync_updates, 2,000 by default, as it always ran).
        "steadiness_interval_updates": ANY_VALUE,
    },
    retired={"bn_calibration_states": (0, "the running-average BatchNorm of bn_momentum")},
)

# Bootstrapping from the epsilon-greedy value (Expected SARSA) gave no more flags than the
# greedy value on either seed, and the default's quantiles cannot be combined with it.
EXPECTED_SARSA_REMOVAL: Final = Removal(
    tag="pre-expected-sarsa-removal",
    commit="ce2eee8",
    options={"bootstrap_epsilon": 0.0},
)

# An exponential epsilon schedule (DI-engine's Mario DQN, epsilon_end 0.1) was level with the
# default at 1M on two seeds, with more churn: no win, so the linear decay stays alone.
EPSILON_SCHEDULE_REMOVAL: Final = Removal(
    tag="pre-epsilon-schedule-removal",
    commit="6b6114e",
    options={"epsilon_schedule": "linear"},
)

# Options the learning benchmark never measured, or measured only to lose: each now always
# behaves as its default did, and the code only it used went with it.
HOUSE_REMOVAL: Final = Removal(
    tag="pre-house-removal",
    commit="6412b6a",
    options={
        # Never measured.
        "target_tau": 0.0,  # a full target copy every target_sync_updates
        "reset_interval_updates": 0,  # no shrink-and-perturb resets
        # Measured only once, with gamma 0.9 on an older default: uniform replay.
        "prioritized_replay": False,
        "priority_alpha": ANY_VALUE,  # read only by prioritized_replay
        "flag_bonus": 0.0,  # the game's reward alone (its 1-4 screen stopped at 0.25M)
        # Measured, no win: restarts before where episodes end (qr32-ends-stage-1-3, 782 at
        # 1M against 764) and the retriggered jump (about what a constant right+A gets).
        "frontier_start_points": "uniform",
        "jump_retrigger": False,
        # Never varied: now constants where the code uses them.
        "grad_clip": 10.0,  # pipeline.learning.update.GRAD_CLIP
        "epsilon_start": 1.0,  # pipeline.run.pacing.EPSILON_START
        # Never varied: every measured network is dueling.
        "dueling": True,
    },
)

# Every jump held to its top lost on 1-3 (730 at 1M against the default's 764, no flag, the
# episodes stopped before the gap to 0.75M: no short hop for the treetops there).
HELD_JUMP_REMOVAL: Final = Removal(
    tag="pre-held-jump-removal",
    commit="5fca07e",
    options={"held_jump": False},
)

# Full jumps as actions beside the hops lost on 1-3 too (681 at 1M against the default's 764,
# no flag; to 0.5M the episodes stopped where the held jump's did).
FULL_JUMP_REMOVAL: Final = Removal(
    tag="pre-full-jump-removal",
    commit="07adb1f",
    options={},
    retired={"action_set": ("right_only_full", "full jumps beside the hops, envs.controller.FullJump")},
)

# ez-greedy's held random actions lost on 1-3 (749 at 1M against the default's 764, no flag,
# 17 of 20 episodes at the gap, seed 0), as ez-greedy had on 1-1 (exploration="ez" above).
EXPLORE_HOLD_REMOVAL: Final = Removal(
    tag="pre-explore-hold-removal",
    commit="75bcb34",
    options={"explore_hold_steps": 1},  # 1: epsilon-greedy
)

# Saving the replay was a switch no preset, benchmark or test turned off: the replay is now
# always saved with the final checkpoint and restored on a resume. It never changed what a
# run learned, so a checkpoint saved with either value loads.
REPLAY_SWITCH_REMOVAL: Final = Removal(
    tag="pre-replay-switch-removal",
    commit="aa23839",
    options={"save_replay": ANY_VALUE},
)

# Restarts drawn where restarts fail lost on 1-3 (704 at 1M against uniform restarts' 773, no
# flag) and on 1-1 (the flag 0.30 at 2M against the default's 0.55, seed 0): uniform restarts.
FAILURES_DRAW_REMOVAL: Final = Removal(
    tag="pre-failures-draw-removal",
    commit="d2e48bb",
    options={"frontier_start_draw": "uniform"},
)

# Training with sticky actions (p 0.25) lost on 1-1: 0.40 and 0.35 at 2M on two seeds against
# the default's 0.50 and 0.50, and not ahead under sticky evaluation. Runs train without them;
# ``eval --sticky`` and ``bench --only learning --sticky`` still play the protocol with them.
STICKY_TRAINING_REMOVAL: Final = Removal(
    tag="pre-sticky-training-removal",
    commit="88dd852",
    options={"sticky_actions": 0.0},
)

REMOVALS: Final = (
    OPTION_REMOVAL,
    EXPECTED_SARSA_REMOVAL,
    EPSILON_SCHEDULE_REMOVAL,
    HOUSE_REMOVAL,
    HELD_JUMP_REMOVAL,
    FULL_JUMP_REMOVAL,
    EXPLORE_HOLD_REMOVAL,
    REPLAY_SWITCH_REMOVAL,
    FAILURES_DRAW_REMOVAL,
    STICKY_TRAINING_REMOVAL,
)
# Every removed field -> the value the code now always behaves as, over all removals.
REMOVED: Final[dict[str, Any]] = {name: now for removal in REMOVALS for name, now in removal.options.items()}
# Every retired value, over all removals.
RETIRED: Final[dict[str, tuple[Any, str]]] = {
    name: kept for removal in REMOVALS for name, kept in removal.retired.items()
}


class RemovedOptionError(ConfigError):
    """A saved config was trained with an option (or a value) that a removal took."""


def removed_setting(saved: Mapping[str, Any]) -> tuple[str, Any, str, Removal] | None:
    """The first ``(name, value, what, removal)`` of ``saved`` that the code no longer has: a
    removed field at a value other than the one the code now behaves as, or a kept field at
    a retired value (``what`` names the removed path, '' for a removed field), with the
    removal that took it. None: none."""
    for removal in REMOVALS:
        for name, now in removal.options.items():
            if name in saved and now is not ANY_VALUE and saved[name] != now:
                return name, saved[name], "", removal
        for name, (retired, what) in removal.retired.items():
            if name in saved and saved[name] == retired:
                return name, saved[name], what, removal
    return None


def check_saved(saved: Mapping[str, Any], source: str) -> None:
    """Raise :class:`RemovedOptionError` (one line) if ``saved``, the config of ``source``
    (e.g. ``"checkpoint runs/x/final.pt"``), needs code that a removal took."""
    found = removed_setting(saved)
    if found is None:
        return
    name, value, what, removal = found
    option = f"{name}={value!r}" + (f" ({what})" if what else "")
    raise RemovedOptionError(
        f"{source} was trained with {option}, an option removed after the tag {removal.tag} "
        f"(commit {removal.commit}); check out that tag to resume or evaluate it"
    )
