"""Saving the replay beside the final checkpoint and restoring it on resume, with a clean fallback."""

from __future__ import annotations

import logging

import numpy as np

from config import Config
from pipeline.run.trainer.pieces import REPLAY_FILE, build_replay, restore_replay, save_replay
from pipeline.transport.records import FLAG_FINAL, FLAG_START, FLAG_TERMINATED, RECORD_DTYPE


def filled_replay():
    replay = build_replay(Config(replay_capacity=1024, n_step=3), num_streams=2, device="cpu")
    rng = np.random.default_rng(0)
    for stream in range(2):
        records = np.zeros(300, RECORD_DTYPE)
        records["frame"] = rng.integers(0, 256, (300, 84, 84), dtype=np.uint8)
        records["reward"] = rng.standard_normal(300).astype(np.float32)
        position = np.arange(300) % 50
        records["flags"] = np.where(position == 0, FLAG_START, 0)
        records["flags"] |= np.where(position == 48, FLAG_TERMINATED, 0).astype(np.uint8)
        records["flags"] |= np.where(position == 49, FLAG_FINAL, 0).astype(np.uint8)
        replay.add(stream, records)
    return replay


def test_the_replay_saved_at_the_end_comes_back_on_resume(tmp_path):
    replay = filled_replay()
    save_replay(replay, tmp_path)
    fresh = build_replay(Config(replay_capacity=1024, n_step=3), num_streams=2, device="cpu")
    assert restore_replay(fresh, tmp_path) == len(replay) == 600
    assert fresh.inserted == replay.inserted
    a, b = replay.sample(64), fresh.sample(64)
    assert np.array_equal(a.obs.numpy(), b.obs.numpy()) and np.array_equal(a.ret.numpy(), b.ret.numpy())


def test_a_missing_or_corrupt_replay_is_one_warning_and_an_empty_replay(tmp_path, caplog):
    fresh = build_replay(Config(replay_capacity=1024, n_step=3), num_streams=2, device="cpu")
    with caplog.at_level(logging.WARNING, logger="mario.trainer"):
        assert restore_replay(fresh, tmp_path) == 0
        (tmp_path / REPLAY_FILE).write_bytes(b"PK\x03\x04 not really a zip")
        assert restore_replay(fresh, tmp_path) == 0
    assert len(fresh) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "no saved replay" in warnings[0] and "could not restore" in warnings[1]
    # Another geometry: refused the same way.
    save_replay(filled_replay(), tmp_path)
    other = build_replay(Config(replay_capacity=2048, n_step=3), num_streams=4, device="cpu")
    assert restore_replay(other, tmp_path) == 0 and len(other) == 0


def test_a_resume_names_the_learning_settings_it_changes():
    from config import Config
    from pipeline.run.trainer.pieces import changed_on_resume

    saved = Config(gamma=0.9, n_step=5, total_frames=1000).to_dict()
    same = Config(gamma=0.9, n_step=5, total_frames=9000, run_name="x", monitor="off")
    assert changed_on_resume(same, saved) == []  # run-only settings may change freely
    assert changed_on_resume(Config(gamma=0.99, n_step=5), saved) == ["gamma 0.9 -> 0.99"]
