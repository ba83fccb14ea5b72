"""What a collector process is started with: :class:`CollectorArgs`, plain values the
learner (or a Ray node agent) builds and the child reads (:mod:`~pipeline.run.collector.collector_main`).
"""

from __future__ import annotations

from dataclasses import dataclass

from config import Config

__all__ = ["CollectorArgs"]


@dataclass
class CollectorArgs:
    """Everything a collector process needs; plain values (Config is a plain dataclass) so it
    pickles for the child's start."""

    slot: int  # the collector's index (its process number)
    config: Config
    ring_name: str
    weights_name: str
    parent_pid: int
    log_path: str = ""
    # Fault injection for reliability tests: "" or "env_error:<step>" / "env_error_always" /
    # "crash_always" (raises while starting, on every start).
    fault: str = ""
    slots: tuple[int, ...] = ()  # ring slots of its envs, the home slot first (default: (slot,))
    # Where the furthest trajectory of frontier starts is kept across restarts and resumes
    # ("" keeps it in memory: it is lost with the process).
    frontier_path: str = ""
    # The trajectory file its furthest trajectory starts from in a fresh run ("" = none):
    # frontier_trajectory's, or the one the run searched (frontier_trajectory=search).
    start_trajectory: str = ""
    # Collectors of the run numbered before this machine's (the Ray backend's earlier node
    # places): seeds follow the run-wide number, so no two collectors of a run draw the
    # same episodes and exploration, and a collector seeds as the local one of its number.
    collectors_before: int = 0
