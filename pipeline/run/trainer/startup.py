"""A training run's startup: :func:`open_run` builds its :class:`~pipeline.run.trainer.resources.RunResources`.

The order: the resume checkpoint (read and checked before anything is created), the
machine's limits and the run directory's lock, the run directory, the learner, the replay
memory (restored on a resume), the monitor (so the user sees the startup from its first
second), the learner's compile and warm-up, and only then the shared memory (rings and
weights block) and the collectors' supervisor: compilation does not compete with
collectors, and a failure anywhere leaves nothing behind. Every piece's release is put on
the caller's release stack the moment the piece exists, so whatever fails (a Ctrl-C in
the middle of the compile included) the stack releases exactly what was created: the
lock, the writer threads' hook, the monitor, every shared-memory segment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

import envs
from config import Config
from pipeline.learning.flat_state import state_numel
from pipeline.learning.learner_device import resolve_device
from pipeline.run.collector.args import CollectorArgs
from pipeline.run.collector.supervisor import Supervisor
from pipeline.run.monitor.keys import COUNTER_KEYS
from pipeline.run.monitor.monitor import Monitor
from pipeline.run.pacing import RateLimiter
from pipeline.run.trainer.calibration import Calibration
from pipeline.run.trainer.checkpoints import RunCheckpoints, resume_from
from pipeline.run.trainer.collection import CollectionBackend
from pipeline.run.trainer.consolidator import Consolidator
from pipeline.run.trainer.interrupts import StartupInterrupts
from pipeline.run.trainer.pieces import (
    RunPaths,
    TrainingError,
    build_learner,
    build_replay,
    changed_on_resume,
    check_machine_and_lock,
    load_resume_checkpoint,
    new_run_root,
    restore_replay,
    saved_replay_problem,
    search_start_trajectory,
    seed_and_threads,
    start_trajectory,
    warm_up_learner,
)
from pipeline.run.trainer.resources import RunResources, slots_of
from pipeline.run.trainer.steadiness_watch import make_steadiness_watch
from pipeline.run.trainer.write_failures import WriteFailures
from pipeline.transport import ring as R
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock, block_bytes

__all__ = ["SLACK_BATCHES", "open_run"]

logger = logging.getLogger("mario.trainer")
SLACK_BATCHES = 4  # how far (in batches of samples) the learner may fall behind the replay ratio


def open_run(
    cfg: Config,
    releases: contextlib.ExitStack,
    *,
    sources: dict[str, str],
    collection: CollectionBackend | None,
    train: bool,
    interrupts: StartupInterrupts,
    write_failures: WriteFailures,
    insert: Callable[[int, np.ndarray], None],
) -> RunResources:
    """Create everything a run holds, in order; each release goes on ``releases`` at once.

    ``sources`` (where each setting came from) is written beside the config;
    ``collection`` runs the collectors elsewhere; ``train=False`` skips the learner's
    warm-up (a collection-only run); ``interrupts`` is checked once the warm-up returns;
    ``write_failures`` reports the writer threads' failures; ``insert(stream, records)``
    is what the consolidator does with the records it reads.
    """
    if collection is not None:  # whatever it connected or created goes at the very end
        releases.callback(collection.close)
    if cfg.resume:
        # Read and checked before anything is created: a bad file must leave nothing behind.
        resume_path, root, resume_state = load_resume_checkpoint(cfg)
    else:
        resume_path, root, resume_state = None, new_run_root(cfg), {}
    num_actions = envs.num_actions(cfg.env_id, cfg.action_set)
    lock = check_machine_and_lock(cfg, root, num_actions)  # before anything is created
    releases.callback(lock.release)
    paths = RunPaths(root)
    paths.make()
    if not cfg.resume:
        # A fresh run in a reused directory must not start from an earlier run's frontier.
        shutil.rmtree(paths.frontier, ignore_errors=True)
    releases.enter_context(write_failures.writer_threads(paths.root))
    checkpoints = RunCheckpoints(paths.checkpoints)
    checkpoints.last_good = resume_path
    (paths.root / "config.json").write_text(json.dumps({"config": cfg.to_dict(), "sources": sources}, indent=2))
    removed = segments.remove_stale_segments()
    if removed:
        logger.warning("removed %d shared-memory segment(s) left by a dead run: %s", len(removed), ", ".join(removed))

    device = resolve_device(cfg.device)
    replay_device = device if cfg.replay_device == "auto" else resolve_device(cfg.replay_device)
    seed_and_threads(cfg)
    learner = build_learner(cfg, num_actions, device)
    num_collectors = cfg.num_processes if collection is None else collection.prepare(cfg)
    num_streams = num_collectors * cfg.envs_per_collector  # one ring slot per environment
    restore = resume_path is not None
    if restore and (problem := saved_replay_problem(cfg, num_streams, paths.checkpoints)):
        # Said from the header, before the memory is allocated and the learner compiled.
        logger.warning("could not restore the replay (%s): resuming with an empty replay memory", problem)
        restore = False
    replay = build_replay(cfg, num_streams, replay_device)
    restored = replay.inserted if restore and restore_replay(replay, paths.checkpoints) else 0
    # The consolidator's budget paces inserts smoothly, so a few batches of slack are
    # enough; the old 2,048 samples showed as a ratio of 3.06 of 4 in a 20 s window.
    # The ratio counts from what this process inserts: a restored replay is warm-up
    # already done, not a debt of updates to pay at once on old data.
    limiter = RateLimiter(cfg.replay_ratio, max(cfg.learning_starts, restored), SLACK_BATCHES * cfg.batch_size)
    resumed = dict.fromkeys(COUNTER_KEYS, 0)
    if resume_path is not None:
        resumed, checkpoints.best_return = resume_from(resume_state, resume_path, learner)
        changes = changed_on_resume(cfg, dict(resume_state["config"]))
        if changes:
            logger.warning("resuming with settings that differ from the checkpoint's: %s", "; ".join(changes))
        logger.info("resumed from %s at %d frames, %d updates", resume_path, resumed["frames"], resumed["updates"])

    # The monitor comes up first, so the user sees startup progress from the first second.
    monitor = Monitor(paths.root, mode=cfg.monitor, interval_s=cfg.monitor_interval_s, resume=resume_path is not None)
    releases.callback(_close_monitor, monitor, write_failures, paths.root)
    monitor.start_display()
    monitor.announce(f"run directory {paths.root}")
    search_start_trajectory(cfg, paths, monitor)  # before the collectors, which start along it
    warmup_s = warm_up_learner(learner, cfg, device, monitor) if train else None
    interrupts.check()  # a Ctrl-C during the warm-up that torch swallowed

    num_floats = state_numel(learner.online.state_dict())
    tag = segments.run_tag(paths.root)
    ring_segment = None
    if collection is None:
        layout = R.RingLayout(num_streams, cfg.ring_capacity)
        ring_segment = _create_segment(tag, "ring", layout.total_bytes)
        releases.callback(segments.release, ring_segment, unlink=True)
    # The learner's own weights block (the evaluator reads it, with or without a backend).
    weights_segment = _create_segment(tag, "weights", block_bytes(num_floats))
    releases.callback(segments.release, weights_segment, unlink=True)
    weights = WeightsBlock.initialise(weights_segment.buf, num_floats)
    releases.callback(weights.close)
    if collection is not None:  # the rings live on the collectors' nodes
        ring, supervisor, consolidator = collection.open(
            run_tag=tag, num_floats=num_floats, log_dir=paths.logs, weights=weights, insert=insert
        )
    else:
        assert ring_segment is not None
        ring = R.TransitionRing.initialise(ring_segment.buf, layout)
        releases.callback(ring.close)
        consolidator = Consolidator(ring, insert)
        args = partial(collector_args, cfg, paths, ring_segment.name, weights_segment.name)
        # The supervisor watches each collector's home slot (its first).
        home_slots = [ring.slots[slots_of(i, cfg.envs_per_collector)[0]] for i in range(cfg.num_processes)]
        supervisor = Supervisor(home_slots, args, heartbeat_timeout_s=cfg.heartbeat_timeout_s)
    resources = RunResources(
        paths=paths,
        lock=lock,
        checkpoints=checkpoints,
        resume_path=resume_path,
        resumed=resumed,
        num_actions=num_actions,
        device=device,
        learner=learner,
        replay=replay,
        limiter=limiter,
        calibration=Calibration(learner, replay, seed=cfg.seed, min_replay=cfg.batch_size),
        steadiness=make_steadiness_watch(learner, replay, cfg),
        monitor=monitor,
        warmup_s=warmup_s,
        num_collectors=num_collectors,
        envs_per_collector=cfg.envs_per_collector,
        collection=collection,
        ring_segment=ring_segment,
        weights_segment=weights_segment,
        ring=ring,
        weights=weights,
        consolidator=consolidator,
        supervisor=supervisor,
    )
    # First of all at the end: the supervisor's views of the ring go too, so every segment
    # closes as well as unlinks (the releases above stay for a startup that failed).
    releases.callback(resources.release_shared_memory)
    return resources


def collector_args(cfg: Config, paths: RunPaths, ring_name: str, weights_name: str, collector: int) -> CollectorArgs:
    """What collector ``collector`` is started with (again after a restart, on the same slots)."""
    return CollectorArgs(
        slot=collector,
        config=cfg,
        ring_name=ring_name,
        weights_name=weights_name,
        parent_pid=os.getpid(),
        log_path=str(paths.logs / f"collector-{collector}.log"),
        slots=slots_of(collector, cfg.envs_per_collector),
        frontier_path=str(paths.frontier / f"collector-{collector}.npz"),
        start_trajectory=start_trajectory(cfg, paths),
    )


def _create_segment(tag: str, kind: str, size: int) -> segments.shared_memory.SharedMemory:
    # The pages are reserved now: a /dev/shm filled since the preflight fails here.
    try:
        return segments.create_segment(segments.segment_name(tag, kind), size)
    except segments.SegmentSpaceError as exc:
        raise TrainingError(str(exc)) from None


def _close_monitor(monitor: Monitor, write_failures: WriteFailures, root: Path) -> None:
    try:
        monitor.close()
    except OSError as exc:  # metrics.csv or TensorBoard on a full disk: said once for the whole run
        write_failures.metrics_failed(root, exc)
