"""Environment ids: parsing, validation and the list of accepted ids.

The Mario ids replicate the naming that ``gym_super_mario_bros/_registration.py``
registers with legacy gym (the version suffix ``v0..v3`` selects the ROM hack
vanilla / downsample / pixel / rectangle), but they are parsed here instead of going
through ``gym.make``: the legacy registry pulls in gym's env checker, which breaks on
these environments, and parsing needs no emulator (so ids can be validated cheaply in
any process, e.g. a CLI before it spawns workers).

``Catch-v0`` is the synthetic test game from :mod:`envs.catch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# ROM hack for each version suffix, in the package's own order (v0, v1, v2, v3).
ROM_MODES: tuple[str, ...] = ("vanilla", "downsample", "pixel", "rectangle")
# Lost Levels only ships the vanilla and downsample ROMs.
LOST_LEVELS_ROM_MODES: tuple[str, ...] = ("vanilla", "downsample")
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
        rom_mode: ROM hack for Mario ids (None for Catch).
        lost_levels: True for Super Mario Bros. 2 (Lost Levels).
        target: (world, stage) for a single-stage env; None for the full game,
            random stages and Catch.
    """

    env_id: str
    kind: EnvKind
    rom_mode: str | None = None
    lost_levels: bool = False
    target: tuple[int, int] | None = None


_EXAMPLES = f"use e.g. SuperMarioBros-1-1-v0, SuperMarioBros-v0 or {CATCH_ID}"

# Numbers without leading zeros, like the registered ids ("SuperMarioBros-01-1-v0" is unknown).
_NUM = r"(0|[1-9]\d*)"
_STAGE_RE = re.compile(rf"SuperMarioBros-{_NUM}-{_NUM}-v{_NUM}")
_GAME_RE = re.compile(rf"(SuperMarioBros|SuperMarioBros2|SuperMarioBrosRandomStages)-v{_NUM}")


def _rom_mode(env_id: str, version: str, modes: tuple[str, ...]) -> str:
    """Map a version suffix to its ROM mode, or raise naming the allowed suffixes."""
    index = int(version)
    if index >= len(modes):
        allowed = ", ".join(f"v{i}" for i in range(len(modes)))
        raise EnvIdError(
            f"unknown env id {env_id!r}: version v{version} does not exist for this game; "
            f"versions are {allowed} (ROM modes {', '.join(modes)}); "
            f"use e.g. {env_id[: -len(version)]}0"
        )
    return modes[index]


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
        rom_mode = _rom_mode(env_id, version, ROM_MODES)
        return EnvSpec(env_id=env_id, kind="mario", rom_mode=rom_mode, target=(int(world), int(stage)))

    game_match = _GAME_RE.fullmatch(env_id)
    if game_match is not None:
        game, version = game_match.groups()
        if game == "SuperMarioBros2":
            rom_mode = _rom_mode(env_id, version, LOST_LEVELS_ROM_MODES)
            return EnvSpec(env_id=env_id, kind="mario", rom_mode=rom_mode, lost_levels=True)
        rom_mode = _rom_mode(env_id, version, ROM_MODES)
        kind: EnvKind = "mario_random_stages" if game == "SuperMarioBrosRandomStages" else "mario"
        return EnvSpec(env_id=env_id, kind=kind, rom_mode=rom_mode)

    raise EnvIdError(f"unknown env id {env_id!r}: not a Super Mario Bros or Catch id; {_EXAMPLES}")


def validate_env_id(env_id: str) -> None:
    """Raise :class:`EnvIdError` if ``env_id`` names no environment; return None otherwise."""
    parse_env_id(env_id)


def _all_env_ids() -> tuple[str, ...]:
    """Enumerate every accepted id (mirrors the package's registration loops)."""
    ids: list[str] = [f"SuperMarioBros-v{v}" for v in range(len(ROM_MODES))]
    ids += [f"SuperMarioBrosRandomStages-v{v}" for v in range(len(ROM_MODES))]
    ids += [f"SuperMarioBros2-v{v}" for v in range(len(LOST_LEVELS_ROM_MODES))]
    ids += [
        f"SuperMarioBros-{world}-{stage}-v{v}" for v in range(len(ROM_MODES)) for world in WORLDS for stage in STAGES
    ]
    ids.append(CATCH_ID)
    return tuple(ids)


ENV_IDS: tuple[str, ...] = _all_env_ids()

ENV_ID_HELP: str = (
    "Environment ids:\n"
    "  SuperMarioBros-<world>-<stage>-v<n>  one stage, world 1-8, stage 1-4 "
    "(episode ends when Mario dies or gets the flag)\n"
    "  SuperMarioBros-v<n>                  the full game (episode ends at game over)\n"
    "  SuperMarioBrosRandomStages-v<n>      a random stage each episode\n"
    "  SuperMarioBros2-v<0|1>               Super Mario Bros. 2 (Lost Levels), full game\n"
    "  where v0..v3 select the ROM: vanilla, downsample, pixel, rectangle\n"
    f"  {CATCH_ID}                             synthetic 84x84 Catch game (3 actions) for fast checks"
)
