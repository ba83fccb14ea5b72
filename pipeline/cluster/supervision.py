"""The Ray backend's supervision: agents placed, started, watched, replaced; weights sent out.

:class:`NodeSupervision` is the half of :class:`~pipeline.cluster.ray_backend.RayBackend`
that runs twice a second from the trainer's watch task (:meth:`NodeSupervision.check`),
never waiting on a call: each agent's status (counters, supervision, episodes; it carries
epsilon out), the newest weights where no transfer is in flight, restarted agents (a new
incarnation, accepted), dead nodes (logged once, their unreceived records counted as
lost, their segments removed where this machine can see them), and new nodes placed in
free places. :class:`ClusterSupervisor` is what the trainer sees of it: the local
:class:`~pipeline.run.collector.supervisor.Supervisor`'s face.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.cluster import ray_setup
from pipeline.cluster.batches import MirrorRing
from pipeline.cluster.node_link import NodeLink, Pull
from pipeline.transport import segments
from pipeline.transport.weights import WeightsBlock

logger = logging.getLogger("mario.cluster")

DISCOVER_S = 2.0  # how often the cluster's node list is read
GIVE_UP_S = 60.0  # an agent unreachable this long on a live node is replaced
CALL_TIMEOUT_S = 60.0  # blocking calls at shutdown only
SWEEP_S = 60.0  # after an agent died, how long its segments are looked for on this machine


class _Call:
    """A remote call whose completion is checked without blocking (its ObjectRef's future)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.future = ref.future()

    def done(self) -> bool:
        return self.future.done()


class _RemoteState:
    """What the trainer's per-collector rows read of a supervisor state (no local process)."""

    process = None

    def __init__(self, restarts: int) -> None:
        self.restarts = restarts


class ClusterSupervisor:
    """The trainer's supervisor stand-in: the agents supervise their collectors, this reports."""

    def __init__(self, backend: NodeSupervision) -> None:
        self.backend = backend
        self.slots: list = []
        self.events: list[str] = []

    @property
    def states(self) -> list[_RemoteState]:
        return [_RemoteState(r) for link in self.backend.links for r in link.restarts]

    @property
    def restarts(self) -> int:
        """Collector restarts on every node, plus agents that came back as a new incarnation."""
        return sum(sum(link.restarts) + max(0, link.incarnations - 1) for link in self.backend.links)

    @property
    def fatal(self) -> str:
        return self.backend.fatal

    def start_all(self) -> None:
        self.backend.start_all()

    def check(self) -> None:
        self.backend.check()

    def stop(self, timeout_s: float = 10.0) -> None:
        self.backend.stop_all()

    def alive(self) -> int:
        return sum(link.alive_collectors for link in self.backend.links if link.live)


class NodeSupervision:
    """Placing, starting and watching the agents (mixed into RayBackend, which owns the state)."""

    cfg: Any
    target: Callable | None
    links: list[NodeLink]
    mirror: MirrorRing | None
    weights: WeightsBlock | None
    run_tag: str
    num_floats: int
    log_dir: Path
    fatal: str
    stopping: bool
    _latest: tuple | None
    _agent_class: Any
    _last_discovery: float
    _sweep_until: float
    _on_result: Callable[[NodeLink, Pull, Any], None]
    _on_error: Callable[[NodeLink, BaseException], None]
    _take_counters: Callable[[NodeLink, np.ndarray], None]
    _take_episodes: Callable[[list, int], None]

    def start_all(self) -> None:
        for link in self.links:
            if link.handle is not None and link.start_ref is None:
                link.start_ref = _Call(link.handle.start.remote())
            self._start_receiving(link)

    def _start_receiving(self, link: NodeLink) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the trainer's loop (a test driving poll() by hand)
            return
        if link.task is None or link.task.done():
            link.wake = asyncio.Event()
            link.task = loop.create_task(link.receive(self._on_result, self._on_error))

    def _place(self, link: NodeLink, node_id: str, address: str, *, start: bool) -> None:
        """Put a new agent on ``node_id`` at ``link``'s place (its weights first, then its start)."""
        if self._agent_class is None:
            import ray

            from pipeline.cluster.node_agent import NodeAgent

            self._agent_class = ray.remote(NodeAgent)
        handle = self._agent_class.options(**ray_setup.agent_options(node_id)).remote(
            self.cfg,
            run_tag=self.run_tag,
            num_floats=self.num_floats,
            position=link.position,
            log_dir=str(self.log_dir),
            target=self.target,
        )
        link.attach(handle, node_id, address)
        link.start_ref = None
        if self._latest is not None:
            link.weights_pending = self._latest
            self._send_weights(link)
        if start:
            link.start_ref = _Call(handle.start.remote())
            self._start_receiving(link)

    def _send_weights(self, link: NodeLink) -> None:
        """At most one transfer in flight per node; when it ends, the newest version goes next."""
        if link.weights_pending is None or link.handle is None or link.state in ("unreachable", "dead"):
            return
        if link.weights_ref is not None and not link.weights_ref.done():
            return
        ref, version, epsilon, step = link.weights_pending
        link.weights_pending = None
        link.weights_ref = _Call(link.handle.set_weights.remote(ref, version, epsilon, step))

    def _began(self, link: NodeLink, incarnation: int) -> None:
        assert self.mirror is not None
        old = link.ledger
        restarted = old is not None and not old.closed  # else: a new agent in a dead node's place
        if old is not None:
            if restarted:
                old.close("agent restarted")
            self.mirror.rebase(link.first_stream, link.rings)
        link.began(incarnation)
        if not restarted:
            logger.info("node %d (%s): agent started (incarnation %012x)", link.position, link.address, incarnation)
        else:
            assert old is not None
            logger.warning(
                "node %d (%s): agent restarted as incarnation %012x; %d record(s) of the previous one lost",
                link.position,
                link.address,
                incarnation,
                int(old.lost.sum()),
            )
            link.weights_pending = link.weights_pending or self._latest  # a new block starts empty
            self._sweep_until = time.monotonic() + SWEEP_S  # the dead incarnation's segments
            if link.handle is not None and not self.stopping:  # Ray re-ran the constructor, not start()
                link.start_ref = _Call(link.handle.start.remote())
        self._send_weights(link)

    def check(self) -> None:
        """One supervision pass (twice a second, on the event loop): never waits on a call."""
        epsilon = self.weights.epsilon if self.weights is not None else None
        for link in self.links:
            if link.start_ref is not None and link.start_ref.done() and link.state == "starting":
                try:
                    info = link.start_ref.future.result()
                except Exception as exc:  # noqa: BLE001 - sorted below
                    link.lose_contact(f"start failed: {exc}")
                else:
                    self._began(link, info["incarnation"])
            if link.state in ("live", "unreachable"):
                self._check_status(link, epsilon)
                self._send_weights(link)
            if link.state == "unreachable" and time.monotonic() - link.unreachable_since > GIVE_UP_S:
                self._retire(link, f"agent unreachable for {GIVE_UP_S:.0f} s")
        if time.monotonic() - self._last_discovery >= DISCOVER_S and not self.stopping:
            self._last_discovery = time.monotonic()
            self._discover()
            if time.monotonic() < self._sweep_until:
                remove_dead_segments()

    def _check_status(self, link: NodeLink, epsilon: float | None) -> None:
        call = link.status_ref
        if call is None:
            link.status_ref = _Call(link.handle.status.remote(epsilon))
            return
        if not call.done():
            return
        link.status_ref = None
        try:
            status = call.future.result()
        except Exception as exc:  # noqa: BLE001 - the agent is gone or restarting
            link.lose_contact(f"{type(exc).__name__}: {exc}")
            return
        if status.get("closed"):
            return
        if link.state == "unreachable":
            logger.warning("node %d (%s): agent answers again", link.position, link.address)
        if link.ledger is None or status["incarnation"] != link.ledger.incarnation:
            self._began(link, status["incarnation"])
        link.state = "live"
        self._take_counters(link, status["headers"])
        self._take_episodes(status["episodes"], status["bad_episode_records"])
        link.note_restarts(status["restarts"])
        link.alive_collectors, link.cpu_pct, link.rss_mb = status["alive"], status["cpu_pct"], status["rss_mb"]
        if status["fatal"] and not self.fatal:
            self.fatal = f"node {link.position} ({link.address}): {status['fatal']}"

    def _retire(self, link: NodeLink, reason: str) -> None:
        handle = link.handle
        link.bury(reason)
        if handle is not None:
            try:
                import ray

                ray.kill(handle)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._sweep_until = time.monotonic() + SWEEP_S  # its processes may take a while to go

    def _discover(self) -> None:
        """Bury the agents of nodes that left; place agents on nodes that joined, while places are free."""
        try:
            nodes = ray_setup.collector_nodes()
        except Exception as exc:  # noqa: BLE001 - the GCS may be busy; try again next time
            logger.debug("node discovery failed: %s", exc)
            return
        for link in self.links:
            if link.state not in ("free", "dead") and link.node_id not in nodes:
                self._retire(link, "its node left the cluster")
        held = {link.node_id for link in self.links if link.state not in ("free", "dead")}
        free = [link for link in self.links if link.state in ("free", "dead")]
        for node_id, address in nodes.items():
            if node_id in held:
                continue
            if not free:
                logger.info("node %s joined but every place is taken; it stays idle", address)
                continue
            link = free.pop(0)
            logger.warning("node %s joins the run at place %d", address, link.position)
            self._place(link, node_id, address, start=True)

    def stop_all(self) -> None:
        """Stop every node's collectors, then receive what is in flight and what the rings still hold."""
        import ray

        self.stopping = True
        calls = [(link, link.handle.stop_collectors.remote()) for link in self.links if link.state == "live"]
        for link, ref in calls:
            try:
                ray.get(ref, timeout=CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001
                link.lose_contact(f"{type(exc).__name__}: {exc}")
        for link in self.links:
            if link.state != "live":
                continue
            pulls = list(link.inflight)
            link.inflight.clear()
            pulls.append(Pull(link.handle.drain.remote(), 0, time.monotonic()))
            for pull in pulls:
                try:
                    self._on_result(link, pull, ray.get(pull.ref, timeout=CALL_TIMEOUT_S))
                except Exception as exc:  # noqa: BLE001
                    self._on_error(link, exc)


def remove_dead_segments() -> None:
    """Unlink segments whose owner died, on this machine.

    An agent killed with its node's Ray processes takes its collectors and the resource
    tracker they share down with it (Ray kills a worker's children as it exits), so
    nothing of it unlinks its blocks. Its reaper (:mod:`~pipeline.cluster.reaper`) does,
    a second or two later; should that have failed, the next agent started on the machine
    does (owner pid gone), and so does this, for the nodes that share the learner's machine.
    """
    removed = segments.remove_stale_segments()
    if removed:
        logger.info("removed %d shared-memory segment(s) of dead agents: %s", len(removed), ", ".join(removed))
