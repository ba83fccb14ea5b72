"""The auto preset's tuning: balancing collectors and learner, measured on the real env and learner."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest

from config import Config
from configuration import resolution
from configuration.resolution import resolve_config
from pipeline.run.machine import tuning as T
from pipeline.run.machine.load import allowed_cpus


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIO_DQN_CACHE", str(tmp_path / "cache"))


def mario(**changes) -> Config:
    return Config(**{"replay_ratio": 4.0, "batch_size": 32, **changes})


def test_balance_splits_the_cores_by_work_and_picks_the_cheapest_batch_per_sample():
    # A slow Cascade Lake: 190 frames/s per core, an eager fp32 learner.
    settings, why = T.balance(mario(), 190.0, {32: 14.7, 64: 9.0, 128: 3.5}, cores=2)
    # batch 64 costs 4/(64*9) s per step, over 10 % less than 32 (4/(32*14.7)) and less than 128.
    # Collectors: 1.1*4/190 = 23 ms per step, learner 6.9 ms: collectors take 3/4 of the
    # work, so one collector (43 steps/s) would leave half a core idle; two time-share
    # the machine with the learner (2 / 30 ms = 67 steps/s).
    # A per-sample cost as flat as this box's keeps the preset's batch size.
    assert T.balance(mario(), 274.0, {32: 13.1, 64: 6.5, 128: 3.4}, cores=2)[0]["batch_size"] == 32
    assert settings == {"batch_size": 64, "num_processes": 2, "learner_threads": 1}
    assert "190 frames/s per core" in why and "replay ratio 4" in why
    # A fast emulator and a slow learner: the learner gets the cores.
    settings, _ = T.balance(mario(), 5000.0, {32: 5.0, 64: 2.6, 128: 1.3}, cores=8)
    assert settings["num_processes"] < settings["learner_threads"]
    assert settings["num_processes"] + settings["learner_threads"] == 8


def test_the_cost_of_more_updates_per_frame_is_the_balance_at_each_ratio():
    # A 2-core Zen 3: 254 frames/s per core, eager fp32 12.6 updates/s at batch 32 (the
    # larger batches no cheaper per sample, so 32 stays). Collector step 1.1*4/254 = 17.3 ms.
    rates = {32: 12.6, 64: 6.5, 128: 3.4}
    expected = T.frames_per_s_at_ratios(mario(), 254.0, rates, 2, (4.0, 8.0, 16.0))
    step = 1.1 * 4 / 254
    # Ratio 4: learner 4/(32*12.6) = 9.9 ms per step; the machine's two cores bound it.
    at_4 = 2 / (step + 4 / (32 * 12.6)) * 4
    # Ratios 8 and 16: the machine's cores bound them too. The learner is not held to the one
    # core two collectors leave it: it takes the second one while they stall.
    at_8, at_16 = (2 / (step + ratio / (32 * 12.6)) * 4 for ratio in (8, 16))
    assert list(expected) == ["4", "8", "16"]
    assert expected["4"] == pytest.approx(at_4) and expected["4"] == pytest.approx(294, abs=1)
    assert expected["8"] == pytest.approx(at_8) and expected["16"] == pytest.approx(at_16)


@pytest.mark.slow
def test_a_real_tuning_on_catch_is_cached_and_used_by_the_auto_preset(tmp_path):
    cfg = Config(env_id="Catch-v0", compile="off", amp="off", learner_threads=1)
    lines = []
    tuning = T.tune(cfg, "cpu", lines.append, env_seconds=1.0, learner_seconds=0.5, batch_sizes=(32, 64))
    assert set(tuning.updates_per_s) == {"32", "64"}
    # The settings are the balance of exactly the figures it recorded (a setting computed
    # from other figures, or figures recorded other than measured, breaks this).
    rates = {int(batch): rate for batch, rate in tuning.updates_per_s.items()}
    planned, _ = T.balance(
        Config(**{**cfg.to_dict(), "learner_threads": 1}), tuning.emulator_frames_per_s, rates, tuning.cores
    )
    assert {key: tuning.settings[key] for key in planned} == planned
    assert tuning.settings["num_processes"] >= 1 and tuning.settings["learner_threads"] >= 1
    assert (tuning.settings["compile"], tuning.settings["amp"]) == ("off", "off")
    assert any("frames/s per core" in line for line in lines)

    cli = {"env_id": "Catch-v0", "compile": "off", "amp": "off", "learner_threads": 1, "reward_scale": 1.0}
    path = T.tuning_path(resolve_config(cli, preset="auto").config)
    T.save_tuning(path, tuning)
    assert T.load_tuning(path) == tuning
    said = []
    resolved = T.resolve_for_machine(cli, "auto", said.append)
    assert said == []  # cached: nothing measured again
    assert resolved.config.batch_size == tuning.settings["batch_size"]
    assert resolved.sources["batch_size"].endswith(f"tuned: {path}")
    assert resolved.sources["learner_threads"] == "command line"  # flags still win
    assert "tuned: emulator" in resolved.describe()


def start_spinners(count: int) -> list[int]:
    """``count`` processes that each keep a core busy, outside this process tree.

    Started through an intermediate that exits at once: a spinner that stayed this
    process's child would count as part of the measurement, not as other load.
    """
    launcher = (
        "import subprocess, sys\n"
        f"for _ in range({count}):\n"
        "    print(subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True,\n"
        "                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)\n"
    )
    out = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, check=True, timeout=60)
    return [int(pid) for pid in out.stdout.split()]


def stop_spinners(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


FULL_TUNE = T.tune


def short_tune(cfg: Config, device: str, log) -> T.Tuning:
    """The real measurement with a small budget."""
    return FULL_TUNE(cfg, device, log, env_seconds=1.0, learner_seconds=0.3, batch_sizes=(32,))


@pytest.mark.slow
def test_tune_beside_a_busy_process_says_so_and_caches_nothing_unless_forced(monkeypatch, capsys):
    """Other processes spinning on the cores this one may use (at least half of them: one
    on a 2-core box) make the figures suspect: the tune command prints them, says the
    machine was busy and how to measure again, caches nothing and exits 1; a training
    start uses them without caching; --force caches them, marked busy."""
    from pipeline.commands.tune import EXIT_NOT_CACHED, tune_command

    # The measurement beside the spinners is taken once, by the tune command; the training
    # start and --force then get the same busy figures, as each would measure them: what
    # they are tested for is what they do with busy figures (a real measurement costs ~10 s
    # alone, three times as much beside the spinner and another busy core).
    measured: list[T.Tuning] = []

    def measure_once(cfg: Config, device: str, log) -> T.Tuning:
        if not measured:
            measured.append(short_tune(cfg, device, log))
        return measured[0]

    monkeypatch.setattr(T, "tune", measure_once)
    cli = {"env_id": "Catch-v0", "compile": "off", "amp": "off", "learner_threads": 1, "reward_scale": 1.0}
    path = T.tuning_path(resolve_config(cli, preset="auto").config)
    spinners = start_spinners(max(1, math.ceil(len(allowed_cpus()) / 2)))
    try:
        assert tune_command(cli, None) == EXIT_NOT_CACHED
        out, err = capsys.readouterr()
        assert "while measuring" in out  # the figures and the load are printed
        (line,) = err.strip().splitlines()
        assert line.startswith("main.py tune: the machine was busy: other processes used ")
        assert "likely low" in line and "python main.py tune" in line and "--force" in line
        assert not path.exists()

        said: list[str] = []
        resolved = T.resolve_for_machine(cli, "auto", said.append)  # a training start
        assert resolved.tuning.busy and resolved.tuning.other_cores >= 0.25 * len(allowed_cpus())
        assert any("were not cached" in s and "this run uses them" in s for s in said), said
        assert resolved.sources["batch_size"].endswith(f"tuned: {path}")  # used all the same
        assert not path.exists()

        assert tune_command(cli, None, force=True) == 0
        cached = T.load_tuning(path)
        assert cached is not None and cached.busy
    finally:
        stop_spinners(spinners)


@pytest.mark.parametrize(
    ("env_id", "stages"),
    [
        # Random play on World 1's random stages ends its first episode at warm-up step 31
        # (the seeds are fixed: the emulator and the actions replay): the measurement must
        # reset it, not step the finished env, which the emulator refuses.
        ("SuperMarioBrosRandomStages-v0", "1-1,1-2,1-3,1-4"),
        ("SuperMarioBrosRandomStages-v0", ""),
        ("SuperMarioBros-1-1-v0", ""),
        ("SuperMarioBros-v0", ""),
        ("SuperMarioBros2-v0", ""),
        ("Catch-v0", ""),
    ],
)
def test_the_emulator_measurement_runs_on_every_kind_of_env_id(env_id, stages):
    """The auto preset's emulator measurement on each kind of id --env accepts."""
    import multiprocessing as mp

    cfg = Config(env_id=env_id, stages=stages)
    receive, send = mp.Pipe(duplex=False)
    T._emulator_worker(send, cfg.env_id, cfg.env_kwargs(), 0.3)
    frames_per_s = receive.recv()
    assert isinstance(frames_per_s, float) and math.isfinite(frames_per_s)


def test_auto_times_only_the_batch_sizes_the_learning_benchmark_measured_and_says_so():
    assert T.BATCH_SIZES == (32,)  # the learning benchmark's only batch size (docs/learning.md)
    _, why = T.balance(Config(replay_ratio=4.0, batch_size=32, learning_rate=1e-4), 900.0, {32: 40.0}, cores=2)
    measured = "learning: batch 32, replay ratio 4, learning rate 0.0001, as the learning benchmark measured it"
    assert why.endswith(f"{measured} (docs/learning.md)")
    _, why = T.balance(Config(replay_ratio=8.0, batch_size=32, learning_rate=1e-4), 900.0, {32: 40.0}, cores=2)
    assert why.endswith("a setting the learning benchmark has not measured")


@pytest.mark.parametrize(
    ("machine", "frames_per_s", "updates_per_s"),
    [
        # A slow busy 2-core box: the emulator at 154 frames/s, the learner at 5 updates/s.
        (resolution.Hardware(cores=2, memory_gb=24.0, gpu=False), 154.0, 5.0),
        # A fast GPU server: 16 cores at 1,000 frames/s each, the update at 190 updates/s.
        (resolution.Hardware(cores=16, memory_gb=256.0, gpu=True), 1000.0, 190.0),
    ],
    ids=["slow-2-core", "fast-16-core-gpu"],
)
def test_auto_on_a_slow_or_fast_machine_learns_with_a_measured_setting(
    monkeypatch, machine, frames_per_s, updates_per_s
):
    """The whole auto resolution on fake machine figures: whatever the machine, what is
    learned (batch, ratio, learning rate and the rest of LEARNING_AS_MEASURED) is the
    measured setting; only collectors, threads and devices follow the machine."""
    from config import LEARNING_AS_MEASURED
    from pipeline.learning.learner_choice import LearnerChoice
    from pipeline.run.machine.preflight import MachineLimits

    choice = LearnerChoice(True, True, "fake", {"eager": updates_per_s, "compiled_amp": updates_per_s})
    monkeypatch.setattr(resolution, "detect_hardware", lambda: machine)
    monkeypatch.setattr(T, "measure_emulator", lambda cfg, seconds=0.0: frames_per_s)
    monkeypatch.setattr(T, "choose_learner", lambda cfg, device, **kw: choice)
    monkeypatch.setattr(T, "learner_spec", lambda *a, **kw: None)
    # Larger batches far cheaper per sample (as on a GPU): were auto to time a batch size the
    # benchmark never measured, it would pick it, and the assertions below would fail.
    monkeypatch.setattr(T, "time_batch_sizes", lambda spec, sizes: {b: updates_per_s * (32 / b) ** 0.5 for b in sizes})
    limits = MachineLimits(2**40, int(machine.memory_gb * 2**30), machine.cores)
    monkeypatch.setattr(T.MachineLimits, "probe", classmethod(lambda cls: limits))
    monkeypatch.setattr(T, "learner_device", lambda cfg: "cpu")
    resolved = T.resolve_for_machine({}, "auto", lambda line: None)
    cfg = resolved.config
    assert (cfg.batch_size, cfg.replay_ratio, cfg.learning_rate) in T.MEASURED_LEARNING
    for name, measured in LEARNING_AS_MEASURED.items():
        assert getattr(cfg, name) == measured, name
    assert "tuned: " in resolved.sources["batch_size"]  # the batch came through the measurement
    assert resolved.tuning.explanation.count("as the learning benchmark measured it") == 1
    assert 1 <= cfg.num_processes <= machine.cores
