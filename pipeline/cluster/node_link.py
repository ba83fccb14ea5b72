"""The learner's side of one node: its agent, pulls in flight, weights transfers, failures.

A :class:`NodeLink` is one *place* of the run (a position: a fixed range of replay
streams and collector numbers). The agent holding it may restart (a new incarnation,
accepted as soon as it answers) or die with its node, after which the place is free for
the next node that joins. Each incarnation has its own
:class:`~pipeline.cluster.batches.IncarnationLedger`.

Pulls are credits: at most :data:`CREDITS` in flight, each for at most
:data:`PULL_RECORDS` records. An asyncio task per link awaits them, oldest first, with
``asyncio.wrap_future(ref.future())`` (never ``ray.get`` on the event loop), and turns
each into chunks ready for the replay. Weights go out at most one transfer at a time,
always the newest version; the status call (counters, supervision, epsilon) likewise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.cluster.batches import IncarnationLedger, PullResult

logger = logging.getLogger("mario.cluster")

CREDITS = 3  # pulls in flight per node
PULL_RECORDS = 512  # records per pull at most (~3.6 MB)
MIN_PULL = 32  # a budget-limited pull asks for at least this many (the surplus waits in the learner)


@dataclass
class Pull:
    ref: Any  # ObjectRef of a PullResult
    requested: int
    issued_at: float


@dataclass
class Chunk:
    """Records received and not yet inserted (a zero-copy view of the object store)."""

    stream: int
    records: np.ndarray
    ledger: IncarnationLedger
    ring: int


class NodeLink:
    """One place of the run and the agent that holds it (see the module docstring)."""

    def __init__(self, position: int, rings: int, collectors: int) -> None:
        self.position = position
        self.rings = rings
        self.first_stream = position * rings
        self.collectors = collectors
        self.handle: Any = None
        self.node_id = ""
        self.address = ""
        self.state = "free"  # free -> starting -> live <-> unreachable -> dead (-> starting again)
        self.ledger: IncarnationLedger | None = None
        self.ledgers: list[IncarnationLedger] = []  # every incarnation this place had
        self.inflight: deque[Pull] = deque()
        self.ready: deque[Chunk] = deque()
        self.wake: asyncio.Event | None = None
        self.task: asyncio.Task | None = None
        # Calls whose completion is checked without blocking (the backend's _Call).
        self.start_ref: Any = None
        self.status_ref: Any = None
        self.weights_ref: Any = None
        self.weights_pending: tuple | None = None
        self.unreachable_since = 0.0
        self.restarts = [0] * collectors  # collector restarts, all incarnations
        self._restarts_seen = [0] * collectors  # this incarnation's, as last reported
        self.incarnations = 0
        self.alive_collectors = 0
        self.cpu_pct = self.rss_mb = 0.0
        self.pull_s = 0.0  # since the last gauges() call
        self.pulls = 0
        self.pull_bytes = 0

    # -- lifecycle ----------------------------------------------------------------------------
    def attach(self, handle: Any, node_id: str, address: str) -> None:
        self.handle, self.node_id, self.address = handle, node_id, address
        self.state = "starting"
        self.start_ref = self.status_ref = self.weights_ref = None

    @property
    def live(self) -> bool:
        return self.state == "live"

    def began(self, incarnation: int) -> bool:
        """The agent answered as ``incarnation``; True when that is a new one (a start or restart)."""
        if self.ledger is not None and self.ledger.incarnation == incarnation:
            return False
        if self.ledger is not None and not self.ledger.closed:
            self.ledger.close("agent restarted")
        self.ledger = IncarnationLedger(incarnation, self.node_id, self.rings)
        self.ledgers.append(self.ledger)
        self.incarnations += 1
        self._restarts_seen = [0] * self.collectors
        self.state = "live"
        return True

    def lose_contact(self, reason: str) -> None:
        """The agent stopped answering: log once, forget what was in flight (its records
        show as gaps, or as lost when the incarnation ends)."""
        if self.state in ("live", "starting"):
            logger.warning(
                "node %d (%s): agent unreachable (%s); going on with the other nodes",
                self.position,
                self.address,
                reason.splitlines()[0][:200],
            )
            self.unreachable_since = time.monotonic()
            self.state = "unreachable"
        self.inflight.clear()
        self.status_ref = self.weights_ref = None

    def bury(self, reason: str) -> None:
        """The agent is gone for good (its node died): what it never handed over is lost."""
        if self.state == "dead":
            return
        if self.ledger is not None and not self.ledger.closed:
            self.ledger.close(reason)
        lost = int(self.ledger.lost.sum()) if self.ledger is not None else 0
        logger.warning("node %d (%s): %s; %d record(s) lost with it", self.position, self.address, reason, lost)
        self.inflight.clear()
        self.state = "dead"
        self.handle = self.status_ref = self.weights_ref = self.start_ref = None
        if self.wake is not None:
            self.wake.set()

    # -- pulls --------------------------------------------------------------------------------
    def issue(self, records: int) -> None:
        self.inflight.append(Pull(self.handle.pull.remote(records), records, time.monotonic()))
        if self.wake is not None:
            self.wake.set()

    def requested(self) -> int:
        return sum(p.requested for p in self.inflight)

    def buffered(self) -> int:
        return sum(len(c.records) for c in self.ready)

    def arrived(self, pull: Pull, result: PullResult) -> PullResult | None:
        """File a pull's records as chunks; None when it belongs to an incarnation already ended."""
        self.pull_s += time.monotonic() - pull.issued_at
        self.pulls += 1
        self.pull_bytes += int(result.data.nbytes)
        ledger = self.ledger
        if ledger is None or result.incarnation != ledger.incarnation:
            return None  # an incarnation that has ended (the backend starts a new one first)
        ledger.observe(result.headers)
        records = result.records
        for ring, offset, count in ledger.accept(result.ranges):
            self.ready.append(Chunk(self.first_stream + ring, records[offset : offset + count], ledger, ring))
        return result

    async def receive(self, on_result: Any, on_error: Any) -> None:
        """Await this link's pulls in the order they were sent (runs on the learner's loop)."""
        assert self.wake is not None
        while self.state != "dead":
            if not self.inflight:
                self.wake.clear()
                await self.wake.wait()
                continue
            pull = self.inflight[0]
            try:
                result = await asyncio.wrap_future(pull.ref.future())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - Ray's errors, sorted by the backend
                if self.inflight and self.inflight[0] is pull:  # else: forgotten when contact was lost
                    self.inflight.popleft()
                    on_error(self, exc)
                continue
            if self.inflight and self.inflight[0] is pull:
                self.inflight.popleft()
                on_result(self, pull, result)

    # -- counters -----------------------------------------------------------------------------
    def note_restarts(self, reported: list[int]) -> None:
        for i, count in enumerate(reported[: self.collectors]):
            self.restarts[i] += max(0, count - self._restarts_seen[i])
            self._restarts_seen[i] = count

    def take_pull_stats(self) -> tuple[float, int]:
        """Mean pull latency (ms) and pulls since the last call."""
        pulls, seconds = self.pulls, self.pull_s
        self.pulls, self.pull_s = 0, 0.0
        return (1000.0 * seconds / pulls if pulls else float("nan")), pulls

    def inflight_bytes(self) -> int:
        """Bytes pulled and not yet inserted, plus the most the pulls in flight may carry."""
        from pipeline.transport.records import RECORD_BYTES

        return int(sum(c.records.nbytes for c in self.ready)) + self.requested() * RECORD_BYTES

    def accounting(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "state": self.state,
            "address": self.address,
            "incarnations": [ledger.as_dict() for ledger in self.ledgers],
            "collector_restarts": list(self.restarts),
        }
