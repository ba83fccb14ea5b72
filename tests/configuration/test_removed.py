"""Tests for configuration.removed and Config.from_dict: a saved config holding a removed option at
the value the code now always has loads silently; any other value is refused in one line."""

from __future__ import annotations

import dataclasses

import pytest

from config import FIELD_NAMES, SAVED_BEFORE, Config
from configuration.removed import (
    ANY_VALUE,
    EPSILON_SCHEDULE_REMOVAL,
    EXPECTED_SARSA_REMOVAL,
    EXPLORE_HOLD_REMOVAL,
    FAILURES_DRAW_REMOVAL,
    FULL_JUMP_REMOVAL,
    HELD_JUMP_REMOVAL,
    HOUSE_REMOVAL,
    OPTION_REMOVAL,
    REMOVALS,
    REMOVED,
    REPLAY_SWITCH_REMOVAL,
    RETIRED,
    STICKY_TRAINING_REMOVAL,
    RemovedOptionError,
    check_saved,
    removed_setting,
)
from configuration.validation import ConfigError

# The removed options as the code before the tag saved them by default: the config of the
# runs in progress (their other fields are today's defaults too).
SAVED_AT_THE_TAG = {
    "no_progress_terminal": False,
    "no_progress_penalty": 0.0,
    "advantage_learning": 0.0,
    "bn_momentum": 0.1,
    "batch_renorm": False,
    "augment_shift": 0,
    "exploration": "epsilon",
    "ez_mu": 2.0,
    "ez_max_steps": 32,
    "prev_action_input": False,
    "frontier_point_episodes": 1,
    "batch_norm": True,
    "grad_accum": 1,
    "steadiness_probe_states": 1024,
    "steadiness_batchings": 4,
    "weights_check_steps": 200,
    "model_update_frequency": 1,
    "priority_beta_start": 0.4,
    "priority_beta_frames": 2000000,
    "adam_eps": 0.00015,  # as json writes 1.5e-4
    "eval_final_timeout_s": 600.0,
    "keep_checkpoints": 3,
    "reset_shrink": 0.8,
    "steadiness_interval_updates": 2000,
}


# HOUSE_REMOVAL's options as the code at pre-house-removal saved them by default.
SAVED_AT_THE_HOUSE_TAG = {
    "target_tau": 0.0,
    "reset_interval_updates": 0,
    "grad_clip": 10.0,
    "epsilon_start": 1.0,
    "prioritized_replay": False,
    "priority_alpha": 0.5,
    "flag_bonus": 0.0,
    "frontier_start_points": "uniform",
    "jump_retrigger": False,
    "dueling": True,
}


# The runs in progress at the tag, at the defaults of the time where today's differ.
AT_THE_TAG = Config(frontier_start_share=0.5, action_set="simple", bn_calibration_states=256, quantiles=0)


def saved(**changes: object) -> dict[str, object]:
    """A checkpoint's config from before the removal: today's fields, at the values the
    runs of the time were trained with, and the removed ones."""
    return {**AT_THE_TAG.to_dict(), **SAVED_AT_THE_TAG, **changes}


def refusal(name: str, value: object, what: str = "", tag: str = "pre-option-removal", commit: str = "8669a59") -> str:
    option = f"{name}={value!r}" + (f" ({what})" if what else "")
    return (
        f"checkpoint runs/x/final.pt was trained with {option}, an option removed after the tag "
        f"{tag} (commit {commit}); check out that tag to resume or evaluate it"
    )


def test_the_table_names_exactly_the_removed_fields() -> None:
    assert REMOVALS == (
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
    # Each tag's commit (git rev-parse --short TAG): the last one that has its options.
    assert (OPTION_REMOVAL.tag, OPTION_REMOVAL.commit) == ("pre-option-removal", "8669a59")
    assert (EXPECTED_SARSA_REMOVAL.tag, EXPECTED_SARSA_REMOVAL.commit) == ("pre-expected-sarsa-removal", "ce2eee8")
    assert (EPSILON_SCHEDULE_REMOVAL.tag, EPSILON_SCHEDULE_REMOVAL.commit) == (
        "pre-epsilon-schedule-removal",
        "6b6114e",
    )
    assert (HOUSE_REMOVAL.tag, HOUSE_REMOVAL.commit) == ("pre-house-removal", "6412b6a")
    assert set(OPTION_REMOVAL.options) == set(SAVED_AT_THE_TAG)
    assert dict(EXPECTED_SARSA_REMOVAL.options) == {"bootstrap_epsilon": 0.0}  # 0: the greedy bootstrap
    assert dict(EPSILON_SCHEDULE_REMOVAL.options) == {"epsilon_schedule": "linear"}
    assert set(HOUSE_REMOVAL.options) == set(SAVED_AT_THE_HOUSE_TAG)
    assert (HELD_JUMP_REMOVAL.tag, HELD_JUMP_REMOVAL.commit) == ("pre-held-jump-removal", "5fca07e")
    assert dict(HELD_JUMP_REMOVAL.options) == {"held_jump": False}  # the plain joypad
    assert (FULL_JUMP_REMOVAL.tag, FULL_JUMP_REMOVAL.commit) == ("pre-full-jump-removal", "07adb1f")
    assert not FULL_JUMP_REMOVAL.options and set(FULL_JUMP_REMOVAL.retired) == {"action_set"}  # a value, not a field
    assert (EXPLORE_HOLD_REMOVAL.tag, EXPLORE_HOLD_REMOVAL.commit) == ("pre-explore-hold-removal", "75bcb34")
    assert dict(EXPLORE_HOLD_REMOVAL.options) == {"explore_hold_steps": 1}  # epsilon-greedy
    assert (REPLAY_SWITCH_REMOVAL.tag, REPLAY_SWITCH_REMOVAL.commit) == ("pre-replay-switch-removal", "aa23839")
    assert dict(REPLAY_SWITCH_REMOVAL.options) == {"save_replay": ANY_VALUE}  # never a learning setting
    assert (FAILURES_DRAW_REMOVAL.tag, FAILURES_DRAW_REMOVAL.commit) == ("pre-failures-draw-removal", "d2e48bb")
    assert dict(FAILURES_DRAW_REMOVAL.options) == {"frontier_start_draw": "uniform"}
    assert (STICKY_TRAINING_REMOVAL.tag, STICKY_TRAINING_REMOVAL.commit) == ("pre-sticky-training-removal", "88dd852")
    assert dict(STICKY_TRAINING_REMOVAL.options) == {"sticky_actions": 0.0}  # runs train without them
    every = (
        OPTION_REMOVAL,
        EXPECTED_SARSA_REMOVAL,
        EPSILON_SCHEDULE_REMOVAL,
        HOUSE_REMOVAL,
        HELD_JUMP_REMOVAL,
        EXPLORE_HOLD_REMOVAL,
        REPLAY_SWITCH_REMOVAL,
        FAILURES_DRAW_REMOVAL,
        STICKY_TRAINING_REMOVAL,
    )
    assert {name: now for removal in every for name, now in removal.options.items()} == REMOVED
    assert set(RETIRED) == set(OPTION_REMOVAL.retired) | set(FULL_JUMP_REMOVAL.retired)
    assert not set(REMOVED) & FIELD_NAMES  # none is a field any more
    assert set(RETIRED) <= FIELD_NAMES  # a retired value belongs to a field that stays
    assert not set(REMOVED) & set(SAVED_BEFORE)  # one home: a removed option's value is here only


def test_the_runs_in_progress_load_as_they_were_trained() -> None:
    values = saved()
    assert removed_setting(values) is None
    cfg = Config.from_dict(values, source="checkpoint runs/x/final.pt")
    assert cfg.frontier_start_share == 0.5 and cfg.bn_calibration_states == 256
    assert cfg.to_dict() == {k: v for k, v in values.items() if k in FIELD_NAMES}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("batch_renorm", True),  # a switch
        ("advantage_learning", 0.9),  # a number of a lost option
        ("exploration", "ez"),  # a choice
        ("grad_accum", 2),  # a fixed value
        ("eval_final_timeout_s", 0.0),
    ],
)
def test_a_removed_option_at_another_value_is_refused_in_one_line(name: str, value: object) -> None:
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(**{name: value}), source="checkpoint runs/x/final.pt")
    assert str(info.value) == refusal(name, value)
    assert isinstance(info.value, ConfigError)  # main.py prints it as one line, exit 2


def test_an_option_that_acted_only_through_a_refused_one_loads_at_any_value() -> None:
    assert REMOVED["bn_momentum"] is ANY_VALUE and REMOVED["ez_mu"] is ANY_VALUE
    cfg = Config.from_dict(saved(bn_momentum=0.01, ez_mu=3.0, ez_max_steps=8))
    assert cfg.bn_calibration_states == 256
    with pytest.raises(RemovedOptionError, match="exploration='ez'"):
        Config.from_dict(saved(exploration="ez", ez_mu=3.0))
    # The shrink of resets that were off: any value trained as today.
    assert REMOVED["reset_shrink"] is ANY_VALUE
    assert Config.from_dict(saved(reset_shrink=0.5, reset_interval_updates=0)).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError, match="reset_interval_updates=1000"):
        Config.from_dict(saved(reset_shrink=0.5, reset_interval_updates=1000))


def test_a_checkpoint_of_the_greedy_bootstrap_loads_and_one_of_expected_sarsa_names_its_own_tag() -> None:
    """Runs saved between the two removals hold bootstrap_epsilon: at 0 (every default run,
    the agent shipped until QR-DQN included) they trained as the code does today."""
    assert Config.from_dict(saved(bootstrap_epsilon=0.0)).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(bootstrap_epsilon=0.05), source="checkpoint runs/x/final.pt")
    assert str(info.value) == refusal("bootstrap_epsilon", 0.05, tag="pre-expected-sarsa-removal", commit="ce2eee8")


def test_the_running_average_batchnorm_is_refused_saved_or_implied() -> None:
    what = RETIRED["bn_calibration_states"][1]
    assert "bn_momentum" in what
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(bn_calibration_states=0), source="checkpoint runs/x/final.pt")
    assert str(info.value) == refusal("bn_calibration_states", 0, what)
    # A checkpoint from before precise BN existed has no bn_calibration_states: it ran the average.
    older = {k: v for k, v in saved().items() if k != "bn_calibration_states"}
    with pytest.raises(RemovedOptionError, match="bn_calibration_states=0"):
        Config.from_dict(older)


def test_a_config_without_a_removed_field_had_todays_behaviour() -> None:
    values = {k: v for k, v in saved().items() if k not in ("prev_action_input", "batch_norm", "exploration")}
    assert Config.from_dict(values).to_dict() == AT_THE_TAG.to_dict()


def test_check_saved_names_its_source() -> None:
    check_saved({"batch_norm": True}, "anything")
    with pytest.raises(RemovedOptionError, match=r"^mark frames-000100000\.pt was trained with batch_norm=False"):
        check_saved({"batch_norm": False}, "mark frames-000100000.pt")


def test_the_fixed_values_are_the_ones_the_code_uses() -> None:
    from pipeline.learning import update
    from pipeline.run import pacing
    from pipeline.run.collector import collector_main as collector
    from pipeline.run.trainer import checkpoints, shutdown, steadiness_watch

    assert REMOVED["adam_eps"] == update.ADAM_EPS
    assert REMOVED["grad_clip"] == update.GRAD_CLIP
    assert REMOVED["epsilon_start"] == pacing.EPSILON_START
    assert REMOVED["weights_check_steps"] == collector.WEIGHTS_CHECK_STEPS
    assert REMOVED["eval_final_timeout_s"] == shutdown.FINAL_EVALUATION_TIMEOUT_S
    assert REMOVED["keep_checkpoints"] == checkpoints.KEEP_CHECKPOINTS
    assert REMOVED["steadiness_probe_states"] == steadiness_watch.PROBE_STATES
    assert REMOVED["steadiness_batchings"] == steadiness_watch.BATCHINGS


def test_from_dict_still_drops_unknown_names_and_fills_saved_before() -> None:
    values = dataclasses.asdict(Config())
    values["a_name_never_used"] = 1
    del values["frontier_demo_steps"]
    cfg = Config.from_dict(values)
    assert cfg.frontier_demo_steps == SAVED_BEFORE["frontier_demo_steps"]


def test_a_network_saved_before_quantiles_existed_is_the_q_value_learner_it_was() -> None:
    """The default learns quantiles now; a checkpoint, mark or export from before the field
    (every Q-value run, the agent shipped until then) has no ``quantiles`` and was trained
    with Q-values, so it loads as a Q-value network, not as today's default shape."""
    values = dataclasses.asdict(Config())
    assert values["quantiles"] == 32
    del values["quantiles"]
    assert Config.from_dict(values).quantiles == SAVED_BEFORE["quantiles"] == 0


def test_a_checkpoint_of_the_linear_schedule_loads_and_one_of_the_exponential_names_its_own_tag() -> None:
    assert Config.from_dict(saved(epsilon_schedule="linear")).epsilon_decay_frames == saved()["epsilon_decay_frames"]
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(epsilon_schedule="exponential"), source="checkpoint runs/x/final.pt")
    expected = refusal("epsilon_schedule", "exponential", tag="pre-epsilon-schedule-removal", commit="6b6114e")
    assert str(info.value) == expected


def test_a_checkpoint_at_the_house_removal_values_loads_and_one_past_them_names_its_tag() -> None:
    """Runs saved at pre-house-removal hold its options: at the values the code now always
    behaves as (every default run) they load as they were trained; at another one they were
    trained by code that is gone."""
    assert Config.from_dict(saved(**SAVED_AT_THE_HOUSE_TAG)).to_dict() == AT_THE_TAG.to_dict()
    # priority_alpha acted only through prioritized replay: any value of it loads.
    assert (
        Config.from_dict(saved(**{**SAVED_AT_THE_HOUSE_TAG, "priority_alpha": 0.7})).to_dict() == AT_THE_TAG.to_dict()
    )
    for name, value in (
        ("target_tau", 0.01),
        ("reset_interval_updates", 1000),
        ("grad_clip", 1.0),
        ("prioritized_replay", True),
        ("flag_bonus", 50.0),
        ("frontier_start_points", "ends"),
        ("jump_retrigger", True),
        ("dueling", False),
    ):
        with pytest.raises(RemovedOptionError) as info:
            Config.from_dict(saved(**{**SAVED_AT_THE_HOUSE_TAG, name: value}), source="checkpoint runs/x/final.pt")
        assert str(info.value) == refusal(name, value, tag="pre-house-removal", commit="6412b6a")


def test_a_run_with_every_jump_held_is_refused_naming_its_commit_and_one_without_loads() -> None:
    assert Config.from_dict(saved(held_jump=False)).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(held_jump=True), source="checkpoint runs/x/final.pt")
    assert str(info.value) == refusal("held_jump", True, tag="pre-held-jump-removal", commit="5fca07e")


def test_a_run_with_full_jumps_beside_the_hops_is_refused_naming_its_commit() -> None:
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(action_set="right_only_full"), source="checkpoint runs/x/final.pt")
    what = "full jumps beside the hops, envs.controller.FullJump"
    expected = refusal("action_set", "right_only_full", what, tag="pre-full-jump-removal", commit="07adb1f")
    assert str(info.value) == expected


def test_a_run_with_held_random_actions_is_refused_naming_its_commit_and_one_without_loads() -> None:
    assert Config.from_dict(saved(explore_hold_steps=1)).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(explore_hold_steps=8), source="checkpoint runs/x/final.pt")
    assert str(info.value) == refusal("explore_hold_steps", 8, tag="pre-explore-hold-removal", commit="75bcb34")


@pytest.mark.parametrize("save_replay", [True, False])
def test_a_run_saved_with_either_replay_switch_loads_as_todays_run(save_replay: bool) -> None:
    assert Config.from_dict(saved(save_replay=save_replay)).to_dict() == AT_THE_TAG.to_dict()


def test_a_run_with_restarts_drawn_where_they_fail_is_refused_naming_its_commit() -> None:
    assert Config.from_dict(saved(frontier_start_draw="uniform")).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(frontier_start_draw="failures"), source="checkpoint runs/x/final.pt")
    expected = refusal("frontier_start_draw", "failures", tag="pre-failures-draw-removal", commit="d2e48bb")
    assert str(info.value) == expected


def test_a_run_trained_with_sticky_actions_is_refused_naming_its_commit() -> None:
    assert Config.from_dict(saved(sticky_actions=0.0)).to_dict() == AT_THE_TAG.to_dict()
    with pytest.raises(RemovedOptionError) as info:
        Config.from_dict(saved(sticky_actions=0.25), source="checkpoint runs/x/final.pt")
    expected = refusal("sticky_actions", 0.25, tag="pre-sticky-training-removal", commit="88dd852")
    assert str(info.value) == expected
