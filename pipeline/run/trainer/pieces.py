"""What a training run settles before it starts: where it writes, what it resumes, what it runs on.

The pieces that :func:`~pipeline.run.trainer.startup.open_run` builds a run from, in its
order; main.py reads :func:`check_resume` and :class:`TrainingError` from here too.

- :class:`RunPaths`: the run directory's layout (checkpoints, logs, frontier).
- :func:`start_trajectory`, :func:`search_start_trajectory`: the trajectory file the
  collectors' restarts start along (``frontier_trajectory``'s, or the run's own search).
- :func:`new_run_root`, :func:`resolve_resume`, :func:`latest_checkpoint`: the run
  directory of a fresh run, or the checkpoint and directory that ``--resume`` names.
- :func:`load_resume_checkpoint`: reads and checks that checkpoint before anything is
  created, so a bad file leaves nothing behind; :func:`check_resume` runs the same check
  for main.py before any measuring, process or shared memory (a checkpoint that cannot
  load fails in seconds, not after the learner's compile), and :func:`saved_replay_problem`
  reads only the saved replay's header to tell early whether it will be restored.
- :func:`seed_and_threads`, :func:`build_learner`, :func:`build_replay`,
  :func:`warm_up_learner`: the learner process's torch settings, its learner (compiled and
  warmed up before the collectors start) and its replay memory.

Every failure is a :class:`TrainingError` (or a ``CheckpointError``) with one clear message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import envs
from config import NETWORK_FIELDS, RUN_ONLY_FIELDS, SAVED_BEFORE, TRAJECTORY_SEARCH, Config
from configuration.resolution import resolve_config
from envs.ids import parse_env_id
from pipeline.common.cores import learner_thread_range
from pipeline.common.errors import UserError
from pipeline.learning.checkpoint import CHECKPOINT_PATTERN, CheckpointError, check_compatible, load_checkpoint
from pipeline.learning.flat_state import state_numel
from pipeline.learning.frontier import TrajectoryError, read_trajectory, stage_signature
from pipeline.learning.learner import Learner
from pipeline.learning.learner_choice import choose_learner
from pipeline.learning.learner_settings import LearnerSettings
from pipeline.learning.policy import network_of
from pipeline.learning.replay import ReplayFileError, ReplayMemory
from pipeline.learning.replay_store import ReplayReader
from pipeline.learning.trajectory_search import search_stage
from pipeline.run.collector.stage_frontiers import stage_file
from pipeline.run.machine.preflight import RunLock, check_machine
from pipeline.run.monitor.monitor import Monitor

# What a checkpoint written by the trainer always holds (its "learner" also holds "online").
RESUME_KEYS = frozenset({"learner", "counters", "rng", "config"})


class TrainingError(Exception):
    """A run cannot start or continue (bad checkpoint, unusable device...): one clear message."""


@dataclass
class RunPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def frontier(self) -> Path:
        """Each collector's furthest trajectory (frontier starts), kept for a resume."""
        return self.root / "frontier"

    @property
    def searched_trajectory(self) -> Path:
        """The trajectory a run with ``frontier_trajectory=search`` found at its start."""
        return self.frontier / "searched.npz"

    def make(self) -> None:
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)


def start_trajectory(cfg: Config, paths: RunPaths) -> str:
    """The trajectory file the collectors' furthest trajectories start from ("" = none)."""
    return str(paths.searched_trajectory) if cfg.frontier_trajectory == TRAJECTORY_SEARCH else cfg.frontier_trajectory


def search_start_trajectory(cfg: Config, paths: RunPaths, monitor: Monitor) -> None:
    """With ``frontier_trajectory=search``: search the stage (each stage of a random-stages
    run, into :func:`stage_file`'s name) as ``explore`` does, seeded by the run's seed,
    unless the run found it before (a resume); said on the monitor."""
    if cfg.frontier_trajectory != TRAJECTORY_SEARCH:
        return
    searched = paths.searched_trajectory
    if parse_env_id(cfg.env_id).kind == "mario_random_stages":
        wanted = [
            (dataclasses.replace(cfg, env_id=env_id, stages=""), Path(stage_file(str(searched), stage)))
            for stage, env_id in envs.evaluation_stages(cfg.env_id, cfg.stages)
        ]
    else:
        wanted = [(cfg, searched)]
    for stage_cfg, out in wanted:
        if out.exists():
            continue
        monitor.announce(
            f"startup: searching {stage_cfg.env_id} for a trajectory to its flag (frontier_trajectory=search)"
        )
        started = time.perf_counter()
        found = search_stage(stage_cfg, out, cfg.seed)
        if found.best_x < 0:
            raise TrainingError(
                f"frontier_trajectory=search: no step stayed alive on {stage_cfg.env_id}; "
                "give a file from python main.py explore"
            )
        monitor.announce(
            f"startup: {'the flag' if found.flag else f'no flag, x {found.best_x}'} in {len(found.actions)} steps "
            f"after {found.iterations} sequences, {time.perf_counter() - started:.0f} s; restarts start along {out}"
        )


def new_run_root(cfg: Config) -> Path:
    """The directory of a fresh run: ``run_dir/run_name``, or a timestamped name."""
    name = cfg.run_name or time.strftime("%Y%m%d-%H%M%S") + f"-{cfg.env_id}"
    return Path(cfg.run_dir) / name


def latest_checkpoint(directory: Path) -> Path | None:
    """The periodic checkpoint with the most frames (the count is in its name)."""
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := CHECKPOINT_PATTERN.match(p.name))]
    return max(found)[1] if found else None


def resolve_resume(resume: str) -> tuple[Path, Path]:
    """Map --resume (a checkpoint file or a run directory) to (checkpoint, run directory)."""
    path = Path(resume)
    if path.is_dir():
        directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
        found = latest_checkpoint(directory)
        if found is None:
            raise TrainingError(f"--resume {resume}: no checkpoint (ckpt-*.pt) found in {directory}")
        path = found
    elif not path.exists():
        raise TrainingError(f"--resume {resume}: no such file or directory; pass a checkpoint or a run directory")
    run_root = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return path, run_root


def load_resume_checkpoint(cfg: Config) -> tuple[Path, Path, dict[str, Any]]:
    """The checkpoint ``cfg.resume`` names, its run directory, and its checked contents.

    Raises ``CheckpointError`` for a file that is not a training checkpoint of this project
    or whose network has another shape than ``cfg``'s (action set, frame stack),
    and ``RemovedOptionError`` (a ``ConfigError``) for one trained with an option removed
    since (:mod:`configuration.removed`).
    """
    path, root = resolve_resume(cfg.resume)
    state = load_checkpoint(path)
    missing = RESUME_KEYS - set(state)
    if missing or "online" not in state.get("learner", {}):
        raise CheckpointError(
            f"{path}: not a training checkpoint of this project (missing "
            f"{', '.join(sorted(missing)) or 'learner.online'}); pass a ckpt-*.pt "
            f"file or a run directory written by main.py"
        )
    if isinstance(state.get("config"), dict):
        # A run of an option removed since is refused here, in one line (RemovedOptionError).
        Config.from_dict(state["config"], source=f"checkpoint {path}")
    num_actions = envs.num_actions(cfg.env_id, cfg.action_set)
    mismatch = network_mismatch(state, cfg, num_actions)
    if mismatch:
        raise CheckpointError(f"cannot resume from {path}: {mismatch}, or start a fresh run")
    check_compatible(network_of(cfg, num_actions), state["learner"]["online"], path)
    return path, root, state


def network_mismatch(state: dict[str, Any], cfg: Config, num_actions: int) -> str:
    """How the checkpoint's network differs from the one ``cfg`` builds, named by setting
    (empty when its saved settings agree; ``check_compatible`` then checks the tensors)."""
    saved = state.get("config")
    if not isinstance(saved, dict):
        return ""
    saved = {**SAVED_BEFORE, **saved}  # a checkpoint older than a field was trained without it
    saved_actions = state.get("num_actions")
    if isinstance(saved_actions, int) and saved_actions != num_actions:
        saved_set = saved.get("action_set")
        try:  # the action set is the usual culprit; an env of another kind (Catch) is the other
            fits = envs.num_actions(cfg.env_id, str(saved_set)) == saved_actions
        except ValueError:
            fits = False
        fix = f"--set action_set={saved_set}" if fits else f"--env {saved.get('env_id')}"
        return (
            f"it was trained with {saved_actions} actions ({saved.get('env_id')}, action_set "
            f"{saved_set!r}), this run has {num_actions} ({cfg.env_id}, action_set "
            f"{cfg.action_set!r}); resume with {fix}"
        )
    for name in NETWORK_FIELDS:
        if name in saved and saved[name] != getattr(cfg, name):
            value = str(saved[name]).lower() if isinstance(saved[name], bool) else saved[name]
            return (
                f"its network was trained with {name}={saved[name]!r}, this run has "
                f"{name}={getattr(cfg, name)!r}; resume with --set {name}={value}"
            )
    return ""


def check_resume(cli: dict[str, Any], preset: str | None) -> None:
    """Check the checkpoint that ``--resume`` names against the run's settings, first thing.

    For main.py, before the auto preset's measurements and the compile/precision timing
    (which take minutes and start processes of their own): the checkpoint's shape only
    depends on settings that no measurement changes. Raises ``ConfigError`` for bad
    settings, ``CheckpointError`` for a checkpoint that cannot resume this run, and
    ``UserError`` for a ``--resume`` path that holds no checkpoint.
    """
    cfg = resolve_config(cli, preset=preset).config
    if not cfg.resume:
        return
    try:
        load_resume_checkpoint(cfg)
    except TrainingError as exc:
        raise UserError(str(exc)) from None


def changed_on_resume(cfg: Config, saved: dict[str, Any]) -> list[str]:
    """``field old -> new`` for each learning setting that differs from the checkpoint's run.

    Resuming takes this run's settings (a user may mean to change them), so a change made
    by mistake (a flag left off) would silently train on with other hyperparameters.
    """
    current = cfg.to_dict()
    return [
        f"{name} {saved[name]!r} -> {value!r}"
        for name, value in current.items()
        if name not in RUN_ONLY_FIELDS and name in saved and saved[name] != value
    ]


def seed_and_threads(cfg: Config) -> None:
    """Seed torch and numpy, and start the learner at the fewest threads it runs with (the
    thread hand-over may add more while the collectors wait for it)."""
    torch.set_num_threads(learner_thread_range(cfg.learner_threads, cfg.learner_threads_max, cfg.num_processes)[0])
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)


def build_learner(cfg: Config, num_actions: int, device: torch.device) -> Learner:
    # compile and amp are "on"/"off" settings, not bools; main.py has already replaced
    # "auto" by the fastest measured variant, and a Config made in code that still says
    # "auto" gets the same (cached) choice here.
    choice = choose_learner(cfg, str(device))
    settings = LearnerSettings.from_config(cfg, compile=choice.compile, amp=choice.amp, device=str(device))
    return Learner(num_actions, settings)


def build_replay(cfg: Config, num_streams: int, device: torch.device) -> ReplayMemory:
    """The replay memory, one stream per ring slot; it computes the n-step returns and discounts."""
    return ReplayMemory(
        cfg.replay_capacity,
        num_streams,
        frame_stack=cfg.frame_stack,
        n_step=cfg.n_step,
        gamma=cfg.gamma,
        device=device,
        seed=cfg.seed,
    )


logger = logging.getLogger("mario.trainer")
REPLAY_FILE = "replay.npz"


def save_replay(replay: ReplayMemory, checkpoints: Path) -> None:
    """Save the replay beside the final checkpoint; a failure is a warning (the checkpoint is safe)."""
    try:
        replay.save(checkpoints / REPLAY_FILE)
        logger.info("replay (%d transitions) saved in %s", len(replay), checkpoints / REPLAY_FILE)
    except OSError as exc:
        logger.warning("could not save the replay (%s); --resume will start it empty", exc)


def saved_replay_problem(cfg: Config, num_streams: int, checkpoints: Path) -> str:
    """Why the run's saved replay will not be restored (from its header alone; "" when it fits
    or is missing). Read before the replay memory is allocated and the learner warmed up."""
    path = checkpoints / REPLAY_FILE
    if not path.exists():
        return ""
    expected = {
        "num_streams": num_streams,
        "capacity_per_stream": cfg.replay_capacity // num_streams,
        "frame_stack": cfg.frame_stack,
        "n_step": cfg.n_step,
        "gamma": cfg.gamma,
    }
    try:
        with ReplayReader(path) as reader:
            saved = {key: reader.header.get(key) for key in expected}
    except ReplayFileError as exc:
        return str(exc)
    changed = [f"{key} {saved[key]!r} -> {value!r}" for key, value in expected.items() if saved[key] != value]
    return f"replay file {path}: saved with another geometry ({'; '.join(changed)})" if changed else ""


def restore_replay(replay: ReplayMemory, checkpoints: Path) -> int:
    """Refill ``replay`` from the run's saved replay; return the transitions restored.

    A missing, corrupt or differently shaped file is one warning and an empty replay
    (the checkpoint alone still resumes), never a failed start.
    """
    path = checkpoints / REPLAY_FILE
    if not path.exists():
        logger.warning("no saved replay in %s: resuming with an empty replay memory", checkpoints)
        return 0
    try:
        replay.restore(path)
    except (ReplayFileError, OSError) as exc:
        logger.warning("could not restore the replay from %s (%s): resuming with an empty replay memory", path, exc)
        return 0
    logger.info("restored %d transitions of replay from %s", len(replay), path)
    return len(replay)


def warm_up_learner(learner: Learner, cfg: Config, device: torch.device, monitor: Monitor) -> float:
    """Compile and warm up the learner (announced on the monitor); returns the seconds it took.

    Runs before the collectors start, so compilation does not compete with them for the CPU.
    """
    monitor.announce(
        f"startup: warming up the learner on {device} (compile={cfg.compile}, "
        f"amp={cfg.amp}, batch {cfg.batch_size}); the monitor's clock starts after it"
    )
    seconds = learner.warmup(cfg.batch_size)
    monitor.startup_reported.add("compile+warm-up")  # announced just below
    monitor.announce(
        f"startup: compile+warm-up done in {seconds:.1f} s (compiled={learner.compiled}, amp={learner.amp_dtype})"
    )
    return seconds


def check_machine_and_lock(cfg: Config, root: Path, num_actions: int) -> RunLock:
    """The preflight checks, then the run directory's lock: raised as one line, before anything exists."""
    if cfg.frontier_trajectory not in ("", TRAJECTORY_SEARCH):  # read by every collector: a bad file fails here
        try:
            read_trajectory(cfg.frontier_trajectory, stage_signature(cfg.env_id, cfg.action_set, cfg.frame_skip))
        except TrajectoryError as exc:
            raise UserError(
                f"frontier_trajectory: {exc}; write one with python main.py explore --env {cfg.env_id}"
            ) from None
    network_floats = state_numel(network_of(cfg, num_actions).state_dict())
    for warning in check_machine(cfg, network_floats):
        logger.warning(warning)
    lock = RunLock(root).acquire()
    if lock.previous_owner is not None:
        logger.warning("took over the lock of %s from pid %d, which is gone", root, lock.previous_owner)
    return lock


def run_event_loop(coro: Coroutine[Any, Any, None]) -> None:
    """Run the trainer's main coroutine on uvloop (asyncio's own loop where it is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is missing on some platforms
        asyncio.run(coro)
    else:
        uvloop.run(coro)
