"""Ray itself: is it installed, which cluster to join, which nodes collect, how agents are placed.

Ray is an optional extra (``pip install -e ".[ray]"``, bare ``ray``): nothing here imports
it at module level, and :func:`require_ray` turns its absence into one line for the user.

A node offers collector capacity by declaring the custom resource :data:`RESOURCE`
(``ray start --address=HEAD:6379 --resources='{"collector_node": 1}'``); exactly one
node agent runs on each such node, pinned to it (hard node affinity: it dies with the
node, and the learner places a new one when a node joins).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from pipeline.common.errors import UserError

logger = logging.getLogger("mario.cluster")

RESOURCE = "collector_node"
INSTALL_HINT = 'pip install -e ".[ray]"'
# A one-node Ray started for the run: the object store holds pulls in flight and one copy
# of the weights, a few tens of MB; the default (30 % of RAM) would reserve GBs of /dev/shm.
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20


def require_ray() -> None:
    """Raise a one-line :class:`UserError` unless Ray can be imported (it is, once, here: ~1 s)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UserError(f"--backend ray needs Ray, which is not installed; install it with: {INSTALL_HINT}") from None


def connect(address: str) -> bool:
    """Join (or, for ``address == ""``, start) a Ray cluster; return whether this call did.

    A process already connected (a test's cluster) is left as it is. A one-node Ray
    started here offers :data:`RESOURCE` on this machine, so ``--backend ray`` runs its
    collectors locally through agents, as a cluster of one.
    """
    import ray

    if ray.is_initialized():
        return False
    options: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        ray.init(address=address, **options)
    else:
        ray.init(resources={RESOURCE: 1}, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **options)
    return True


def collector_nodes() -> dict[str, str]:
    """Alive nodes that offer collector capacity: node id -> address."""
    import ray

    return {
        node["NodeID"]: node.get("NodeManagerAddress", "?")
        for node in ray.nodes()
        if node.get("Alive") and node.get("Resources", {}).get(RESOURCE, 0) >= 1
    }


def wait_for_nodes(count: int, timeout_s: float) -> dict[str, str]:
    """Wait until at least ``max(count, 1)`` collector nodes are alive; return them (maybe fewer at the timeout)."""
    deadline = time.monotonic() + timeout_s
    wanted = max(1, count)
    while True:
        nodes = collector_nodes()
        if len(nodes) >= wanted or time.monotonic() >= deadline:
            return nodes
        time.sleep(0.5)


def agent_options(node_id: str) -> dict[str, Any]:
    """Actor options of the agent pinned to ``node_id``.

    Restarted without limit while its node lives (a restart re-runs the constructor: a
    new incarnation with new segments); no task retries, so a call in flight when it died
    fails and the learner counts what it carried as lost instead of receiving it twice.
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return dict(
        num_cpus=0,
        resources={RESOURCE: 1},
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        max_restarts=-1,
        max_task_retries=0,
    )


def actor_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the agent (or its node) is gone or restarting."""
    from ray import exceptions as E

    return tuple(
        getattr(E, name)
        for name in ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError")
        if hasattr(E, name)
    )


def object_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean a result is gone although its agent may live (its records are lost)."""
    from ray import exceptions as E

    return tuple(
        getattr(E, name)
        for name in ("ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError", "ObjectReconstructionFailedError")
        if hasattr(E, name)
    )
