"""Tests for envs.actions: action-set bytes match nes_py's JoypadSpace table."""

from __future__ import annotations

import pytest

from envs.actions import ACTION_SET_NAMES, action_bytes, button_lists, buttons_to_byte, validate_action_set


def _joypad_bytes(buttons: list[list[str]]) -> list[int]:
    """Let nes_py's JoypadSpace compute the controller bytes of a button list."""
    import gymnasium
    from nes_py.wrappers import JoypadSpace

    class _Stub(gymnasium.Env):
        action_space = gymnasium.spaces.Discrete(256)
        observation_space = gymnasium.spaces.Discrete(1)

    joypad = JoypadSpace(_Stub(), buttons)
    return [joypad._action_map[i] for i in range(len(buttons))]


@pytest.mark.parametrize(
    ("name", "package_list"),
    [("right_only", "RIGHT_ONLY"), ("simple", "SIMPLE_MOVEMENT"), ("complex", "COMPLEX_MOVEMENT")],
)
def test_action_bytes_match_nes_py_joypad(name: str, package_list: str) -> None:
    from gym_super_mario_bros import actions

    expected_buttons = getattr(actions, package_list)
    assert button_lists(name) == expected_buttons
    assert action_bytes(name) == _joypad_bytes(expected_buttons)


def test_known_bytes() -> None:
    assert buttons_to_byte(["NOOP"]) == 0
    assert buttons_to_byte(["right", "A", "B"]) == 0b10000011
    assert buttons_to_byte(["left"]) == 0b01000000


def test_button_lists_are_copies() -> None:
    button_lists("simple").append(["start"])
    button_lists("simple")[0].append("A")
    assert button_lists("simple")[0] == ["NOOP"]
    assert len(button_lists("simple")) == 7


def test_unknown_action_set_and_button() -> None:
    with pytest.raises(ValueError, match="'jump'.*right_only, simple, complex"):
        validate_action_set("jump")
    with pytest.raises(ValueError, match="'Z'"):
        buttons_to_byte(["Z"])
    assert ACTION_SET_NAMES == ("right_jump", "right_only", "simple", "complex")


def test_right_jump_is_right_and_right_a_as_nes_py_maps_them() -> None:
    assert button_lists("right_jump") == [["right"], ["right", "A"]]
    assert action_bytes("right_jump") == _joypad_bytes([["right"], ["right", "A"]]) == [0b10000000, 0b10000001]
