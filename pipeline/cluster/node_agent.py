"""The node agent: a Ray actor that runs one node's collectors and is the consumer of its rings.

On its node it does what the trainer does locally: it creates the ring and weights
blocks in the node's own shared memory, and starts ``num_processes`` collector processes
through the same :class:`~pipeline.run.collector.supervisor.Supervisor`
(same collector code, records and ring protocol; restarts of hung or dead collectors
included). The collectors watch its pid and leave when it is gone.

It never pushes: records leave the rings only when the learner pulls (:meth:`NodeAgent.pull`),
so a learner that falls behind stops asking, the rings fill, and the collectors stall on
them exactly as they do on one machine. The actor is a plain (not async) one with one
thread of calls: Ray runs its calls in the order they were sent, so consecutive pulls
carry consecutive ranges of each ring (an async actor may start them out of order, and
did). Supervision runs on a thread of its own.

Segment names carry the run's tag, the node id and the incarnation (a random id drawn
each time the constructor runs, so an actor restarted by Ray makes new segments), and the
agent's pid as the owner: nodes of a test cluster share one /dev/shm, and a later start
on a machine removes segments whose owner is gone. The agent unlinks its segments on
:meth:`NodeAgent.shutdown` and at interpreter exit. An agent that Ray kills (its driver
died, even by SIGKILL, or its node's Ray processes were killed) takes its collectors and
their resource tracker with it, and none of its code runs: its reaper
(:mod:`~pipeline.cluster.reaper`), a small process outside Ray's process tree started with
the segments, unlinks them a second or two later. The next agent started on that
machine, and the learner when it shares the machine, remove any left (owner pid gone).

The class is plain Python; :mod:`~pipeline.cluster.node_link` makes it a Ray actor.
"""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.cluster import reaper
from pipeline.cluster.batches import PullResult, take_records
from pipeline.run.collector.args import CollectorArgs
from pipeline.run.collector.collector_main import collector_main
from pipeline.run.collector.supervisor import Supervisor
from pipeline.run.monitor.procstats import process_stats
from pipeline.transport import ring as R
from pipeline.transport import segments
from pipeline.transport.episodes import EpisodeSummary, receive
from pipeline.transport.weights import WeightsBlock, block_bytes

logger = logging.getLogger("mario.cluster")

# A pull returns once it has PULL_BATCH records, or PULL_GATHER_S after it saw the first,
# or empty after PULL_WAIT_S: at a few hundred records/s a call then carries tens of
# records instead of one, and an idle node costs a few calls a second, not hundreds.
PULL_BATCH = 128
PULL_GATHER_S = 0.02
PULL_WAIT_S = 0.2
PULL_SLEEP_S = 0.004
WATCH_S = 0.5  # supervision pass interval
KEEP_VERSIONS = 64  # node weights versions remembered, to report the learner's version collectors act with


class NodeAgent:
    """One node's collectors, rings and weights block (see the module docstring)."""

    def __init__(
        self,
        cfg: Any,
        *,
        run_tag: str,
        num_floats: int,
        position: int,
        log_dir: str,
        target: Callable[[CollectorArgs], None] | None = None,
    ) -> None:
        import ray

        self.cfg = cfg
        self.position = position
        self.incarnation = int.from_bytes(os.urandom(6), "little")
        self.node_id = ray.get_runtime_context().get_node_id()
        self.k = cfg.envs_per_collector
        layout = R.RingLayout(cfg.num_processes * self.k, cfg.ring_capacity)
        tag = f"{run_tag}n{self.node_id[:8]}i{self.incarnation:012x}"
        segments.remove_stale_segments()  # a dead run's, on this node
        self.ring_segment = self.weights_segment = None
        self.ring_segment = segments.create_segment(segments.segment_name(tag, "ring"), layout.total_bytes)
        try:
            self.weights_segment = segments.create_segment(
                segments.segment_name(tag, "weights"), block_bytes(num_floats)
            )
        except BaseException:
            segments.release(self.ring_segment, unlink=True)
            raise
        atexit.register(self._release)
        # Ray kills an agent whose driver died before any of its code can run: a process
        # outside Ray's tree unlinks these two blocks then (see pipeline.cluster.reaper).
        if not reaper.launch(os.getpid(), segments.PREFIX, [self.ring_segment.name, self.weights_segment.name]):
            logger.warning("could not start the segments' reaper; if Ray kills this agent, the next run removes them")
        self.ring = R.TransitionRing.initialise(self.ring_segment.buf, layout)
        self.weights = WeightsBlock.initialise(self.weights_segment.buf, num_floats)
        self.log_dir = _log_dir(Path(log_dir), position, self.incarnation)
        home_slots = [self.ring.slots[c * self.k] for c in range(cfg.num_processes)]
        self.supervisor = Supervisor(
            home_slots,
            self._collector_args,
            heartbeat_timeout_s=cfg.heartbeat_timeout_s,
            target=target or collector_main,
        )
        self.versions: dict[int, int] = {0: 0}  # this node's weights version -> the learner's
        self.supervising = threading.Lock()  # the watch thread and the calls share the supervisor
        self.first = 0  # the ring a pull starts with, rotating
        self.stopped = False
        self._watch_thread: threading.Thread | None = None

    def _collector_args(self, index: int) -> CollectorArgs:
        assert self.ring_segment is not None and self.weights_segment is not None
        return CollectorArgs(
            slot=index,
            config=self.cfg,
            ring_name=self.ring_segment.name,
            weights_name=self.weights_segment.name,
            parent_pid=os.getpid(),
            log_path=str(self.log_dir / f"collector-{index}.log"),
            slots=tuple(range(index * self.k, (index + 1) * self.k)),
            collectors_before=self.position * self.cfg.num_processes,
            start_trajectory=self.cfg.frontier_trajectory,  # a path: the search is refused on Ray
        )

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Start the collectors and their supervision; return who this agent is."""
        if self._watch_thread is None:
            with self.supervising:
                self.supervisor.start_all()
            self._watch_thread = threading.Thread(target=self._watch, name="supervise", daemon=True)
            self._watch_thread.start()
        return self.info()

    def info(self) -> dict[str, Any]:
        return {
            "incarnation": self.incarnation,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "ring_name": self.ring_segment.name if self.ring_segment else "",
            "weights_name": self.weights_segment.name if self.weights_segment else "",
            "log_dir": str(self.log_dir),
        }

    def _watch(self) -> None:
        while not self.stopped:
            with self.supervising:
                if not self.stopped:
                    self.supervisor.check()
            time.sleep(WATCH_S)

    def stop_collectors(self) -> None:
        """Ask the collectors to finish (through the weights block), then kill stragglers."""
        self.stopped = True
        if self.weights is not None:
            self.weights.request_stop()
        with self.supervising:
            self.supervisor.stop()

    def shutdown(self) -> bool:
        """Stop the collectors and unlink this node's segments (the learner's last call)."""
        if not self.stopped:
            self.stop_collectors()
        self._release()
        return True

    def _release(self) -> None:
        if getattr(self, "ring", None) is not None:
            self.ring.close()
            self.ring = None  # type: ignore[assignment]
        if getattr(self, "weights", None) is not None:
            self.weights.close()
            self.weights = None  # type: ignore[assignment]
        self.supervisor.slots = []
        segments.release(self.ring_segment, unlink=True)
        segments.release(self.weights_segment, unlink=True)
        self.ring_segment = self.weights_segment = None

    # -- records ----------------------------------------------------------------------------
    def pull(self, max_records: int) -> PullResult:
        """Take up to ``max_records`` committed records from the rings, waiting a little for a
        batch of them (see :data:`PULL_BATCH`)."""
        start = time.monotonic()
        first_seen = None
        wanted = min(max_records, PULL_BATCH)
        while not self.stopped and self.ring is not None:
            pending = sum(slot.transitions.pending() for slot in self.ring.slots)
            now = time.monotonic()
            if pending and first_seen is None:
                first_seen = now
            if pending >= wanted or now - start >= PULL_WAIT_S:
                break
            if first_seen is not None and now - first_seen >= PULL_GATHER_S:
                break
            time.sleep(PULL_SLEEP_S)
        return self._take(max_records)

    def drain(self) -> PullResult:
        """Everything still committed (after :meth:`stop_collectors`)."""
        return self._take(None)

    def _take(self, limit: int | None) -> PullResult:
        if self.ring is None:
            empty = np.zeros((0, 3), np.int64)
            return PullResult(self.incarnation, np.zeros(0, np.uint8), empty, np.zeros((0, 32), np.uint64))
        data, ranges = take_records(self.ring.slots, limit, self.first)
        self.first += 1
        episodes, bad = self._episodes()
        return PullResult(self.incarnation, data, ranges, self._headers(), episodes, bad)

    def _episodes(self) -> tuple[list[EpisodeSummary], int]:
        """Every pending episode summary; read on every call (a full episode ring would stall
        the collectors even while the learner takes no records)."""
        summaries: list[EpisodeSummary] = []
        bad = 0
        for slot in self.ring.slots:
            if slot.episodes.pending():
                got, wrong = receive(slot.episodes)
                summaries.extend(got)
                bad += wrong
        return summaries, bad

    def _headers(self) -> np.ndarray:
        """A copy of every slot header, its weights versions turned into the learner's."""
        headers = np.stack([slot.header for slot in self.ring.slots])
        column = headers[:, R.WEIGHTS_VERSION]
        headers[:, R.WEIGHTS_VERSION] = [self.versions.get(int(v), 0) for v in column]
        return headers

    # -- weights and status -------------------------------------------------------------
    def set_weights(self, flat: np.ndarray, version: int, epsilon: float, learner_step: int) -> int:
        """Copy the learner's weights (a zero-copy view of the object store) into this node's block."""
        if self.weights is None or self.stopped:
            return version
        node_version = self.weights.publish(flat, learner_step=learner_step, epsilon=epsilon)
        self.versions[node_version] = version
        if len(self.versions) > KEEP_VERSIONS:
            del self.versions[min(self.versions)]
        return version

    def status(self, epsilon: float | None = None) -> dict[str, Any]:
        """The node's counters and supervision state; also hands the collectors ``epsilon``."""
        if self.ring is None:
            return {"incarnation": self.incarnation, "closed": True}
        if epsilon is not None and not self.stopped:
            self.weights.epsilon = epsilon
        episodes, bad = self._episodes()
        with self.supervising:
            pids = [s.process.pid if s.process is not None else None for s in self.supervisor.states]
            restarts = [s.restarts for s in self.supervisor.states]
            alive = self.supervisor.alive()
        stats = [process_stats(pid) for pid in pids]
        return {
            "incarnation": self.incarnation,
            "closed": False,
            "headers": self._headers(),
            "episodes": episodes,
            "bad_episode_records": bad,
            "restarts": restarts,
            "alive": alive,
            "fatal": self.supervisor.fatal,
            "events": list(self.supervisor.events[-5:]),
            "cpu_pct": float(sum(s["cpu_pct"] for s in stats)),
            "rss_mb": float(sum(s["rss_mb"] for s in stats)),
        }


def _log_dir(wanted: Path, position: int, incarnation: int) -> Path:
    """The run's log directory when this node shares its file system, else a temporary one."""
    name = f"node{position}-{incarnation:012x}"
    for base in (wanted, Path(tempfile.gettempdir()) / "mario-dqn-logs"):
        try:
            (base / name).mkdir(parents=True, exist_ok=True)
            return base / name
        except OSError:
            continue
    return Path(tempfile.gettempdir())
