"""Environment ids: parsing, validation and the list of accepted ids.

The Mario ids are the ones ``gym_super_mario_bros/_registration.py`` registers (``-v0``,
the vanilla ROM, the only one the package ships), plus ``SuperMarioBrosRandomStages-v0``,
which this project builds over fixed-stage emulators. They are parsed here instead of
going through ``gymnasium.make``: parsing needs no emulator, so ids can be validated
cheaply in any process, e.g. a CLI before it spawns workers. The ``-v1..-v3`` ids of
gym-super-mario-bros 7 (the downsample, pixel and rectangle ROM hacks) are refused with
one line: the maintained package no longer ships those ROMs.

``Catch-v0`` is the synthetic test game from :mod:`envs.catch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# The ROM hacks gym-super-mario-bros 7 selected with the version suffix v1..v3; version 9
# ships only the vanilla ROM (v0).
REMOVED_ROM_MODES: dict[int, str] = {1: "downsample", 2: "pixel", 3: "rectangle"}
WORLDS = range(1, 9)
STAGES = range(1, 5)

CATCH_ID = "Catch-v0"

EnvKind = Literal["mario", "mario_random_stages", "catch"]


class EnvIdError(ValueError):
    """An environment id that names no environment this package can build."""


@dataclass(frozen=True)
class EnvSpec:
    """What an env id asks for, in the terms of the constructors that build it.

    Attributes:
        env_id: the id as given.
        kind: which constructor builds it.
        lost_levels: True for Super Mario Bros. 2 (Lost Levels).
        target: (world, stage) for a single-stage env; None for the full game,
            random stages and Catch.
    """

    env_id: str
    kind: EnvKind
    lost_levels: bool = False
    target: tuple[int, int] | None = None


_EXAMPLES = f"use e.g. SuperMarioBros-1-1-v0, SuperMarioBros-v0 or {CATCH_ID}"

# Numbers without leading zeros, like the registered ids ("SuperMarioBros-01-1-v0" is unknown).
_NUM = r"(0|[1-9]\d*)"
_STAGE_RE = re.compile(rf"SuperMarioBros-{_NUM}-{_NUM}-v{_NUM}")
_GAME_RE = re.compile(rf"(SuperMarioBros|SuperMarioBros2|SuperMarioBrosRandomStages)-v{_NUM}")


def _check_version(env_id: str, version: str) -> None:
    """Accept ``v0``; refuse any other suffix in one line naming why and the id to use."""
    index = int(version)
    if index == 0:
        return
    fix = f"use e.g. {env_id[: -len(version)]}0"
    if index in REMOVED_ROM_MODES:
        raise EnvIdError(
            f"unknown env id {env_id!r}: v{version} selected the {REMOVED_ROM_MODES[index]} ROM hack, which "
            f"gym-super-mario-bros 9 no longer ships; {fix} (the vanilla ROM)"
        )
    raise EnvIdError(f"unknown env id {env_id!r}: version v{version} does not exist; {fix}")


def parse_env_id(env_id: str) -> EnvSpec:
    """Parse an env id into the constructor arguments it stands for.

    Raises:
        EnvIdError: the id is malformed or out of range; the message names the id,
            what was wrong with it and a valid example.
    """
    if not isinstance(env_id, str):
        raise EnvIdError(f"env id must be a string, got {env_id!r}; {_EXAMPLES}")
    if env_id == CATCH_ID:
        return EnvSpec(env_id=env_id, kind="catch")

    stage_match = _STAGE_RE.fullmatch(env_id)
    if stage_match is not None:
        world, stage, version = stage_match.groups()
        if int(world) not in WORLDS or int(stage) not in STAGES:
            raise EnvIdError(
                f"unknown env id {env_id!r}: world must be 1-8 and stage 1-4 "
                f"(got world {world}, stage {stage}); {_EXAMPLES}"
            )
        _check_version(env_id, version)
        return EnvSpec(env_id=env_id, kind="mario", target=(int(world), int(stage)))

    game_match = _GAME_RE.fullmatch(env_id)
    if game_match is not None:
        game, version = game_match.groups()
        _check_version(env_id, version)
        if game == "SuperMarioBros2":
            return EnvSpec(env_id=env_id, kind="mario", lost_levels=True)
        kind: EnvKind = "mario_random_stages" if game == "SuperMarioBrosRandomStages" else "mario"
        return EnvSpec(env_id=env_id, kind=kind)

    raise EnvIdError(f"unknown env id {env_id!r}: not a Super Mario Bros or Catch id; {_EXAMPLES}")


def validate_env_id(env_id: str) -> None:
    """Raise :class:`EnvIdError` if ``env_id`` names no environment; return None otherwise."""
    parse_env_id(env_id)


def _all_env_ids() -> tuple[str, ...]:
    """Enumerate every accepted id (mirrors the package's registration loops)."""
    ids: list[str] = ["SuperMarioBros-v0", "SuperMarioBrosRandomStages-v0", "SuperMarioBros2-v0"]
    ids += [f"SuperMarioBros-{world}-{stage}-v0" for world in WORLDS for stage in STAGES]
    ids.append(CATCH_ID)
    return tuple(ids)


ENV_IDS: tuple[str, ...] = _all_env_ids()

ENV_ID_HELP: str = (
    "Environment ids:\n"
    "  SuperMarioBros-<world>-<stage>-v0  one stage, world 1-8, stage 1-4 "
    "(episode ends when Mario dies or gets the flag)\n"
    "  SuperMarioBros-v0                  the full game (episode ends at game over)\n"
    "  SuperMarioBrosRandomStages-v0      a random stage each episode\n"
    "  SuperMarioBros2-v0                 Super Mario Bros. 2 (Lost Levels), full game\n"
    f"  {CATCH_ID}                           synthetic 84x84 Catch game (3 actions) for fast checks"
)
