"""Where episodes end: grouping and the one-line description, against hand computations."""

from __future__ import annotations

import pytest

from pipeline.run.evaluator.episode_ends import END_GAP_PX, EndGroup, describe_ends, group_ends


def test_ends_within_a_block_of_the_previous_one_are_one_obstacle() -> None:
    # Sorted: 298, 675, 675, 898, 1414, 1418, 1795, 1800, 1803, 2472. Gaps <= 16 join:
    # 675/675 (0), 1414/1418 (4), 1795/1800/1803 (5, 3); 898 - 675 = 223 starts a group.
    ends = [1800, 675, 298, 1418, 2472, 1795, 898, 675, 1414, 1803]
    assert group_ends(ends) == [
        EndGroup(298, 298, 1),
        EndGroup(675, 675, 2),
        EndGroup(898, 898, 1),
        EndGroup(1414, 1418, 2),
        EndGroup(1795, 1803, 3),
        EndGroup(2472, 2472, 1),
    ]


def test_a_group_grows_from_its_last_end_not_its_first() -> None:
    # 100 -> 116 is 16 (joins), 116 -> 132 is 16 (joins), 132 -> 149 is 17 (a new group).
    assert END_GAP_PX == 16
    assert group_ends([149, 100, 132, 116]) == [EndGroup(100, 132, 3), EndGroup(149, 149, 1)]
    assert group_ends([100, 120], gap=20) == [EndGroup(100, 120, 2)]
    assert group_ends([]) == []


def test_the_description_lists_the_groups_then_the_flags() -> None:
    # 20 episodes, 12 ends: 8 got the flag.
    ends = [1126, 1521, 1817, 1956, 2026, 2471, 2472, 2473, 2746, 2750, 2761, 2850]
    assert describe_ends(ends, 20) == (
        "x 1,126, 1,521, 1,817, 1,956, 2,026, 2,471-2,473 (3), 2,746-2,761 (3), 2,850; the flag 8 of 20"
    )
    assert describe_ends([310, 310], 2) == "x 310 (2); the flag 0 of 2"
    assert describe_ends([], 5) == "the flag 5 of 5"
    with pytest.raises(ValueError, match="3 ends of only 2 episodes"):
        describe_ends([1, 2, 3], 2)
