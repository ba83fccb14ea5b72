"""``--backend ray``: collectors on every node of a Ray cluster, one learner pulling from all.

:class:`RayBackend` is the trainer's :class:`~pipeline.run.trainer.collection.CollectionBackend`.
At :meth:`~RayBackend.prepare` it joins the cluster (or starts a one-node Ray) and waits
for the nodes that offer the ``collector_node`` resource; each becomes a *place* with a
fixed range of replay streams. :meth:`~RayBackend.open` puts a node agent
(:mod:`~pipeline.cluster.node_agent`) on each, pinned to its node. After that, all of it
runs on the learner's event loop, never blocking it:

- :meth:`~RayBackend.poll` (the trainer's consolidator task calls it, with the replay
  ratio's budget over *all* nodes together) inserts the records that have arrived, at
  most the budget, and tops up each node's pulls in flight (credits) with no more than
  the budget allows, so a learner that is behind stops asking and the nodes' rings fill;
- one task per node awaits its pulls (:mod:`~pipeline.cluster.node_link`);
- :meth:`~RayBackend.check` (the trainer's watch task, twice a second; the half of the
  class in :mod:`~pipeline.cluster.supervision`) collects each
  agent's status (counters, supervision, episodes; it carries epsilon out), sends the
  newest weights where no transfer is in flight, notices restarted agents (a new
  incarnation, accepted) and dead nodes (logged once, their unreceived records counted
  as lost), and places an agent on a node that joins while a place is free.

Weights are ``ray.put`` once per publish; every agent gets the same object reference.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.cluster import ray_setup
from pipeline.cluster.batches import MirrorRing, PullResult
from pipeline.cluster.node_link import CREDITS, MIN_PULL, PULL_RECORDS, NodeLink, Pull
from pipeline.cluster.supervision import CALL_TIMEOUT_S, ClusterSupervisor, NodeSupervision, remove_dead_segments
from pipeline.common.errors import UserError
from pipeline.run.monitor.keys import NodeGauge, node_gauge_key
from pipeline.run.trainer.pieces import TrainingError
from pipeline.transport.episodes import EpisodeSummary
from pipeline.transport.weights import WeightsBlock

logger = logging.getLogger("mario.cluster")

NODE_WAIT_S = 120.0  # for the first collector node(s) to join


class RayBackend(NodeSupervision):
    """Collectors on a Ray cluster (see the module docstring)."""

    def __init__(self, cfg: Any, *, target: Callable | None = None, episode_window: int = 1000) -> None:
        self.cfg = cfg
        self.target = target  # the collectors' entry point (tests run synthetic producers)
        self.links: list[NodeLink] = []
        self.connected = False  # to a cluster, by this backend or before it (a test's)
        self.connected_here = False  # this backend joined or started it, and leaves it at close()
        self.records = np.zeros(0, np.int64)  # inserted per replay stream
        self.episodes: deque[EpisodeSummary] = deque(maxlen=episode_window)
        self.episodes_total = self.bad_episode_records = 0
        self.lost_results = 0  # pulls whose result was lost although the agent lived
        self.fatal = ""
        self.stopping = self.closed = False
        self.max_gap_s = 0.0
        self._last_poll = time.perf_counter()
        self._turn = 0
        self._last_discovery = 0.0
        self._sweep_until = 0.0
        self._nodes: dict[str, str] = {}
        self._latest: tuple | None = None  # (weights ref, version, epsilon, learner step)
        self._agent_class: Any = None
        self._frames_seen: dict[int, tuple[float, float]] = {}
        self.mirror: MirrorRing | None = None
        self.weights: WeightsBlock | None = None
        self.run_tag, self.num_floats, self.log_dir = "", 0, Path(".")

    # -- CollectionBackend -------------------------------------------------------------------
    def connect(self) -> None:
        """Join the cluster, or start a one-node Ray (once; :meth:`prepare` does it if not done).

        main.py calls it before the run directory exists, so a wrong ``--ray-address``
        fails in one line within seconds and leaves nothing behind.
        """
        if self.connected:
            return
        try:
            self.connected_here = ray_setup.connect(self.cfg.ray_address)
        except UserError:  # the address: already one line with the fix
            raise
        except Exception as exc:  # noqa: BLE001 - Ray raises several kinds; the user needs one line
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            where = f"join the Ray cluster at {self.cfg.ray_address}" if self.cfg.ray_address else "start Ray here"
            raise TrainingError(f"--backend ray: cannot {where}: {first}") from None
        self.connected = True

    def prepare(self, cfg: Any) -> int:
        address = cfg.ray_address or "(a one-node Ray started here)"
        self.connect()
        self._nodes = ray_setup.wait_for_nodes(cfg.ray_nodes, NODE_WAIT_S)
        if not self._nodes:
            raise TrainingError(
                f"--backend ray: no node of the Ray cluster at {address} offers collector capacity after "
                f"{NODE_WAIT_S:.0f} s; start one with ray start --address=HEAD:6379 "
                f"--resources='{{\"{ray_setup.RESOURCE}\": 1}}'"
            )
        if len(self._nodes) < cfg.ray_nodes:
            logger.warning("only %d of %d collector nodes joined; starting with them", len(self._nodes), cfg.ray_nodes)
        places = max(cfg.ray_nodes, len(self._nodes))
        rings = cfg.num_processes * cfg.envs_per_collector
        self.links = [NodeLink(p, rings, cfg.num_processes) for p in range(places)]
        self.records = np.zeros(places * rings, np.int64)
        logger.info("ray backend: %d collector node(s): %s", len(self._nodes), ", ".join(self._nodes.values()))
        return places * cfg.num_processes

    def open(
        self,
        *,
        run_tag: str,
        num_floats: int,
        log_dir: Path,
        weights: WeightsBlock,
        insert: Callable[[int, np.ndarray], None],
    ) -> tuple[MirrorRing, ClusterSupervisor, RayBackend]:
        self.run_tag, self.num_floats, self.log_dir = run_tag, num_floats, log_dir
        self.weights, self.insert = weights, insert
        self.mirror = MirrorRing(len(self.records))
        for link, (node_id, address) in zip(self.links, self._nodes.items()):
            self._place(link, node_id, address, start=False)
        self.supervisor = ClusterSupervisor(self)
        return self.mirror, self.supervisor, self

    def publish(self, flat: np.ndarray, *, version: int, epsilon: float, learner_step: int) -> None:
        import ray

        self._latest = (ray.put(flat), version, epsilon, learner_step)  # one copy, however many nodes
        for link in self.links:
            if link.handle is not None:
                link.weights_pending = self._latest
                self._send_weights(link)

    def gauges(self) -> dict[str, float]:
        from pipeline.transport.records import RECORD_BYTES

        assert self.mirror is not None
        now = time.monotonic()
        gauges: dict[str, float] = {}
        for link in self.links:
            rows = self.mirror.slots[link.first_stream : link.first_stream + link.rings]
            frames = float(sum(slot.counters.frames for slot in rows))
            then, before = self._frames_seen.get(link.position, (now, frames))
            self._frames_seen[link.position] = (now, frames)
            pull_ms, _ = link.take_pull_stats()
            values: dict[NodeGauge, float] = {
                "frames_per_s": (frames - before) / (now - then) if now > then else 0.0,
                "pull_ms": pull_ms,
                "inflight_mb": link.inflight_bytes() / 2**20,
                "restarts": float(sum(link.restarts) + max(0, link.incarnations - 1)),
                "lost": float(sum(int(ledger.lost.sum()) for ledger in link.ledgers)),
                "live": float(link.live),
                "cpu_pct": link.cpu_pct,
            }
            gauges.update({node_gauge_key(link.position, key): value for key, value in values.items()})
        gauges["nodes_live"] = float(sum(link.live for link in self.links))
        gauges["pull_inflight_mb"] = sum(link.requested() for link in self.links) * RECORD_BYTES / 2**20
        return gauges

    def summary(self) -> dict[str, Any]:
        """Per node place, per incarnation, per ring: committed, received, delivered, lost."""
        ledgers = [ledger for link in self.links for ledger in link.ledgers]
        return {
            "nodes": [link.accounting() for link in self.links],
            "records_delivered": int(sum(int(ledger.delivered.sum()) for ledger in ledgers)),
            "records_lost": int(sum(int(ledger.lost.sum()) for ledger in ledgers)),
            "duplicates_dropped": int(sum(int(ledger.duplicates.sum()) for ledger in ledgers)),
            "results_lost": self.lost_results,
        }

    def close(self) -> None:
        """Shut every agent down (they unlink their segments) and leave Ray if this run joined it."""
        if self.closed:
            return
        self.closed = self.stopping = True
        import ray

        calls = [(link, link.handle.shutdown.remote()) for link in self.links if link.handle is not None]
        for link, ref in calls:
            try:
                ray.get(ref, timeout=CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a dead agent's node cleans up after it
                logger.debug("node %d: shutdown: %s", link.position, exc)
            try:
                ray.kill(link.handle)
            except Exception:  # noqa: BLE001
                pass
            link.handle = None
        if self.connected_here:
            ray.shutdown()
            self.connected_here = False
        self.connected = False
        remove_dead_segments()

    # -- the consolidator's part --------------------------------------------------------------
    @property
    def total_records(self) -> int:
        return int(self.records.sum())

    def poll(self, budget: int | None = None) -> int:
        """Insert what has arrived (at most ``budget``), then ask for no more than the budget allows."""
        now = time.perf_counter()
        self.max_gap_s = max(self.max_gap_s, now - self._last_poll)
        self._last_poll = now
        consumed = self._insert_ready(budget)
        if not self.stopping:
            self._issue(None if budget is None else budget - consumed)
        return consumed

    def reset_gap(self) -> float:
        gap, self.max_gap_s = self.max_gap_s, 0.0
        return gap

    def _insert_ready(self, budget: int | None) -> int:
        consumed = 0
        self._turn += 1
        order = self.links[self._turn % len(self.links) :] + self.links[: self._turn % len(self.links)]
        pending = [link for link in order if link.ready]
        while pending and (budget is None or consumed < budget):
            for link in pending:  # a chunk from each node in turn: the budget is shared
                if not link.ready or (budget is not None and consumed >= budget):
                    continue
                chunk = link.ready[0]
                n = len(chunk.records) if budget is None else min(len(chunk.records), budget - consumed)
                self.insert(chunk.stream, chunk.records[:n])
                chunk.ledger.inserted(chunk.ring, n)
                self.records[chunk.stream] += n
                consumed += n
                if n == len(chunk.records):
                    link.ready.popleft()  # drops the view: the object store may free it
                else:
                    chunk.records = chunk.records[n:]
            pending = [link for link in pending if link.ready]
        return consumed

    def _issue(self, budget: int | None) -> None:
        live = [link for link in self.links if link.live]
        if not live:
            return
        want = None if budget is None else budget - sum(link.buffered() + link.requested() for link in self.links)
        first = self._turn % len(live)
        for link in live[first:] + live[:first]:
            while len(link.inflight) < CREDITS and (want is None or want > 0):
                n = PULL_RECORDS if want is None else min(PULL_RECORDS, max(MIN_PULL, want))
                link.issue(n)
                want = None if want is None else want - n

    def _on_result(self, link: NodeLink, pull: Pull, result: PullResult) -> None:
        if link.ledger is not None and result.incarnation != link.ledger.incarnation and link.state != "dead":
            self._began(link, result.incarnation)
        if link.arrived(pull, result) is not None:
            self._take_counters(link, result.headers)
        self._take_episodes(result.episodes, result.bad_episode_records)

    def _on_error(self, link: NodeLink, exc: BaseException) -> None:
        if isinstance(exc, ray_setup.object_errors()):
            self.lost_results += 1  # its records show as a gap in the next pull's ranges
            logger.warning("node %d: a pull's result was lost (%s)", link.position, type(exc).__name__)
        else:
            link.lose_contact(f"{type(exc).__name__}: {exc}")

    def _take_counters(self, link: NodeLink, headers: np.ndarray) -> None:
        assert link.ledger is not None and self.mirror is not None
        link.ledger.observe(headers)
        if len(headers) == link.rings:
            self.mirror.update(link.first_stream, headers, link.ledger.next_seq)

    def _take_episodes(self, episodes: list[EpisodeSummary], bad: int) -> None:
        self.episodes.extend(episodes)
        self.episodes_total += len(episodes)
        self.bad_episode_records += bad
