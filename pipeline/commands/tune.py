"""``python main.py tune``: measure this machine and print the settings the ``auto`` preset uses.

It always measures (a training start with the ``auto`` preset measures only when the
machine has no cached tuning yet), stores the result in the cache, and prints the
figures, the choices and the resolved configuration with the source of every value.
When other processes kept the machine busy while it measured, the figures are likely
low: it says so, caches nothing and exits with code 1 (``--force`` caches them anyway).
Other flags (``--env``, ``--set replay_ratio=8``, ...) are those of training: the
tuning is for the run they describe, and flags still win over what it chose.
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline.common.errors import UserError

EXIT_NOT_CACHED = 1  # measured, but on a busy machine: nothing was cached


def tune_command(cli: dict[str, Any], preset: str | None, *, force: bool = False) -> int:
    """Tune for the run that ``cli`` (training's settings, parsed by main.py) describes.

    Returns 0, or :data:`EXIT_NOT_CACHED` when other processes kept the machine busy
    while measuring (the figures are printed, not cached; ``force`` caches them).
    """
    from config import ConfigError
    from pipeline.run.machine.tuning import busy_advice, resolve_for_machine

    if preset not in (None, "auto"):
        raise UserError(f"tune: --preset {preset}: tuning is for the auto preset; drop --preset or pass auto")

    def say(message: str) -> None:
        print(message, flush=True)

    try:
        resolved = resolve_for_machine(cli, "auto", say, retune=True, force=force)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    tuning = resolved.tuning
    say("")
    say(f"emulator: {tuning.emulator_frames_per_s:,.0f} frames/s per core ({resolved.config.env_id})")
    say(
        "learner:  "
        + ", ".join(f"batch {b}: {r:,.1f} updates/s" for b, r in tuning.updates_per_s.items())
        + f" ({resolved.config.compile=}, {resolved.config.amp=})".replace("resolved.config.", "")
    )
    say(
        f"machine:  {tuning.cores} core(s), {tuning.memory_available_gb:,.1f} GB RAM available, "
        f"{tuning.shm_free_gb:,.1f} GB free in /dev/shm; {tuning.load_line()}"
    )
    say(f"chosen:   {tuning.explanation}")
    if tuning.frames_per_s_at_ratio:
        say(
            "ratio:    more updates per frame, expected: "
            + ", ".join(
                f"replay ratio {ratio}: ~{fps:,.0f} frames/s (2M frames in {2e6 / fps / 3600:.1f} h)"
                for ratio, fps in tuning.frames_per_s_at_ratio.items()
            )
        )
    say("")
    say(resolved.describe())
    sys.stdout.flush()
    if tuning.busy and not force:
        print(f"main.py tune: the machine was busy: {busy_advice(tuning)}", file=sys.stderr, flush=True)
        return EXIT_NOT_CACHED
    return 0
