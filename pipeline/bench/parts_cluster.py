"""The suite's ``ray`` part: what the Ray backend's extra hop costs, and what one pull path carries.

``ray`` (only with ``--only ray``; it needs the ``[ray]`` extra)
    1. The same collectors (``NUM_PROCESSES``, at ``epsilon_end``, the learner draining
       but not training) run three times, back to back: local, through the Ray backend
       (a one-node Ray started for the run: one node agent on this machine runs the
       collectors and the learner pulls from it), local again.
       ``ray_efficiency = ray frames/s / mean(local before, after)``.
    2. One node agent whose collectors are flooding producers (a record copy and commit
       per record, no emulator) and the learner pulling from it into a real CPU replay:
       the records/s one pull path carries. ``pull_path_ratio`` divides it by the records/s
       the node's real collectors produced in step 1 (the target is 20x).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.bench.parts_collection import CollectionParts, fixed_epsilon
from pipeline.bench.parts_consolidator import _flood, make_sink
from pipeline.bench.suite_base import PartResult, log
from pipeline.common.child import ParentWatch

PULL_WARMUP_S = 2.0


class _StopWord:
    """``is_set()`` for the flood loop: the agent's weights block says stop, or the agent is gone."""

    def __init__(self, words: np.ndarray, parent_pid: int) -> None:
        self.words, self.parent = words, ParentWatch(parent_pid)

    def is_set(self) -> bool:
        return bool(self.words[5]) or self.parent.gone()  # word 5: the weights block's stop


def flood_collector(args: Any) -> None:
    """A Supervisor target shaped like ``collector_main`` that floods its first slot's ring."""
    from pipeline.transport import ring as R
    from pipeline.transport.segments import attach_segment, release

    ring_segment, weights_segment = attach_segment(args.ring_name), attach_segment(args.weights_name)
    ring = R.TransitionRing.from_buffer(ring_segment.buf)
    try:
        _flood_slot(ring, weights_segment, args)
    finally:
        ring.close()
        release(ring_segment, unlink=False)
        release(weights_segment, unlink=False)


def _flood_slot(ring: Any, weights_segment: Any, args: Any) -> None:
    """The flood itself, in a frame of its own: its views into the segments are gone when
    it returns, so the segments close cleanly."""
    from pipeline.transport import ring as R

    slot = ring.slots[args.slots[0]]
    slot.counters.state = R.STATE_RUNNING
    slot.counters.beat()
    _flood(slot, _StopWord(np.frombuffer(weights_segment.buf, np.uint64, 8, 0), args.parent_pid), args.slot)


def bench_pull_path(cfg: Any, seconds: float, producers: int, capacity: int, log_dir: Path) -> dict[str, float]:
    """Records/s one node agent's pull path carries into a CPU replay, from ``producers``
    floods (their logs under ``log_dir``)."""
    from pipeline.cluster.ray_backend import RayBackend

    cfg = dataclasses.replace(
        cfg, backend="ray", ray_address="", ray_nodes=1, num_processes=producers, envs_per_collector=1
    )
    cfg = dataclasses.replace(cfg, ring_capacity=capacity)
    backend = RayBackend(cfg, target=flood_collector)
    try:
        backend.prepare(cfg)  # a one-node Ray: one agent, one pull path
        sink, _ = make_sink(producers)

        class _Epsilon:
            epsilon = 1.0

        backend.open(run_tag="benchpull", num_floats=16, log_dir=log_dir, weights=_Epsilon(), insert=sink.add)
        return asyncio.run(_measure(backend, seconds))
    finally:
        try:
            backend.stop_all()
        finally:
            backend.close()


async def _measure(backend: Any, seconds: float) -> dict[str, float]:
    from pipeline.transport.records import RECORD_BYTES

    backend.start_all()
    started = time.monotonic()
    first_record_at = opened_at = None  # the window opens PULL_WARMUP_S after the first record
    opened_with = 0
    last_check = 0.0
    while True:
        consumed = backend.poll(None)
        now = time.monotonic()
        if now - last_check >= 0.5:
            backend.check()
            last_check = now
        if first_record_at is None and backend.total_records:
            first_record_at = now
        if opened_at is None and first_record_at is not None and now - first_record_at >= PULL_WARMUP_S:
            opened_at, opened_with = now, backend.total_records
            backend.reset_gap()
            backend.links[0].take_pull_stats()
        if opened_at is not None and now - opened_at >= seconds:
            records = backend.total_records - opened_with
            elapsed = now - opened_at
            pull_ms, _ = backend.links[0].take_pull_stats()
            return {
                "pull_records_per_s": records / elapsed,
                "pull_mb_per_s": records * RECORD_BYTES / elapsed / 1e6,
                "pull_ms": pull_ms,
                "pull_max_gap_ms": 1e3 * backend.reset_gap(),
                "pull_records": float(records),
            }
        if now - started > 120 + seconds:
            raise RuntimeError("the pull path delivered nothing in 120 s (see the agent's logs)")
        await asyncio.sleep(0 if consumed else 0.001)


class ClusterParts(CollectionParts):
    """The ``ray`` part."""

    def part_ray(self, result: PartResult) -> None:
        from pipeline.cluster.ray_setup import require_ray

        require_ray()  # a UserError: the part cannot run without the extra
        n, epsilon = self.cfg.num_processes, self.cfg.epsilon_end
        sizes = self._collect_only_sizes(n)
        local = self.part_config("ray-local", num_processes=n, **fixed_epsilon(epsilon), **sizes)
        log("ray: local collectors (before)")
        before = self._collect(local, "ray-local-before")
        log("ray: the same collectors through a node agent on a one-node Ray")
        over_ray = self._collect(
            dataclasses.replace(local, backend="ray", ray_address="", run_name=local.run_name + "-ray"), "ray"
        )
        log("ray: local collectors (after)")
        after = self._collect(dataclasses.replace(local, run_name=local.run_name + "-after"), "ray-local-after")
        local_fps = (before["frames_per_s"] + after["frames_per_s"]) / 2
        figures = result.figures
        figures["collectors"] = float(n)
        figures["local_before_frames_per_s"] = before["frames_per_s"]
        figures["ray_frames_per_s"] = over_ray["frames_per_s"]
        figures["local_after_frames_per_s"] = after["frames_per_s"]
        figures["ray_efficiency"] = over_ray["frames_per_s"] / local_fps
        figures["node_records_per_s"] = over_ray["records_per_s"]
        log("ray: one pull path, flooding producers")
        pull = bench_pull_path(
            self.cfg,
            self.seconds,
            producers=n,
            capacity=self.cfg.ring_capacity,
            log_dir=self.run_root / f"{self.stamp}-ray-pull",  # removed with the suite's runs
        )
        figures.update(pull)
        figures["pull_path_ratio"] = pull["pull_records_per_s"] / max(1e-9, over_ray["records_per_s"])
        result.details["window_s"] = {"local_before": before["window_s"], "ray": over_ray["window_s"]}
