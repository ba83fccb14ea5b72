"""A learner's stand-in that a test SIGKILLs: ``python -m tests.pipeline.cluster.killed_driver ADDRESS LOG_DIR``.

It joins the cluster at ADDRESS, places and starts a node agent (running numbered
collectors) on every collector node, waits until each answers, prints ``agent PID``
per agent and then ``ready``, and keeps supervising them (status calls twice a second,
as the trainer's watch task does) until it is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import ray

from config import Config
from pipeline.cluster.ray_backend import RayBackend
from tests.pipeline.cluster.numbered import numbered_collector

RUN_TAG = "raykilled"


class _Epsilon:
    epsilon = 0.5


def main(address: str, log_dir: str) -> None:
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    cfg = Config(
        env_id="Catch-v0",
        num_processes=1,
        envs_per_collector=2,
        ring_capacity=64,
        total_frames=1_000_000,
        heartbeat_timeout_s=60.0,
    )
    backend = RayBackend(cfg, target=numbered_collector)
    backend.prepare(cfg)
    backend.open(run_tag=RUN_TAG, num_floats=16, log_dir=Path(log_dir), weights=_Epsilon(), insert=lambda s, r: None)
    backend.start_all()
    while not all(link.live for link in backend.links):
        backend.check()
        time.sleep(0.5)
    for link in backend.links:
        print("agent", ray.get(link.handle.info.remote())["pid"], flush=True)
    print("ready", flush=True)
    while True:
        backend.check()
        time.sleep(0.5)


if __name__ == "__main__":
    main(*sys.argv[1:3])
