"""``python -m pipeline.bench [...]``: the same command as ``python main.py bench [...]``."""

from __future__ import annotations

import sys

from pipeline.bench.command import bench_command
from pipeline.common.errors import UserError


def main() -> int:
    """Run the bench; a user error is one line on stderr and exit code 2, as in main.py."""
    try:
        return bench_command(sys.argv[1:])
    except UserError as exc:
        print(f"main.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
