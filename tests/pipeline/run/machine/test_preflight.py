"""The machine's limits checked before a run starts, and the run directory's lock."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from config import Config
from pipeline.run.machine.preflight import (
    COLLECTOR_BYTES,
    LOCK_NAME,
    MB,
    MachineLimits,
    PreflightError,
    RunLock,
    check_machine,
    footprint,
)

NUM_FLOATS = 1_700_000  # about the Nature CNN's state
ROOMY = MachineLimits(shm_free_bytes=8 * 2**30, memory_available_bytes=24 * 2**30, cores=2)


def cpu_config(**changes) -> Config:
    values = dict(num_processes=2, envs_per_collector=4, ring_capacity=512, replay_capacity=100_000)
    return Config(**{**values, **changes})


def test_a_run_that_fits_passes_without_warnings():
    assert check_machine(cpu_config(), NUM_FLOATS, ROOMY) == []


def test_a_small_dev_shm_is_one_line_with_the_numbers_and_the_fix():
    cfg = cpu_config()
    need = footprint(cfg, NUM_FLOATS).shm_bytes
    small = MachineLimits(shm_free_bytes=16 * MB, memory_available_bytes=ROOMY.memory_available_bytes, cores=2)
    assert need > 16 * MB
    with pytest.raises(PreflightError) as info:
        check_machine(cfg, NUM_FLOATS, small)
    message = str(info.value)
    assert "\n" not in message
    assert "/dev/shm has 16.0 MB free" in message and f"{need / MB:,.1f} MB" in message
    assert "--shm-size" in message and "ring_capacity=" in message
    # The suggested capacity does fit.
    suggested = int(message.split("ring_capacity=N (about ")[1].split(" ")[0])
    assert footprint(cpu_config(ring_capacity=suggested), NUM_FLOATS).shm_bytes <= 16 * MB


def test_a_replay_larger_than_ram_is_refused_with_a_capacity_that_fits():
    cfg = cpu_config(replay_capacity=500_000_000)
    with pytest.raises(PreflightError) as info:
        check_machine(cfg, NUM_FLOATS, ROOMY)
    message = str(info.value)
    assert "not enough memory" in message and "replay_capacity=500,000,000" in message
    suggested = int(message.split("about ")[1].split(" ")[0].replace(",", ""))
    assert check_machine(cpu_config(replay_capacity=suggested), NUM_FLOATS, ROOMY) == []
    # A replay on the GPU takes no host RAM.
    gpu = cpu_config(replay_capacity=500_000_000, device="cuda", replay_device="cuda")
    assert footprint(gpu, NUM_FLOATS).replay_bytes == 0


def test_an_absurd_collector_count_is_refused_and_more_than_cores_warns():
    with pytest.raises(PreflightError, match="200 collector"):
        check_machine(cpu_config(num_processes=200), NUM_FLOATS, ROOMY)
    warnings = check_machine(cpu_config(num_processes=3), NUM_FLOATS, ROOMY)
    assert len(warnings) == 1 and "3 collectors on 2 core(s)" in warnings[0]
    assert footprint(cpu_config(num_processes=3), NUM_FLOATS).processes_bytes >= 3 * COLLECTOR_BYTES


def _hold_lock(run_dir, ready):
    lock = RunLock(run_dir).acquire()  # noqa: F841 - held (open) until the process dies
    ready.set()
    time.sleep(600)  # killed by the test, holding the lock, as a crashed run would be


def test_a_live_run_directory_is_refused_and_a_dead_runs_lock_is_taken_over(tmp_path):
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(tmp_path, ready))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(PreflightError, match=f"in use by a live run \\(pid {holder.pid}\\)"):
            RunLock(tmp_path).acquire()
        os.kill(holder.pid, signal.SIGKILL)  # dies holding it: the kernel drops the lock
        holder.join(30)
        lock = RunLock(tmp_path).acquire()
        assert lock.previous_owner == holder.pid
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())
        lock.release()
        # Released cleanly: the next one finds no previous owner.
        again = RunLock(tmp_path).acquire()
        assert again.previous_owner is None
        again.release()
    finally:
        if holder.is_alive():
            holder.kill()
        holder.join(30)
