"""The evaluator's progress: one shared array, counted only between begin() and end(),
read back under the gauge names the monitor and the benchmark use."""

from __future__ import annotations

import math
import multiprocessing as mp

from config import Config
from pipeline.common.gauges import EVALUATOR_PROGRESS_GAUGES
from pipeline.learning.episode_loop import build_env
from pipeline.run.evaluator.progress import CountingEnv, new_progress, read_progress


def test_only_the_steps_of_an_evaluation_count():
    assert list(read_progress(None)) == list(EVALUATOR_PROGRESS_GAUGES)
    assert all(math.isnan(value) for value in read_progress(None).values())
    progress = new_progress(mp.get_context("spawn"))
    env = CountingEnv(build_env(Config(env_id="Catch-v0"), seed=0), progress)
    try:
        env.reset(seed=0)
        env.step(0)  # outside an evaluation: not counted
        assert read_progress(progress) == dict.fromkeys(EVALUATOR_PROGRESS_GAUGES, 0.0)
        env.begin()
        env.step(0)
        env.step(1)
        env.end()
        env.step(2)
    finally:
        env.close()
    steps, cpu_s, wall_s = read_progress(progress).values()
    assert steps == 2.0 and cpu_s >= 0.0 and wall_s > 0.0
