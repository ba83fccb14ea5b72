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
import socket
import threading
import time
from typing import Any

from pipeline.common.errors import UserError

logger = logging.getLogger("mario.cluster")

RESOURCE = "collector_node"
INSTALL_HINT = 'pip install -e ".[ray]"'
# A one-node Ray started for the run: the object store holds pulls in flight and one copy
# of the weights, a few tens of MB; the default (30 % of RAM) would reserve GBs of /dev/shm.
LOCAL_OBJECT_STORE_BYTES = 256 * 2**20
TCP_TIMEOUT_S = 5.0  # a head that is up accepts a connection in milliseconds, even across a WAN
# ray.init against a live head takes a second or two, tens on a loaded one; past this,
# what listens at the address is not a Ray head (or one that hangs).
JOIN_TIMEOUT_S = 60.0


def require_ray() -> None:
    """Raise a one-line :class:`UserError` unless Ray can be imported (it is, once, here: ~1 s)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UserError(f"--backend ray needs Ray, which is not installed; install it with: {INSTALL_HINT}") from None


START_HINT = (
    "start a cluster with `ray start --head` on the head node and pass --ray-address the address it prints "
    "(HOST:6379 by default: the GCS port, not the dashboard's 8265), or leave out --ray-address to run a "
    "one-node Ray here"
)


def host_and_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` (or ``ray://HOST:PORT``, ``[IPv6]:PORT``) address, else None."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_address(address: str, timeout_s: float = TCP_TIMEOUT_S) -> None:
    """Raise a one-line :class:`UserError` unless something accepts a TCP connection at ``address``.

    ``ray.init`` given an address where nothing listens retries for many minutes, printing
    only its own warnings; a plain connect answers in milliseconds (refused) or within
    ``timeout_s`` (a host that drops the packets). ``auto`` and addresses without a port
    are left to Ray, which rejects them at once.
    """
    parsed = host_and_port(address)
    if parsed is None:
        return
    host, port = parsed
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as exc:
        why = f"the host name does not resolve: {exc.strerror or exc}"
    except TimeoutError:
        why = f"no answer within {timeout_s:.0f} s"
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise UserError(f"no Ray cluster answered at {address} ({why}); {START_HINT}")


class _DropMessage(logging.Filter):
    """Drops the log records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _join_bounded(address: str, timeout_s: float, options: dict[str, Any]) -> None:
    """``ray.init(address=...)``, given up after ``timeout_s`` with a one-line :class:`UserError`.

    Something that accepts connections but is not a Ray head (the dashboard's port, a
    head that hangs) makes ``ray.init`` retry for many minutes. It runs on a daemon thread
    so that the wait has an end; a thread given up on is left blocked, and the process
    ends with the error.
    """
    import ray

    outcome: dict[str, BaseException] = {}
    done = threading.Event()

    def join() -> None:
        try:
            ray.init(address=address, **options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc
        done.set()

    # Off the main thread Ray cannot set its SIGTERM handler and says so; the trainer's
    # event loop installs its own, so the warning would only confuse.
    quiet = _DropMessage("SIGTERM handler is not set")
    worker_logger = logging.getLogger("ray._private.worker")
    worker_logger.addFilter(quiet)
    try:
        threading.Thread(target=join, name="ray-init", daemon=True).start()
        finished = done.wait(timeout_s)
    finally:
        worker_logger.removeFilter(quiet)
    if not finished:
        raise UserError(
            f"no Ray cluster answered at {address}: something listens there, but ray.init did not "
            f"connect within {timeout_s:.0f} s; {START_HINT}"
        )
    if "error" in outcome:
        exc = outcome["error"]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UserError(f"cannot join the Ray cluster at {address} ({first}); {START_HINT}") from None


def connect(address: str, *, join_timeout_s: float = JOIN_TIMEOUT_S) -> bool:
    """Join (or, for ``address == ""``, start) a Ray cluster; return whether this call did.

    A process already connected (a test's cluster) is left as it is. A one-node Ray
    started here offers :data:`RESOURCE` on this machine, so ``--backend ray`` runs its
    collectors locally through agents, as a cluster of one. Joining an address fails with
    one line within seconds where nothing listens (:func:`check_address`), and within
    ``join_timeout_s`` where something listens that does not answer as Ray.
    """
    import ray

    if ray.is_initialized():
        return False
    options: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True)
    if address:
        check_address(address)
        _join_bounded(address, join_timeout_s, options)
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


def object_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean a result is gone although its agent may live (its records are lost)."""
    from ray import exceptions as E

    return tuple(
        getattr(E, name)
        for name in ("ObjectLostError", "OwnerDiedError", "ObjectFetchTimedOutError", "ObjectReconstructionFailedError")
        if hasattr(E, name)
    )
