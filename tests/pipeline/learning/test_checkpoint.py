"""Tests for pipeline.learning.checkpoint: round trip, atomic writes, refusing bad or malicious
files, rotation, compatibility checks and RNG state capture/restore."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import pipeline.learning.checkpoint as checkpoint_module
from models import QNetwork
from pipeline.common.files import TEMP_MARKER
from pipeline.learning.checkpoint import (
    CheckpointError,
    capture_rng_state,
    check_compatible,
    checkpoint_name,
    load_checkpoint,
    restore_rng_state,
    rotate_checkpoints,
    save_checkpoint,
)


def make_payload() -> dict:
    net = QNetwork(5)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    net(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).sum().backward()
    optimizer.step()
    return {
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict(),
        "config": {"lr": 1e-4, "name": "mario", "stages": ["1-1", "1-2"], "nested": {"k": 3}},
        "frames": 123_456,
        "rng": capture_rng_state(),
    }


def assert_same(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


def tmp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if TEMP_MARKER in p.name]


# ---------------------------------------------------------------------------- save / load


def test_round_trip(tmp_path: Path) -> None:
    payload = make_payload()
    path = tmp_path / "sub" / checkpoint_name(123_456)
    save_checkpoint(path, payload)
    assert path.name == "ckpt-123456.pt"
    assert_same(load_checkpoint(path), payload)
    assert tmp_files(path.parent) == []


def test_failed_save_keeps_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ckpt-1.pt"
    save_checkpoint(path, {"frames": 1, "w": torch.ones(3)})

    def exploding_save(obj: object, f: object, *args: object, **kwargs: object) -> None:
        f.write(b"partial garbage")  # simulate a crash halfway through writing
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", exploding_save)
    with pytest.raises(CheckpointError, match="No space left") as info:
        save_checkpoint(path, {"frames": 2, "w": torch.zeros(3)})
    assert str(path) in str(info.value)
    monkeypatch.undo()

    loaded = load_checkpoint(path)
    assert loaded["frames"] == 1 and torch.equal(loaded["w"], torch.ones(3))
    assert tmp_files(tmp_path) == []


def test_failed_replace_keeps_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "best.pt"
    save_checkpoint(path, {"frames": 1})

    def failing_replace(src: object, dst: object) -> None:
        raise PermissionError("simulated rename failure")

    monkeypatch.setattr(checkpoint_module.os, "replace", failing_replace)
    with pytest.raises(CheckpointError, match="simulated rename failure"):
        save_checkpoint(path, {"frames": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)["frames"] == 1
    assert tmp_files(tmp_path) == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt-5.pt"
    save_checkpoint(path, make_payload())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated, corrupt") as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("seed", range(4))
def test_random_bytes(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(random.Random(seed).randbytes(4096))
    with pytest.raises(CheckpointError):
        load_checkpoint(path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="truncated, corrupt"):
        load_checkpoint(path)


def test_non_dict_payload(tmp_path: Path) -> None:
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(CheckpointError, match="expected a dict"):
        load_checkpoint(path)


class _Malicious:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("container", ["raw_pickle", "torch_zip"])
def test_malicious_pickle_is_refused_without_running_code(tmp_path: Path, container: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    if container == "raw_pickle":
        path.write_bytes(pickle.dumps(_Malicious(marker), protocol=2))
    else:
        torch.save({"model": _Malicious(marker)}, path)
    with pytest.raises(CheckpointError, match="refused") as info:
        load_checkpoint(path)
    assert "system" in str(info.value)  # names the blocked callable
    assert not marker.exists()


# ---------------------------------------------------------------------------- rotation


def test_rotation_keeps_newest_and_best(tmp_path: Path) -> None:
    for frames in (5, 100, 20, 1_000, 300):
        (tmp_path / checkpoint_name(frames)).write_bytes(b"x")
    (tmp_path / "best.pt").write_bytes(b"b")
    (tmp_path / "notes.txt").write_text("unrelated")
    rotate_checkpoints(tmp_path, keep_last=2, best=tmp_path / "best.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.pt",
        "ckpt-1000.pt",
        "ckpt-300.pt",
        "notes.txt",
    ]


def test_rotation_never_deletes_a_best_checkpoint_it_would_rotate(tmp_path: Path) -> None:
    for frames in (1, 2, 3):
        (tmp_path / checkpoint_name(frames)).write_bytes(b"x")
    rotate_checkpoints(tmp_path, keep_last=1, best=tmp_path / "ckpt-1.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-1.pt", "ckpt-3.pt"]
    with pytest.raises(ValueError):
        rotate_checkpoints(tmp_path, keep_last=-1)


# ---------------------------------------------------------------------------- compatibility


def test_check_compatible_accepts_matching_state() -> None:
    check_compatible(QNetwork(7), QNetwork(7).state_dict(), "x.pt")


def test_check_compatible_names_action_count_mismatch() -> None:
    with pytest.raises(CheckpointError) as info:
        check_compatible(QNetwork(7), QNetwork(12).state_dict(), "run/ckpt-9.pt")
    text = str(info.value)
    assert "run/ckpt-9.pt" in text
    assert "advantage.weight" in text and "(12, 512)" in text and "(7, 512)" in text


def test_check_compatible_names_a_missing_key_and_frame_stack() -> None:
    plain_head = QNetwork(7).state_dict()
    plain_head["head.weight"] = plain_head.pop("advantage.weight")  # a linear head's layout
    with pytest.raises(CheckpointError, match="key 'advantage.weight' is missing"):
        check_compatible(QNetwork(7), plain_head, "p")
    with pytest.raises(CheckpointError, match="features.0.weight"):
        check_compatible(QNetwork(7, frame_stack=4), QNetwork(7, frame_stack=2).state_dict(), "p")
    state = QNetwork(7).state_dict()
    state["extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="unexpected key 'extra.weight'"):
        check_compatible(QNetwork(7), state, "p")


# ---------------------------------------------------------------------------- RNG


def test_rng_state_round_trip_through_a_safe_checkpoint(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    path = tmp_path / "rng.pt"
    save_checkpoint(path, {"rng": capture_rng_state()})
    expected = (random.random(), np.random.rand(3).tolist(), torch.rand(3))

    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    restore_rng_state(load_checkpoint(path)["rng"])
    got = (random.random(), np.random.rand(3).tolist(), torch.rand(3))
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert torch.equal(got[2], expected[2])
