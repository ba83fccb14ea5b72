"""A collector's restarts near the frontier, one archive per stage its envs play.

A fixed stage has one archive (:class:`~pipeline.learning.frontier.FrontierArchive`) and
one starter (:class:`~pipeline.run.collector.frontier_starts.FrontierStarter`, with the
snapshots along that archive's trajectory). A random-stages run
(``SuperMarioBrosRandomStages-v0``) keeps a pair for each stage its envs draw, made on
the stage's first episode: each reset draws a stage, and a restart of that episode is
drawn along that stage's own furthest trajectory. The random-stages env keeps one
emulator per stage, built as the fixed stage's is, so a stage's trajectory replays in it
as in the fixed-stage env, and its snapshots load only into that stage.

Each stage's archive is kept in its own file, ``collector-<i>-<W-S>.npz`` beside a fixed
stage's ``collector-<i>.npz``, and starts from the stage's searched trajectory
(``searched-<W-S>.npz`` of ``frontier_trajectory=search``): :func:`stage_file`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from config import Config
from envs.ids import parse_env_id
from envs.stages import parse_stage, stage_env_id, stage_name
from pipeline.learning.frontier import FrontierArchive, stage_signature
from pipeline.run.collector.args import CollectorArgs
from pipeline.run.collector.env_stream import EnvStream
from pipeline.run.collector.frontier_starts import FrontierStarter
from pipeline.transport import ring as R
from pipeline.transport.weights import WeightsBlock

__all__ = ["StageFrontiers", "stage_file"]


def stage_file(path: str, stage: str) -> str:
    """``path`` with ``-<stage>`` before its suffix: the file of one stage of a random-stages
    run ("" stays "": kept in memory, or no trajectory to start from)."""
    if not path:
        return ""
    file = Path(path)
    return str(file.with_name(f"{file.stem}-{stage}{file.suffix}"))


class StageFrontiers:
    """The archive and the starter of each stage a collector's envs play."""

    def __init__(
        self,
        cfg: Config,
        rng: np.random.Generator,
        args: CollectorArgs,
        counters: R.SlotCounters,
        weights: WeightsBlock,
        logger: logging.Logger,
    ) -> None:
        self.cfg = cfg
        self.rng = rng
        self.args = args
        self.counters = counters
        self.weights = weights
        self.logger = logger
        self.random_stages = parse_env_id(cfg.env_id).kind == "mario_random_stages"
        self.by_stage: dict[str, tuple[FrontierArchive, FrontierStarter]] = {}

    def of(self, stage: str) -> tuple[FrontierArchive, FrontierStarter]:
        """The archive and starter of ``stage`` ("W-S"), made on its first episode."""
        if stage not in self.by_stage:
            cfg, args = self.cfg, self.args
            env_id, path, start_from = cfg.env_id, args.frontier_path, args.start_trajectory
            if self.random_stages:
                env_id = stage_env_id(cfg.env_id, parse_stage(stage))
                path, start_from = stage_file(path, stage), stage_file(start_from, stage)
            archive = FrontierArchive(
                cfg.frontier_start_share,
                self.rng,
                path=path,
                recorded_with=stage_signature(env_id, cfg.action_set, cfg.frame_skip),
                log=self.logger,
                start_from=start_from,
            )
            starter = FrontierStarter(archive, cfg, self.counters, self.weights, self.logger, args.slot)
            self.by_stage[stage] = archive, starter
        return self.by_stage[stage]

    def start(self, stream: EnvStream, obs: np.ndarray, info: dict) -> np.ndarray | None:
        """Maybe start the freshly reset episode of ``stream`` (its reset's ``obs`` and
        ``info``) on its stage's furthest trajectory: :meth:`FrontierStarter.start`."""
        stream.stage = stage_name((int(info["world"]), int(info["stage"])))
        return self.of(stream.stage)[1].start(stream, obs)

    def finish(self, stream: EnvStream) -> None:
        """The episode of ``stream`` ended: offer its trace to its stage's archive."""
        assert stream.trace is not None
        self.of(stream.stage)[0].offer(stream.trace)
