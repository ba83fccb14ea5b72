"""What every part of the suite shares: its result record, the env pool, per-part configs.

:class:`SuiteBase` holds the options, the resolved configuration and the plumbing the
parts use; the parts themselves are methods of the mixins in
:mod:`~pipeline.bench.parts_collection` and :mod:`~pipeline.bench.parts_training`, and
:class:`~pipeline.bench.suite.Suite` runs them.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.bench.envpool import EnvPool
from pipeline.bench.options import BenchOptions

if TYPE_CHECKING:
    from config import Config


def log(message: str) -> None:
    """A progress line on stderr (stdout carries only the table)."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


@dataclass
class PartResult:
    """What one part measured: figures for the table, details for the JSON, or its error."""

    figures: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # JSON only (lists, settings)
    error: str = ""
    seconds: float = 0.0
    # What other processes used of the cores while the part ran (machine.load.LoadMeter):
    # mean cores kept busy (None: not known), and whether that makes its figures suspect.
    other_cores: float | None = None
    busy: bool = False
    # Why the part measured nothing (no steady window on a busy machine): not a failure.
    unmeasured: str = ""


class SuiteBase:
    """The options, the configuration and the plumbing every part uses."""

    def __init__(self, options: BenchOptions, resolved: Any) -> None:
        self.options = options
        self.resolved = resolved
        self.cfg: Config = resolved.config
        self.results: dict[str, PartResult] = {}
        self.pool: EnvPool | None = None
        self._training: Any = None  # the training run, reused by the startup part
        self.run_root = (
            Path(tempfile.mkdtemp(prefix="mario-bench-")) if options.keep_runs is None else options.keep_runs
        )
        self.run_root.mkdir(parents=True, exist_ok=True)
        self.stamp = time.strftime("%Y%m%d-%H%M%S")

    @property
    def seconds(self) -> float:
        return self.options.seconds

    def env_kwargs(self) -> dict[str, Any]:
        """The :func:`envs.make_env` settings of the configuration (for the env workers)."""
        cfg = self.cfg
        return dict(
            action_set=cfg.action_set,
            frame_skip=cfg.frame_skip,
            reward_scale=cfg.reward_scale,
            no_progress_steps=cfg.no_progress_steps,
            max_episode_steps=cfg.max_episode_steps,
        )

    def is_mario(self) -> bool:
        return not self.cfg.env_id.startswith("Catch")

    def workers(self) -> EnvPool:
        """The env pool, started on first use: worker 0 steps the bare emulator (a wrapped
        env for Catch), workers 1.. the wrapped env (NUM_PROCESSES of them if the
        pipeline part runs, else one)."""
        if self.pool is None:
            wrapped = self.cfg.num_processes if "pipeline" in self.options.parts else 1
            kinds = (["raw"] if self.is_mario() else ["wrapped"]) + ["wrapped"] * wrapped
            log(f"starting {len(kinds)} env processes")
            self.pool = EnvPool(kinds, self.cfg.env_id, self.env_kwargs(), seed=self.cfg.seed)
        return self.pool

    def part_config(self, name: str, **changes: Any) -> Config:
        """The configuration of one part's Trainer run: its own run directory under the
        suite's, no resume, no monitor output, no frame limit, a checkpoint only hourly (unless
        ``changes`` say otherwise), validated."""
        from config import validate

        settings: dict[str, Any] = dict(
            run_dir=str(self.run_root),
            run_name=f"{self.stamp}-{name}",
            resume="",
            monitor="off",
            total_frames=0,
            checkpoint_interval_s=3600.0,
        )
        cfg = dataclasses.replace(self.cfg, **{**settings, **changes})
        validate(cfg)
        return cfg
