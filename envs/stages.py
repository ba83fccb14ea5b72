"""Stages: the list a random-stages env draws from, the stages an evaluation covers, and
where each stage of World 1 ends.

A run on ``SuperMarioBrosRandomStages-v<n>`` draws a stage at every reset: from all 32
stages, or from the list its ``stages`` setting gives ("1-1,1-2,1-3,1-4": one network for
World 1). :func:`parse_stages` reads such a list and refuses, with the rule and the fix,
an empty list, a stage that does not exist and a stage given twice;
:func:`check_stages` also refuses a list given with an id that draws no stage.

Evaluation plays every stage of the run on its own (:func:`evaluation_stages`): the fixed
id of each stage with the whole protocol, so every stage gets its figures.

:data:`STAGE_ENDS` says where each stage of World 1 ends, as the x_pos at which the env's
``info["flag_get"]`` turns true, so "how far along" (:func:`along`) is x_pos over that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envs.ids import STAGES, WORLDS, parse_env_id

Stage = tuple[int, int]  # (world, stage)

STAGES_EXAMPLE = "1-1,1-2,1-3,1-4"
_STAGE_RE = re.compile(r"(\d+)-(\d+)")


class StagesError(ValueError):
    """A stage list that names no set of stages; ``rule`` says what is wrong, ``fix`` how to
    fix it (config validation puts them in its one line)."""

    def __init__(self, rule: str, fix: str) -> None:
        super().__init__(f"{rule}; {fix}")
        self.rule = rule
        self.fix = fix


def stage_name(stage: Stage) -> str:
    """``(1, 2)`` -> ``"1-2"``, the package's spelling."""
    return f"{stage[0]}-{stage[1]}"


def parse_stage(text: str) -> Stage:
    """Parse one "world-stage" such as "1-2"; raise :class:`StagesError` for anything else."""
    match = _STAGE_RE.fullmatch(text.strip())
    if match is None:
        raise StagesError(f"{text.strip()!r} is not a stage", f"write stages as world-stage, e.g. {STAGES_EXAMPLE}")
    world, stage = int(match.group(1)), int(match.group(2))
    if world not in WORLDS or stage not in STAGES:
        raise StagesError(
            f"stage {text.strip()!r} does not exist (worlds 1-8, stages 1-4)", f"use e.g. {STAGES_EXAMPLE}"
        )
    return world, stage


def parse_stages(text: str) -> tuple[Stage, ...]:
    """Parse a comma-separated stage list ("1-1,1-2"); "" is every stage (an empty tuple).

    Raises:
        StagesError: nothing but commas or spaces, a stage that does not exist, a stage
            given twice.
    """
    if text == "":
        return ()
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise StagesError(
            "lists no stage", f"list stages as world-stage separated by commas, e.g. {STAGES_EXAMPLE}, or '' for all"
        )
    if "" in parts:
        raise StagesError("has an empty entry between commas", f"write e.g. {STAGES_EXAMPLE}")
    stages = tuple(parse_stage(part) for part in parts)
    seen: set[Stage] = set()
    for stage in stages:
        if stage in seen:
            raise StagesError(f"lists {stage_name(stage)} twice", "give each stage once")
        seen.add(stage)
    return stages


def check_stages(env_id: str, text: str) -> tuple[Stage, ...]:
    """:func:`parse_stages`, and refuse a list with an id that draws no stage at its resets.

    ``env_id`` must be valid (:func:`envs.ids.parse_env_id` raises otherwise).
    """
    stages = parse_stages(text)
    if stages and parse_env_id(env_id).kind != "mario_random_stages":
        raise StagesError(
            f"only applies to SuperMarioBrosRandomStages ids, not {env_id!r}",
            f"use --env SuperMarioBrosRandomStages-v0 with it, or drop stages (stages='') for {env_id}",
        )
    return stages


def stage_env_id(env_id: str, stage: Stage) -> str:
    """The fixed-stage id of ``stage`` with the ROM version of ``env_id``
    ("SuperMarioBrosRandomStages-v0", (1, 2) -> "SuperMarioBros-1-2-v0")."""
    version = env_id.rsplit("-v", 1)[1]
    return f"SuperMarioBros-{stage_name(stage)}-v{version}"


def evaluation_stages(env_id: str, stages: str = "") -> list[tuple[str, str]]:
    """The (stage name, env id) pairs that evaluate a policy on ``env_id`` with ``stages``.

    A fixed stage is itself (``[("1-1", env_id)]``); random stages are each stage of the
    list (all 32 without one), each played as its fixed id; the full game and Catch have
    no one stage (``[("", env_id)]``).
    """
    spec = parse_env_id(env_id)
    if spec.kind == "mario_random_stages":
        chosen = check_stages(env_id, stages) or tuple((w, s) for w in WORLDS for s in STAGES)
        return [(stage_name(stage), stage_env_id(env_id, stage)) for stage in chosen]
    check_stages(env_id, stages)
    return [(stage_name(spec.target) if spec.target is not None else "", env_id)]


@dataclass(frozen=True)
class StageEnd:
    """Where a stage ends for the env.

    Attributes:
        end_x: x_pos at which ``flag_get`` turns true when the stage is finished.
        ends_at: what finishes it.
        source: where the number comes from.
    """

    end_x: int
    ends_at: str
    source: str


# smb_env.py: x_pos is Mario's level x, RAM 0x6D * 256 + 0x86 (page and x in the page);
# flag_get is true when a Bowser (0x2D) or flagpole (0x31) enemy is loaded and Mario's
# float state (0x1D) is 3 (sliding down the pole), or when the game mode (0x770) is 2,
# the end of a world, which touching the axe sets. The end objects' x below come from each
# stage's area data in the ROM (read at the pointer the game keeps in RAM 0xE7/0xE8 once
# the stage is loaded: page * 256 + column * 16 of the flagpole, exit pipe or axe object).
# Each end_x was then measured with the emulator (vanilla ROM): Mario was started on a
# late page of the stage (the halfway page, RAM 0x75B, written before the stage loads)
# and driven to the end by random button presses with save-state retries; end_x is the
# x_pos of the step where flag_get turned true. 1-1's figure is also that of every flagged
# episode in docs/learning-history.md.
STAGE_ENDS: dict[Stage, StageEnd] = {
    (1, 1): StageEnd(3161, "flag", "flagpole object at x 3168; flag_get at x_pos 3161"),
    # The exit pipe leads into 1-1's own ground area at page 11 (its last pipe, staircase
    # and flagpole), so x_pos runs on: about 2643 into the pipe, 2872 out of it, the flag
    # at 1-1's 3161. The warp-zone pipes past the exit pipe lead to other worlds, no flag.
    (1, 2): StageEnd(
        3161,
        "exit pipe, then flag",
        "exit pipe object at x 2656 (entered at x_pos 2643, left at 2872 in 1-1's area); flag_get at x_pos 3161",
    ),
    (1, 3): StageEnd(2425, "flag", "flagpole object at x 2432; flag_get at x_pos 2425 (7 px before it, as on 1-1)"),
    # Touching the axe ends the stage a few pixels apart depending on how Mario gets there
    # (2247, 2250, 2252 walking or hopping along the bridge, 2259 jumping over Bowser):
    # end_x is the earliest, and along() counts anything past it as the end.
    (1, 4): StageEnd(2247, "axe (Bowser's bridge)", "axe object at x 2256; flag_get at x_pos 2247 to 2259"),
}


def stage_end(stage: Stage | str) -> StageEnd | None:
    """The end of ``stage`` ((1, 2) or "1-2"), or None where it is not recorded."""
    if isinstance(stage, str):
        if not stage:
            return None
        stage = parse_stage(stage)
    return STAGE_ENDS.get(stage)


def along(stage: Stage | str, x_pos: float) -> float | None:
    """How far along ``stage`` an x_pos is: x_pos over the stage's end_x, at most 1.0 (the
    end); None for a stage whose end is not recorded (or no stage, "")."""
    end = stage_end(stage)
    if end is None:
        return None
    return min(x_pos / end.end_x, 1.0)
