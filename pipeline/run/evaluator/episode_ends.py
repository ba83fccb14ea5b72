"""Where a protocol's episodes end: the x_pos of the episodes that did not finish the
stage, gathered into the obstacles they end at.

On a fixed stage a policy's failed episodes end at a few obstacles (a pit, a pipe, a
goomba), each death landing within a few pixels of the last one there. Listing them
grouped tells the two failures apart that a mean x_pos hides: a policy stuck at one
obstacle (most ends in one group: an exploration or a learning problem at that spot)
and one that falls all over the stage (many small groups: a policy that does not recover
from the random actions of the protocol). ``eval`` and the learning benchmark print it,
e.g. ``x 1,126, 1,521, 2,471-2,473 (3); the flag 8 of 20``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["END_GAP_PX", "EndGroup", "describe_ends", "group_ends"]

# Ends at most this many pixels from the previous one are one obstacle: one 16-px block
# of the level, about what one death's x varies by at the same pit or enemy.
END_GAP_PX = 16


@dataclass(frozen=True)
class EndGroup:
    """Episodes that ended between ``low`` and ``high`` (x_pos), ``count`` of them."""

    low: int
    high: int
    count: int

    def describe(self) -> str:
        """``1,126``, ``722 (2)`` or ``2,471-2,473 (3)``."""
        where = f"{self.low:,}" if self.low == self.high else f"{self.low:,}-{self.high:,}"
        return where if self.count == 1 else f"{where} ({self.count})"


def group_ends(x_positions: Iterable[int], gap: int = END_GAP_PX) -> list[EndGroup]:
    """The ends in increasing x, each group holding the ends no more than ``gap`` pixels
    after the one before it in the group."""
    groups: list[EndGroup] = []
    for x in sorted(int(x) for x in x_positions):
        if groups and x - groups[-1].high <= gap:
            last = groups[-1]
            groups[-1] = EndGroup(last.low, x, last.count + 1)
        else:
            groups.append(EndGroup(x, x, 1))
    return groups


def describe_ends(ends: Iterable[int], episodes: int) -> str:
    """One line: where the ``ends`` (x_pos of the episodes without the flag) lie, grouped,
    and how many of the ``episodes`` got the flag."""
    ends = list(ends)
    flags = episodes - len(ends)
    if flags < 0:
        raise ValueError(f"{len(ends)} ends of only {episodes} episodes")
    where = ", ".join(group.describe() for group in group_ends(ends))
    at_flag = f"the flag {flags} of {episodes}"
    return f"x {where}; {at_flag}" if where else at_flag
