"""The auto preset's tuning: balancing collectors and learner, measured on the real env and learner."""

from __future__ import annotations

import pytest

from config import Config, resolve_config
from pipeline.run import tuning as T


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


def test_a_real_tuning_on_catch_is_cached_and_used_by_the_auto_preset(tmp_path):
    cfg = Config(env_id="Catch-v0", compile="off", amp="off", learner_threads=1)
    lines = []
    tuning = T.tune(cfg, "cpu", lines.append, env_seconds=1.0, learner_seconds=0.5, batch_sizes=(32, 64))
    assert tuning.emulator_frames_per_s > 100  # Catch steps far faster than any emulator
    assert set(tuning.updates_per_s) == {"32", "64"} and min(tuning.updates_per_s.values()) > 0
    assert tuning.settings["batch_size"] in (32, 64)
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
