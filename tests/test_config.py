"""config.py: precedence, presets, provenance, and validation that names every problem."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import config
from config import PRESETS, Config, ConfigError, validate
from configuration.resolution import Hardware, auto_preset, resolve_config
from pipeline.transport.records import TRANSITION_BYTES

CPU_BOX = Hardware(cores=2, memory_gb=24.0, gpu=False)


def test_precedence_command_line_over_knobs_over_preset_over_defaults():
    resolved = resolve_config({"batch_size": 48}, preset="laptop", knobs={"batch_size": 40, "num_processes": 3})
    cfg = resolved.config
    assert cfg.batch_size == 48 and resolved.sources["batch_size"] == "command line"
    assert cfg.num_processes == 3 and resolved.sources["num_processes"] == "config.py knob"
    assert cfg.replay_capacity == PRESETS["laptop"]["replay_capacity"]
    assert resolved.sources["replay_capacity"].startswith("preset")
    assert cfg.gamma == Config().gamma and resolved.sources["gamma"] == "default"


def test_none_knobs_keep_the_preset_value():
    resolved = resolve_config({}, preset="cpu", knobs={"batch_size": None, "num_processes": None})
    assert resolved.config.batch_size == PRESETS["cpu"]["batch_size"]
    assert resolved.config.num_processes == PRESETS["cpu"]["num_processes"]


def test_module_knobs_are_read(monkeypatch):
    monkeypatch.setattr(config, "NUM_PROCESSES", 5)
    monkeypatch.setattr(config, "PRESET", "cpu")
    resolved = resolve_config({})
    assert resolved.config.num_processes == 5 and resolved.preset == "cpu"


def test_every_knob_at_the_top_of_config_sets_the_field_of_its_name():
    """The knobs are the module's capitalised settings left at None; each field that has
    one is marked, and KNOBS is read from those marks: a knob added without its mark (or a
    mark without its knob) fails here."""
    knobs = {name for name, value in vars(config).items() if name.isupper() and value is None}
    assert knobs == set(config.KNOBS) == {"NUM_PROCESSES", "BATCH_SIZE", "ENV_ID", "TOTAL_FRAMES", "BACKEND"}
    assert all(field == knob.lower() for knob, field in config.KNOBS.items())


@pytest.mark.parametrize("name", ["cpu", "laptop", "desktop", "server", "tiny"])
def test_every_preset_is_valid_and_resolves_to_its_own_values(name):
    resolved = resolve_config({}, preset=name, knobs={})
    assert resolved.preset == name
    for field, value in PRESETS[name].items():
        assert getattr(resolved.config, field) == value, field
        assert resolved.sources[field].startswith("preset") and resolved.sources[field].endswith(name), field


def test_auto_preset_follows_the_hardware():
    name, values = auto_preset(CPU_BOX)
    assert name == "cpu" and values["num_processes"] == 1
    name, values = auto_preset(Hardware(cores=32, memory_gb=256, gpu=True))
    assert name == "server" and values["num_processes"] == 31
    name, values = auto_preset(Hardware(cores=4, memory_gb=1.0, gpu=False))
    assert name == "laptop" and values["replay_capacity"] == int(2**30 / 4 / TRANSITION_BYTES)  # a quarter of the RAM
    name, values = auto_preset(Hardware(cores=4, memory_gb=0.1, gpu=False))
    assert values["replay_capacity"] == 10_000  # never below the floor
    resolved = resolve_config({}, preset="auto", knobs={}, hardware=CPU_BOX)
    assert resolved.preset == "auto -> cpu"


def test_describe_lists_every_field_with_its_source():
    text = resolve_config({"seed": 3}, preset="tiny", knobs={}).describe()
    for field in dataclasses.fields(Config):
        assert field.name in text
    assert "command line" in text and "preset" in text


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"num_processes": 0}, "num_processes", ">= 1"),
        ({"batch_size": -4}, "batch_size", ">= 1"),
        ({"batch_size": 5000, "replay_capacity": 4000}, "batch_size", "must not exceed replay_capacity"),
        ({"env_id": "SuperMarioBros-9-1-v0"}, "env_id", "SuperMarioBros-9-1-v0"),
        ({"gamma": 1.5}, "gamma", "(0, 1]"),
        ({"acting_tau": -0.1}, "acting_tau", "[0, 1]"),
        ({"quantiles": 1}, "quantiles", "must be 0 or >= 2"),
        ({"collector_niceness": 20}, "collector_niceness", "must be 0-19"),
        ({"collector_niceness": -1}, "collector_niceness", ">= 0"),
        ({"learner_threads_max": -2}, "learner_threads_max", ">= 0"),
        ({"action_set": "everything"}, "action_set", "right_only"),
        ({"flag_reward": -1.0, "env_id": "SuperMarioBros-1-1-v0"}, "flag_reward", "finite number >= 0"),
        ({"flag_reward": float("inf"), "env_id": "SuperMarioBros-1-1-v0"}, "flag_reward", "finite number >= 0"),
        ({"flag_reward": 500.0}, "flag_reward", "applies to Mario ids only"),  # the tiny preset's Catch
        ({"learning_rate": float("nan")}, "learning_rate", "float"),
        ({"num_processes": True}, "num_processes", "int"),
        ({"eval_interval_frames": -5}, "eval_interval_frames", ">= 0"),
        ({"eval_episodes": 0}, "eval_episodes", ">= 1"),
        ({"eval_max_lag_frames": -1}, "eval_max_lag_frames", "must be >= 0; use 0 to disable or a positive value"),
        ({"frontier_start_share": 1.0}, "frontier_start_share", "[0, 1)"),
        ({"frontier_start_share": 0.5}, "frontier_start_share", "Catch"),  # the tiny preset's env
        (
            {"frontier_trajectory": "runs/trajectories/SuperMarioBros-1-3-v0.npz", "env_id": "SuperMarioBros-1-3-v0"},
            "frontier_trajectory",
            "add --set frontier_start_share=0.5",
        ),
        (
            {"frontier_trajectory": "search", "frontier_start_share": 0.5, "env_id": "SuperMarioBros-1-3-v0"}
            | {"backend": "ray"},
            "frontier_trajectory",
            "copy the file to every node",
        ),
        ({"frontier_demo_steps": -1}, "frontier_demo_steps", "must be >= 0"),
        (
            {"frontier_demo_steps": 16, "env_id": "SuperMarioBros-1-3-v0"},
            "frontier_demo_steps",
            "add --set frontier_start_share=0.5",
        ),
        ({"bn_calibration_states": 0}, "bn_calibration_states", ">= 1"),  # the running average went
        ({"bn_calibration_states": -1}, "bn_calibration_states", "use 1024"),
        (
            {"frontier_start_share": 0.5, "env_id": "SuperMarioBrosRandomStages-v0"}
            | {"frontier_trajectory": "runs/trajectories/SuperMarioBros-1-3-v0.npz"},
            "frontier_trajectory",
            "use search (each stage searched at the run's start)",
        ),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": ","}, "stages=','", "lists no stage"),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": " "}, "stages=' '", "e.g. 1-1,1-2,1-3,1-4"),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": "1-1,1-5"}, "stages", "'1-5' does not exist"),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": "9-1"}, "stages", "'9-1' does not exist"),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": "a-b"}, "stages", "'a-b' is not a stage"),
        ({"env_id": "SuperMarioBrosRandomStages-v0", "stages": "1-2,1-2"}, "stages", "lists 1-2 twice"),
        (
            {"env_id": "SuperMarioBros-1-1-v0", "stages": "1-1,1-2"},
            "stages",
            "only applies to SuperMarioBrosRandomStages",
        ),
        ({"stages": "1-1"}, "stages", "drop stages"),  # the tiny preset's Catch-v0
    ],
)
def test_invalid_values_name_field_value_rule_and_fix(overrides, field, fragment):
    with pytest.raises(ConfigError) as info:
        resolve_config(overrides, preset="tiny", knobs={})
    message = str(info.value)
    assert "\n" not in message
    assert field in message and fragment in message


def test_frontier_starts_are_accepted_on_a_fixed_stage_the_full_game_and_random_stages():
    for env_id in ("SuperMarioBros-1-1-v0", "SuperMarioBros-v0", "SuperMarioBrosRandomStages-v0"):
        cfg = resolve_config({"frontier_start_share": 0.5, "env_id": env_id}, preset="cpu", knobs={}).config
        assert cfg.frontier_start_share == 0.5
    random_stages = {"env_id": "SuperMarioBrosRandomStages-v0", "stages": "1-1,1-3", "frontier_trajectory": "search"}
    cfg = resolve_config({"frontier_start_share": 0.5, **random_stages}, preset="cpu", knobs={}).config
    assert cfg.frontier_trajectory == "search"


def test_a_stage_list_is_accepted_with_random_stages_and_reaches_the_env_settings():
    overrides = {"env_id": "SuperMarioBrosRandomStages-v0", "stages": "1-1, 1-2,1-3,1-4"}
    cfg = resolve_config(overrides, preset="cpu", knobs={}).config
    assert cfg.env_kwargs()["stages"] == "1-1, 1-2,1-3,1-4"
    assert resolve_config({}, preset="cpu", knobs={}).config.env_kwargs()["stages"] == ""


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        resolve_config({"num_processes": 0, "batch_size": -1, "gamma": 2.0}, preset="tiny", knobs={})
    message = str(info.value)
    assert "3 problems" in message
    assert all(name in message for name in ("num_processes", "batch_size", "gamma"))


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        resolve_config({}, preset="huge", knobs={})


FIELD_VALUES = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(Config)]), FIELD_VALUES, max_size=6))
def test_fuzzed_configs_only_ever_raise_config_error(values):
    try:
        validate(dataclasses.replace(Config(env_id="Catch-v0"), **values))
    except ConfigError as exc:
        assert "\n" not in str(exc)
