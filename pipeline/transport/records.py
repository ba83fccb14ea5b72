"""The fixed-size transition record shared by collectors, the ring and the replay memory.

One record is one agent step as a collector saw it: the newest 84x84 grayscale frame of
the observation the action was chosen from, the action, the (scaled) reward that step
earned, and flags. Frame stacks are rebuilt from consecutive records at sampling time,
so every frame is stored exactly once.

At the end of every episode the collector writes one extra record flagged FINAL that
carries the episode's last observation and no action. It lets the replay memory
bootstrap truncated episodes from their real last observation without storing a
second frame per step.
"""

from __future__ import annotations

import numpy as np

FRAME_SHAPE: tuple[int, int] = (84, 84)

# Flag bits of a record.
FLAG_START = 1  # the frame is the first observation of an episode (right after reset)
FLAG_TERMINATED = 2  # the step ended the episode by a terminal state: no bootstrap
FLAG_TRUNCATED = 4  # the step ended the episode by a time or progress limit: bootstrap
FLAG_FINAL = 8  # observation-only record closing an episode; not a transition itself

# 7056 frame bytes + 4 reward + 1 action + 1 flags = 7062, padded to 7064 so every record
# (and so every reward field) stays 8-byte aligned inside the uint8 ring.
RECORD_DTYPE = np.dtype(
    {
        "names": ["frame", "reward", "action", "flags"],
        "formats": [(np.uint8, FRAME_SHAPE), np.float32, np.uint8, np.uint8],
        "offsets": [0, 7056, 7060, 7061],
        "itemsize": 7064,
    }
)
RECORD_BYTES: int = RECORD_DTYPE.itemsize
# What the replay memory keeps of a transition: its fields, unpadded (the replay stores
# each field in an array of its own, one frame per transition).
TRANSITION_BYTES: int = sum(RECORD_DTYPE.fields[name][0].itemsize for name in RECORD_DTYPE.names)
