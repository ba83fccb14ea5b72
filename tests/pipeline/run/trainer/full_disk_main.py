"""``python -m tests.pipeline.run.trainer.full_disk_main ARGS``: ``main.py ARGS`` on a disk that holds one checkpoint.

The first checkpoint file is written; every later one fails partway with ENOSPC, as on
a disk that filled up (a partial file is written first, as a full disk leaves it). Only
this process (the trainer's) is affected: the collectors are fresh interpreters. Used
where a real small tmpfs in a private mount namespace cannot be had (no root, or no
``unshare``).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any


def full_disk_after_one_checkpoint() -> None:
    import torch

    real_save = torch.save
    written = 0

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal written
        if written >= 1:
            f.write(b"\0" * 4096)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written += 1
        real_save(obj, f, *args, **kwargs)

    torch.save = save


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as main.py's own __main__
    full_disk_after_one_checkpoint()
    import main

    sys.exit(main.main(sys.argv[1:]))
