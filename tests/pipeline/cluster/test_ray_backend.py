"""The Ray backend on a real multi-node cluster on this machine (``ray.cluster_utils.Cluster``).

One cluster for the whole module: a head node (the learner's, no collector capacity) and
two nodes offering ``collector_node``, each with a small object store. The nodes share
this machine's /dev/shm, so every node's segments are visible here: the module's leak
check (tests/conftest.py) runs after the cluster is shut down.

Work is bounded in records and frames; every timeout is a safety net only.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI installs it")

from config import PRESETS, Config  # noqa: E402
from pipeline.cluster import supervision  # noqa: E402
from pipeline.cluster.ray_backend import RayBackend  # noqa: E402
from pipeline.transport.segments import PREFIX, project_segments  # noqa: E402
from tests.conftest import run_main, wait_until  # noqa: E402
from tests.pipeline.cluster.numbered import producer_id  # noqa: E402
from tests.pipeline.cluster.ray_driving import (  # noqa: E402
    RECORDS,
    SAFETY_S,
    Epsilon,
    Sink,
    check_stream,
    drive,
    local_records,
    make_backend,
    node_weights,
    tag_of,
)

ROOT = Path(__file__).resolve().parents[3]
STORE = 80 * 2**20
NODE_ARGS = dict(num_cpus=1, resources={"collector_node": 1}, object_store_memory=STORE)


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=1,
            include_dashboard=False,
            object_store_memory=100 * 2**20,
            # A removed node is declared dead in ~2 s instead of ~30 s.
            _system_config={"health_check_period_ms": 500, "health_check_failure_threshold": 4},
        ),
    )
    try:
        nodes = [c.add_node(**NODE_ARGS) for _ in range(2)]
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
        c.wait_for_nodes()
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


def test_every_record_arrives_once_in_order_from_two_nodes_and_weights_reach_both(cluster, tmp_path):
    total = 1500
    backend, sink = make_backend(tmp_path, total)
    try:
        # A small budget per poll exercises split chunks and the shared budget.
        drive(backend, lambda: backend.total_records >= 4 * total, budget=lambda: 100)
        assert [link.state for link in backend.links] == ["live", "live"]
        node_ids = {link.ledger.node_id for link in backend.links}
        assert len(node_ids) == 2
        for link in backend.links:
            tag = tag_of(backend, link.ledger)
            for ring in range(2):
                stream = link.first_stream + ring
                records = sink.records(stream)
                assert len(records) == total
                check_stream(records, producer_id(tag, ring))
            assert list(link.ledger.delivered) == [total, total]
            assert int(link.ledger.lost.sum()) == 0 and int(link.ledger.duplicates.sum()) == 0
        summary = backend.summary()
        assert summary["records_delivered"] == 4 * total and summary["records_lost"] == 0
        # The mirror reads like local slots: every committed record received.
        assert [s.counters.write_seq for s in backend.mirror.slots] == [total] * 4
        assert [s.counters.read_seq for s in backend.mirror.slots] == [total] * 4

        # Weights: one ray.put per publish; each node's block ends at the newest version.
        for version in range(1, 21):
            backend.publish(np.full(16, version, np.float32), version=version, epsilon=0.1, learner_step=version)
        drive(
            backend, lambda: all(node_weights(backend, link)[1][0] == 20 for link in backend.links)
        )  # version 0 reads zeros
        for link in backend.links:
            node_version, flat = node_weights(backend, link)
            assert np.all(flat == 20) and 1 <= node_version <= 20
    finally:
        backend.stop_all()
        backend.close()
    wait_until(lambda: not [n for n in project_segments() if n.startswith(f"{PREFIX}raytest")], 60, "agents unlink")


def test_a_restarted_agent_is_accepted_as_a_new_incarnation_and_nothing_is_counted_twice(
    cluster, tmp_path, monkeypatch
):
    # Ray's restart of the killed agent is what is tested. On one busy core it can take
    # longer than the supervisor's 60 s before an unreachable agent is replaced (the other
    # path, with the same ledger outcome but another reason): give the restart the safety net.
    monkeypatch.setattr(supervision, "GIVE_UP_S", SAFETY_S)
    total = 1500
    backend, sink = make_backend(tmp_path, total)
    try:
        drive(
            backend,
            lambda: all(link.ledger is not None and link.ledger.next_seq.min() >= 200 for link in backend.links),
        )
        link, other = backend.links
        old = link.ledger
        old_tag = tag_of(backend, old)
        os.kill(ray.get(link.handle.info.remote(), timeout=SAFETY_S)["pid"], signal.SIGKILL)  # Ray restarts it
        drive(backend, lambda: link.ledger is not old and link.live and link.ledger.delivered.min() >= total)
        fresh = link.ledger
        assert old.closed and old.end_reason == "agent restarted" and fresh.node_id == old.node_id
        assert link.incarnations == 2
        for ring in range(2):
            got = sink.records(link.first_stream + ring)
            before = int(old.delivered[ring])
            assert before == old.next_seq[ring] and old.lost[ring] == old.committed[ring] - before
            check_stream(got[:before], producer_id(old_tag, ring))
            check_stream(got[before:], producer_id(tag_of(backend, fresh), ring))
            assert len(got) - before == total
        assert int(old.duplicates.sum()) == int(fresh.duplicates.sum()) == 0
        drive(backend, lambda: other.ledger.delivered.min() >= total)  # the other node never noticed
        assert other.incarnations == 1
        drive(backend, lambda: not [n for n in project_segments() if old_tag in n], timeout_s=90)
    finally:
        backend.stop_all()
        backend.close()


@pytest.mark.slow
def test_a_removed_node_is_reported_once_with_its_lost_records_and_a_new_node_takes_its_place(
    cluster, tmp_path, caplog
):
    c, nodes = cluster
    total, capacity = 2000, 64
    backend, sink = make_backend(tmp_path, total, capacity=capacity)
    budget: dict[str, int | None] = {"value": None}
    survivor, victim = backend.links
    try:
        # Only the victim's progress ends this phase: the nodes start at different times,
        # and waiting on both would let an early victim run through all of its records.
        drive(backend, lambda: victim.ledger is not None and victim.ledger.next_seq.min() >= 300)
        # The learner falls behind (no budget): it stops pulling, so the victim's rings fill
        # and its collector stalls; what the rings hold is then known exactly. The survivor
        # is waited for here too, its rings filling likewise.
        budget["value"] = 0
        ledger = victim.ledger
        drive(
            backend,
            lambda: (
                survivor.live and not victim.inflight and bool(np.all(ledger.committed == ledger.next_seq + capacity))
            ),
            budget=lambda: budget["value"],
        )
        received = ledger.next_seq.copy()
        victim_tag = tag_of(backend, ledger)
        assert [n for n in project_segments() if n.startswith(f"{PREFIX}{victim_tag}_")]
        c.remove_node(next(n for n in nodes if n.node_id == ledger.node_id), allow_graceful=False)
        with caplog.at_level("WARNING", logger="mario.cluster"):
            drive(backend, lambda: victim.state == "dead", budget=lambda: budget["value"])
        assert ledger.closed and list(ledger.lost) == [capacity, capacity]
        reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith("node 1 ")]
        assert len([m for m in reports if "lost with it" in m]) == 1, reports
        # The consumer goes on: everything of the survivor, and what the victim handed over.
        budget["value"] = None
        drive(backend, lambda: survivor.ledger.delivered.min() >= total and not victim.ready)
        for ring in range(2):
            check_stream(
                sink.records(survivor.first_stream + ring), producer_id(tag_of(backend, survivor.ledger), ring)
            )
            got = sink.records(victim.first_stream + ring)
            assert len(got) == received[ring] == ledger.delivered[ring]
            check_stream(got, producer_id(victim_tag, ring))
        # Its segments do not outlive it (removed by the learner, as their owner pid is gone).
        drive(backend, lambda: not [n for n in project_segments() if victim_tag in n], timeout_s=90)

        # A node added later takes the free place as a new incarnation.
        nodes.append(c.add_node(**NODE_ARGS))
        drive(backend, lambda: victim.ledger is not ledger and victim.live and victim.ledger.delivered.min() >= total)
        fresh = victim.ledger
        assert fresh.incarnation != ledger.incarnation and fresh.node_id != ledger.node_id
        for ring in range(2):
            got = sink.records(victim.first_stream + ring)
            check_stream(got[received[ring] :], producer_id(tag_of(backend, fresh), ring))
        summary = backend.summary()
        assert summary["records_lost"] == 2 * capacity and summary["duplicates_dropped"] == 0
        first, second = summary["nodes"][1]["incarnations"]
        assert first["ended"] == "its node left the cluster" and not second["ended"]
    finally:
        backend.stop_all()
        backend.close()


def test_a_driver_killed_by_sigkill_leaves_no_segment_of_its_agents(cluster, tmp_path):
    """Ray kills the agents of a driver that died, and with them their collectors and
    resource tracker, before any of their code runs; each agent's reaper (a process outside
    Ray's tree) unlinks its segments. Nothing of the run is left in /dev/shm."""
    import subprocess
    import sys

    from tests.pipeline.cluster.killed_driver import RUN_TAG

    c, _ = cluster
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.pipeline.cluster.killed_driver", c.address, str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ours() -> list[str]:
        return [n for n in project_segments() if n.startswith(f"{PREFIX}{RUN_TAG}")]

    try:
        assert driver.stdout is not None
        agents = []
        for line in driver.stdout:  # ends if the driver dies first
            if line.startswith("agent "):
                agents.append(int(line.split()[1]))
            if line.strip() == "ready":
                break
        assert len(agents) == 2, f"the driver ended early ({driver.poll()})"
        assert len(ours()) == 4  # a ring and a weights block per agent
    finally:
        driver.kill()
        driver.wait()
    wait_until(lambda: not ours(), 120, "the killed driver's agents' segments to be unlinked")
    for pid in agents:  # Ray took the agents down with their driver
        wait_until(lambda pid=pid: not _running(pid), 120, f"agent {pid} to end")


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_node_collectors_deliver_what_the_same_local_collectors_deliver_with_the_same_weights(cluster, tmp_path):
    """Real Catch collectors, one per node, act with weights published once through Ray; the
    learner receives, stream by stream and byte for byte, the records that the same two
    collectors write into a local ring (the local backend's consolidator reading them) with
    the same weights and epsilon. So Ray carries the weights to every node intact, the
    node's collectors seed as the local ones of their number (no two nodes play alike), and
    Ray carries their records back in order. Bounded in records: RECORDS per stream."""
    import torch

    from envs import make_env
    from pipeline.learning.flat_state import flatten_state
    from pipeline.learning.policy import network_of

    cfg = Config(
        env_id="Catch-v0", num_processes=1, envs_per_collector=2, ring_capacity=64, heartbeat_timeout_s=60.0, seed=7
    )
    torch.manual_seed(0)
    net = network_of(cfg, int(make_env("Catch-v0").action_space.n)).eval()
    flat = flatten_state(net.state_dict())
    epsilon, streams = 0.25, 4  # greedy steps follow the weights, the others the collector's seed

    local = local_records(dataclasses.replace(cfg, num_processes=2), flat, epsilon, tmp_path)

    backend = RayBackend(cfg)  # the real collectors
    assert backend.prepare(cfg) == 2
    sink = Sink()
    backend.open(run_tag="rayeq", num_floats=len(flat), log_dir=tmp_path, weights=Epsilon(epsilon), insert=sink)
    try:
        backend.publish(flat, version=1, epsilon=epsilon, learner_step=0)  # before the agents start
        drive(backend, lambda: all(len(sink.records(s)) >= RECORDS for s in range(streams)))
        assert [link.first_stream for link in backend.links] == [0, 2]
        for stream in range(streams):
            got = sink.records(stream)[:RECORDS]
            assert np.array_equal(got, local[stream]), f"stream {stream} differs from the local collectors'"
        assert not np.array_equal(local[0], local[2])  # the two nodes did not play alike
        for link in backend.links:
            version, node_flat = node_weights(backend, link)
            assert version == 1 and np.array_equal(node_flat, flat)
        assert backend.summary()["records_lost"] == 0
    finally:
        backend.stop_all()
        backend.close()
    wait_until(lambda: not [n for n in project_segments() if n.startswith("mario_rayeq")], 60, "agents unlink")


@pytest.mark.slow
def test_main_on_the_ray_backend_trains_and_accounts_for_every_record_per_node_and_ring(cluster, tmp_path):
    """``python main.py --backend ray`` on the cluster: two nodes with one Catch collector
    each feed the learner at the preset's replay ratio, the learner updates and publishes,
    and summary.json accounts for every record per node and ring. That the records and
    weights Ray carries are the local collectors' own is the test above; that the whole
    pipeline learns Catch is tests/pipeline/run/trainer/test_trainer.py's."""
    c, _ = cluster
    frames = 2000  # some 110 updates after the 200 of warm-up: every part of the loop runs
    result = run_main(
        ["--preset", "tiny", "--backend", "ray", "--ray-address", c.address, "--total-frames", str(frames)]
        + ["--run-dir", str(tmp_path), "--run-name", "ray", "--monitor", "log"],
        cwd=ROOT,
        timeout_s=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "ray"
    summary = json.loads((run / "summary.json").read_text())
    counters = summary["counters"]
    assert counters["updates"] > 0 and counters["frames"] >= frames
    # The replay ratio holds through the backend's pull budget: at every report after the
    # warm-up, the samples drawn are within a few batches of the ratio times the records
    # inserted past it (the run's last report also counts what was drained at the stop).
    tiny = PRESETS["tiny"]
    with (run / "metrics.csv").open(newline="") as f:
        reports = [r for r in csv.DictReader(f) if float(r["updates"]) > 0][:-1]
    assert reports
    for report in reports:
        paced = tiny["replay_ratio"] * (float(report["records"]) - tiny["learning_starts"])
        assert abs(float(report["samples"]) - paced) <= 8 * tiny["batch_size"], report
    accounting = summary["cluster"]
    assert accounting["records_lost"] == 0 and accounting["duplicates_dropped"] == 0
    assert accounting["records_delivered"] == summary["replay_inserted"] == summary["this_process"]["records"]
    assert len(accounting["nodes"]) == 2
    for node in accounting["nodes"]:
        (incarnation,) = node["incarnations"]
        ring = incarnation["rings"][0]
        assert ring["committed"] == ring["received"] == ring["delivered"] > 0
    assert "node0" in result.stderr and "node1" in result.stderr  # the monitor's per-node figures
