"""Tests for envs.ids: the id parser agrees with the package's own gym registrations."""

from __future__ import annotations

import pytest

from envs.ids import CATCH_ID, ENV_ID_HELP, ENV_IDS, EnvIdError, parse_env_id, validate_env_id


def _registrations() -> dict[str, dict]:
    """The kwargs of every Super Mario Bros 1 id (SMB1 and Lost Levels, the dashed
    spelling) that gym_super_mario_bros registers with gymnasium."""
    import gym_super_mario_bros  # noqa: F401  (registers the ids)
    import gymnasium

    return {
        env_id: dict(spec.kwargs)
        for env_id, spec in gymnasium.envs.registry.items()
        if spec.entry_point == "gym_super_mario_bros:SuperMarioBrosEnv"
        and (env_id.startswith("SuperMarioBros-") or env_id == "SuperMarioBros2-v0")
    }


def test_env_ids_are_the_package_ids_plus_random_stages_and_catch() -> None:
    registered = set(_registrations())
    assert len(registered) == 2 + 8 * 4
    assert set(ENV_IDS) == registered | {"SuperMarioBrosRandomStages-v0", CATCH_ID}
    assert len(ENV_IDS) == len(set(ENV_IDS))


def test_parser_matches_package_registration_kwargs() -> None:
    for env_id, kwargs in _registrations().items():
        spec = parse_env_id(env_id)
        assert spec.target == kwargs.get("target"), env_id
        assert spec.lost_levels == kwargs.get("lost_levels", False), env_id
        assert spec.kind == "mario", env_id


@pytest.mark.parametrize(
    ("env_id", "rom"),
    [
        ("SuperMarioBros-1-1-v1", "downsample"),
        ("SuperMarioBros-v2", "pixel"),
        ("SuperMarioBrosRandomStages-v3", "rectangle"),
    ],
)
def test_ids_of_the_rom_hacks_the_package_dropped_are_refused_in_one_line(env_id: str, rom: str) -> None:
    with pytest.raises(EnvIdError) as excinfo:
        validate_env_id(env_id)
    message = str(excinfo.value)
    assert "\n" not in message and rom in message and "no longer ships" in message
    assert f"use e.g. {env_id[:-1]}0" in message


def test_catch_id() -> None:
    assert parse_env_id("Catch-v0").kind == "catch"


@pytest.mark.parametrize(
    ("env_id", "reason"),
    [
        ("SuperMarioBros-9-1-v0", "world must be 1-8"),
        ("SuperMarioBros-0-1-v0", "world must be 1-8"),
        ("SuperMarioBros-1-5-v0", "stage 1-4"),
        ("SuperMarioBros-1-1-v9", "version v9"),
        ("SuperMarioBros2-v4", "version v4"),
        ("SuperMarioBros-v4", "version v4"),
        ("Foo-v0", "not a Super Mario Bros or Catch id"),
        ("SuperMarioBros-01-1-v0", "not a Super Mario Bros or Catch id"),
        ("superMarioBros-1-1-v0", "not a Super Mario Bros or Catch id"),
        ("Catch-v1", "not a Super Mario Bros or Catch id"),
        ("", "not a Super Mario Bros or Catch id"),
    ],
)
def test_invalid_ids_raise_with_the_value_and_reason(env_id: str, reason: str) -> None:
    with pytest.raises(EnvIdError) as excinfo:
        validate_env_id(env_id)
    message = str(excinfo.value)
    assert repr(env_id) in message
    assert reason in message
    assert "use e.g. " in message  # every message shows a valid id to use instead


def test_env_id_error_is_a_value_error() -> None:
    assert issubclass(EnvIdError, ValueError)
    with pytest.raises(ValueError):
        validate_env_id(123)  # type: ignore[arg-type]


def test_every_listed_id_validates_and_help_names_each_family() -> None:
    for env_id in ENV_IDS:
        validate_env_id(env_id)
    families = ("SuperMarioBros-<world>-<stage>", "SuperMarioBrosRandomStages", "SuperMarioBros2", CATCH_ID)
    for family in families:
        assert family in ENV_ID_HELP
