"""Discrete action sets for Mario: names, button lists and NES controller bytes.

The button lists are the ones ``gym_super_mario_bros.actions`` ships (RIGHT_ONLY,
SIMPLE_MOVEMENT, COMPLEX_MOVEMENT), plus ``right_jump``: the two actions (right,
right+A) the PyTorch Mario tutorial and DI-engine's Mario DQN train with. The emulator takes one byte per frame in which
each bit is a controller button; the bit layout below is the NES controller's (the
same table ``nes_py.wrappers.JoypadSpace`` uses, rebuilt here because the table is
private to that wrapper and the project's wrappers map actions themselves).
"""

from __future__ import annotations

ACTION_SET_NAMES: tuple[str, ...] = ("right_jump", "right_only", "simple", "complex")
DEFAULT_ACTION_SET = "right_only"

# NES controller bits, most significant first: right left down up start select B A.
BUTTON_BITS: dict[str, int] = {
    "right": 0b10000000,
    "left": 0b01000000,
    "down": 0b00100000,
    "up": 0b00010000,
    "start": 0b00001000,
    "select": 0b00000100,
    "B": 0b00000010,
    "A": 0b00000001,
    "NOOP": 0b00000000,
}

# Walk right, or walk right holding A. With two actions a random run holds A for the
# 7 agent steps a tall pipe needs with probability 1/128 (SIMPLE's 7 actions: 0.3 %),
# and no action stands still or walks left.
RIGHT_JUMP: tuple[tuple[str, ...], ...] = (("right",), ("right", "A"))


def validate_action_set(name: str) -> None:
    """Raise ValueError naming the accepted action sets if ``name`` is not one of them."""
    if name not in ACTION_SET_NAMES:
        raise ValueError(
            f"unknown action set {name!r}: use one of {', '.join(ACTION_SET_NAMES)} (default {DEFAULT_ACTION_SET!r})"
        )


def button_lists(name: str) -> list[list[str]]:
    """Return the package's button lists for an action set (index = discrete action)."""
    validate_action_set(name)
    # Imported here, not at the top: Catch-only processes never load the emulator package.
    from gym_super_mario_bros import actions

    table = {
        "right_jump": RIGHT_JUMP,
        "right_only": actions.RIGHT_ONLY,
        "simple": actions.SIMPLE_MOVEMENT,
        "complex": actions.COMPLEX_MOVEMENT,
    }
    # Copies, so callers cannot edit the package's module-level lists.
    return [list(buttons) for buttons in table[name]]


def buttons_to_byte(buttons: list[str]) -> int:
    """OR the controller bits of the named buttons into one emulator action byte."""
    byte = 0
    for button in buttons:
        if button not in BUTTON_BITS:
            raise ValueError(f"unknown NES button {button!r}: use one of {', '.join(BUTTON_BITS)}")
        byte |= BUTTON_BITS[button]
    return byte


def action_bytes(name: str) -> list[int]:
    """Return the emulator byte of every discrete action of an action set."""
    return [buttons_to_byte(buttons) for buttons in button_lists(name)]
