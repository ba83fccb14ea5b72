"""Stage lists, the stages an evaluation covers, and where World 1's stages end."""

from __future__ import annotations

import pytest

import envs
from envs.stages import (
    STAGE_ENDS,
    StagesError,
    along,
    check_stages,
    evaluation_stages,
    parse_stages,
    stage_end,
    stage_env_id,
)

RIGHT, A = 0x80, 0x01


def test_a_stage_list_parses_in_its_order_and_empty_is_every_stage() -> None:
    assert parse_stages("1-1,1-2,1-3,1-4") == ((1, 1), (1, 2), (1, 3), (1, 4))
    assert parse_stages(" 8-4 , 1-1") == ((8, 4), (1, 1))
    assert parse_stages("") == ()


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        (",", "lists no stage"),
        (" ", "lists no stage"),
        ("1-1,,1-2", "empty entry"),
        ("1-5", "'1-5' does not exist"),
        ("9-1", "'9-1' does not exist"),
        ("0-1", "'0-1' does not exist"),
        ("a-b", "'a-b' is not a stage"),
        ("1-1-1", "'1-1-1' is not a stage"),
        ("1-1,1-2,1-1", "lists 1-1 twice"),
    ],
)
def test_a_bad_stage_list_is_refused_with_the_rule_and_the_fix(text: str, rule: str) -> None:
    with pytest.raises(StagesError) as info:
        parse_stages(text)
    assert rule in info.value.rule
    assert info.value.fix and "\n" not in str(info.value)


def test_a_stage_list_needs_a_random_stages_id() -> None:
    assert check_stages("SuperMarioBrosRandomStages-v0", "1-3") == ((1, 3),)
    assert check_stages("SuperMarioBros-1-1-v0", "") == ()
    for env_id in ("SuperMarioBros-1-1-v0", "SuperMarioBros-v0", "Catch-v0"):
        with pytest.raises(StagesError, match="only applies to SuperMarioBrosRandomStages"):
            check_stages(env_id, "1-1")
    with pytest.raises(StagesError, match="only applies"):
        envs.make_env("SuperMarioBros-1-1-v0", stages="1-1")


def test_evaluation_covers_every_listed_stage_with_its_fixed_id() -> None:
    assert stage_env_id("SuperMarioBrosRandomStages-v0", (1, 2)) == "SuperMarioBros-1-2-v0"
    assert evaluation_stages("SuperMarioBrosRandomStages-v0", "1-3,1-1") == [
        ("1-3", "SuperMarioBros-1-3-v0"),
        ("1-1", "SuperMarioBros-1-1-v0"),
    ]
    every = evaluation_stages("SuperMarioBrosRandomStages-v0")
    assert len(every) == 32 and every[0] == ("1-1", "SuperMarioBros-1-1-v0") and every[-1][0] == "8-4"
    assert evaluation_stages("SuperMarioBros-1-4-v0") == [("1-4", "SuperMarioBros-1-4-v0")]
    assert evaluation_stages("SuperMarioBros-v0") == [("", "SuperMarioBros-v0")]
    assert evaluation_stages("Catch-v0") == [("", "Catch-v0")]


def test_how_far_along_is_x_pos_over_the_end_by_hand() -> None:
    assert along("1-1", 1580.5) == pytest.approx(0.5)  # 3161 / 2
    assert along((1, 3), 485) == pytest.approx(0.2)  # 2425 / 5
    assert along("1-4", 2247) == 1.0
    assert along("1-4", 2259) == 1.0  # past the earliest touch of the axe: still the end
    assert along("2-1", 1000) is None and along("", 1000) is None
    assert stage_end("1-2") is STAGE_ENDS[(1, 2)] and stage_end("5-1") is None


def test_the_table_covers_world_1_with_the_end_that_finishes_each_stage() -> None:
    assert set(STAGE_ENDS) == {(1, 1), (1, 2), (1, 3), (1, 4)}
    assert [STAGE_ENDS[(1, s)].end_x for s in range(1, 5)] == [3161, 3161, 2425, 2247]
    assert "axe" in STAGE_ENDS[(1, 4)].ends_at and "pipe" in STAGE_ENDS[(1, 2)].ends_at


def _area_objects(stage: int) -> list[tuple[int, int]]:
    """(x, type) of the row-13 special objects of 1-``stage``'s area data in the ROM
    (flagpole 0x41, axe 0x42), read at the pointer the game keeps in RAM 0xE7/0xE8."""
    import gym_super_mario_bros._roms as roms
    from gym_super_mario_bros.smb_env import SuperMarioBrosEnv

    with open(roms.smb1_rom_path(), "rb") as handle:
        rom = handle.read()
    env = SuperMarioBrosEnv(target=(1, stage))
    address = int(env.ram[0xE7]) | int(env.ram[0xE8]) << 8
    env.close()

    def byte(cpu_address: int) -> int:
        return rom[16 + cpu_address - 0x8000]  # iNES header, then PRG ROM at 0x8000

    found, page = [], 0
    while byte(address) != 0xFD:
        first, second = byte(address), byte(address + 1)
        page += second >> 7  # the object starts a new page
        if first & 0x0F == 0x0D:
            if second & 0x40:
                found.append((page * 256 + (first >> 4) * 16, second & 0x7F))
            else:
                page = second & 0x1F  # page skip
        address += 2
    return found


@pytest.mark.parametrize(("stage", "kind"), [(1, 0x41), (3, 0x41), (4, 0x42)])
def test_the_end_objects_of_the_rom_sit_where_the_table_says(stage: int, kind: int) -> None:
    xs = [x for x, found in _area_objects(stage) if found == kind]
    assert len(xs) == 1
    end = STAGE_ENDS[(1, stage)].end_x
    # Mario's x is his left edge: he touches a flagpole 7 px before its column, the axe
    # a little before or on it.
    assert (xs[0] - end) == 7 if kind == 0x41 else 0 < xs[0] - end < 16


def _finish_from_page(stage: int, page: int, *, period: int, y: int | None = None, walk: int = 0):
    """Start 1-``stage`` at ``page`` (the halfway page, written before the stage loads),
    hold right and alternate right+A every ``period`` frames (after ``walk`` frames of
    right alone); return the x_pos of every frame, and the last info."""
    from gym_super_mario_bros.smb_env import SuperMarioBrosEnv

    class LateStart(SuperMarioBrosEnv):
        def _write_stage(self) -> None:
            super()._write_stage()
            self.ram[0x075B] = page

    env = LateStart(target=(1, stage))
    if y is not None:
        env.ram[0xCE] = y  # on the ledge of the exit pipe
    xs = []
    for t in range(1500):
        action = RIGHT | A if t >= walk and ((t - walk) // period) % 2 else RIGHT
        _, _, done, _, info = env.step(action)
        xs.append(info["x_pos"])
        if done:
            break
    env.close()
    return xs, info


@pytest.mark.parametrize(("stage", "page", "period"), [(1, 11, 25), (3, 9, 25), (4, 7, 20)])
def test_the_emulator_finishes_each_stage_at_its_end_x(stage: int, page: int, period: int) -> None:
    xs, info = _finish_from_page(stage, page, period=period)
    assert info["flag_get"] and (info["world"], info["stage"]) == (1, stage)
    end = STAGE_ENDS[(1, stage)].end_x
    if stage == 4:
        assert end <= info["x_pos"] <= 2259  # over Bowser onto the axe: the far end of the range
    else:
        assert info["x_pos"] == end


def test_the_emulator_leaves_1_2_through_the_pipe_into_the_flag_of_1_1s_area() -> None:
    xs, info = _finish_from_page(2, 10, period=25, y=128, walk=60)
    into = max(i for i in range(1, len(xs)) if xs[i] - xs[i - 1] > 100)
    assert xs[into - 1] < 2656 and xs[into] == 2872  # in at the pipe object's x, out at page 11
    assert info["flag_get"] and info["x_pos"] == STAGE_ENDS[(1, 2)].end_x


def test_a_stage_restricted_env_only_ever_starts_on_the_listed_stages() -> None:
    env = envs.make_env("SuperMarioBrosRandomStages-v0", stages="1-2,1-4", seed=0)
    seen = []
    for seed in range(8):
        _, info = env.reset(seed=seed)
        seen.append((info["world"], info["stage"]))
        _, _, _, _, info = env.step(0)
        assert (info["world"], info["stage"]) == seen[-1]
    env.close()
    assert set(seen) == {(1, 2), (1, 4)}  # both drawn, nothing else
