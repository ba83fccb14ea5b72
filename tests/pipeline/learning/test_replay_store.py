"""Tests of ReplayMemory.save / restore / load and the replay file format (pipeline.learning.replay_store)."""

from __future__ import annotations

import io
import os
import random
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.learning.replay import ReplayFileError, ReplayMemory
from pipeline.learning.replay_store import ReplayReader, write_replay_file
from tests.pipeline.learning.test_replay import IdCounter, build_stream, check_batch, episode_of_ids, to_array

GEOMETRY = dict(frame_stack=3, n_step=3, gamma=0.9)
C = 30  # capacity per stream


def make_streams(seed: int = 0) -> list[list]:
    """Three streams: one wrapped several times (episodes of every kind, a cut), one part filled, one empty
    (it is filled by ``more``)."""
    ids = IdCounter()
    rng = random.Random(seed)
    return [
        build_stream(
            [(8, "term"), (11, "trunc"), (6, "cut"), (9, "term"), (14, "cut"), (7, "trunc"), (25, "open")], ids, rng
        ),
        build_stream([(5, "term"), (4, "cut"), (6, "open")], ids, rng),
        build_stream([(10, "trunc"), (12, "open")], ids, rng),
    ]


def filled_memory(seed: int = 0) -> tuple[ReplayMemory, list, list[int]]:
    """A memory holding a prefix of each stream; returns it, the streams and the written lengths."""
    streams = make_streams(seed)
    mem = ReplayMemory(3 * C, 3, seed=seed, **GEOMETRY)
    written = [len(streams[0]) - 10, len(streams[1]), 0]
    assert written[0] > 2 * C  # wrapped more than once
    for s, n in enumerate(written):
        arr = to_array(streams[s][:n])
        for lo in range(0, n, 9):
            mem.add(s, arr[lo : lo + 9])
    mem.sample(17)  # advance the RNG: the saved state is not the seed's
    return mem, streams, written


def assert_same_batches(a: ReplayMemory, b: ReplayMemory, rounds: int = 4, size: int = 128) -> None:
    for _ in range(rounds):
        batch_a, (sa, qa) = a.sample(size, return_index=True)
        batch_b, (sb, qb) = b.sample(size, return_index=True)
        assert torch.equal(sa, sb) and torch.equal(qa, qb)
        for name in ("obs", "action", "ret", "next_obs", "discount", "weight"):
            assert torch.equal(getattr(batch_a, name), getattr(batch_b, name)), name


def assert_same_state(a: ReplayMemory, b: ReplayMemory) -> None:
    assert a.inserted == b.inserted and len(a) == len(b)
    assert np.array_equal(a._count, b._count) and torch.equal(a._count_dev, b._count_dev)
    for name in ("_frames", "_actions", "_rewards", "_flags"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a._generator.get_state(), b._generator.get_state())


# ---------------------------------------------------------------------------- round trips


def test_round_trip_is_exact_and_continues_identically(tmp_path):
    mem, streams, written = filled_memory()
    path = tmp_path / "replay.npz"
    mem.save(path)
    other, _, _ = filled_memory(seed=7)  # a used memory: restore replaces everything
    other._frames[2].fill_(99)  # unwritten slots of stream 2 too
    other.restore(path)
    assert_same_state(mem, other)
    assert_same_batches(mem, other)

    # The restored batches are right, not just equal: episodes, cuts and the wrapped ring.
    hists = [streams[s][: written[s]] for s in range(3)]
    batch, index = other.sample(256, return_index=True)
    valid = check_batch(other, hists, C, 3, 3, 0.9, batch, index, episode_of_ids(streams))
    assert valid > 0
    mem.sample(256)  # keep the two RNGs in step

    # Stream boundaries carry on: the rest of every stream, in the same chunks, into both.
    for s in range(3):
        rest = to_array(streams[s][written[s] :])
        for m in (mem, other):
            for lo in range(0, len(rest), 4):
                m.add(s, rest[lo : lo + 4])
    assert_same_state(mem, other)
    assert_same_batches(mem, other)


def test_load_builds_the_memory_from_the_file(tmp_path):
    mem, _, _ = filled_memory()
    path = tmp_path / "r.npz"
    mem.save(path)
    loaded = ReplayMemory.load(path)
    assert loaded.geometry == mem.geometry
    assert_same_state(mem, loaded)
    assert_same_batches(mem, loaded)


def test_empty_and_part_filled_memories_save_small(tmp_path):
    big = ReplayMemory(2 * 20_000, 2, **GEOMETRY)  # 280 MB of frames when full
    big.save(tmp_path / "empty.npz")
    assert os.path.getsize(tmp_path / "empty.npz") < 20_000
    restored = ReplayMemory(2 * 20_000, 2, seed=9, **GEOMETRY)
    restored.restore(tmp_path / "empty.npz")
    assert restored.inserted == 0 and torch.equal(restored._generator.get_state(), big._generator.get_state())

    ids = IdCounter()
    recs = to_array(build_stream([(49, "term")], ids, random.Random(0)))  # 50 records
    rng = np.random.default_rng(0)
    recs["frame"] = rng.integers(0, 256, recs["frame"].shape, dtype=np.uint8)  # incompressible
    big.add(1, recs)
    big.save(tmp_path / "part.npz")
    assert os.path.getsize(tmp_path / "part.npz") < 50 * 7100 + 20_000
    restored.restore(tmp_path / "part.npz")
    assert_same_state(big, restored)


def old_format_copy(new: Path, old: Path, *, prioritized: bool) -> None:
    """Rewrite the file ``new`` as the code with prioritized replay saved it: the header with
    ``prioritized``, ``alpha``, ``beta`` and ``eps`` and, when prioritized, a ``max_priority``
    member after ``rng_state`` and a ``priorities_s`` member after each ``flags_s``."""
    with ReplayReader(new) as reader:
        header = {k: v for k, v in reader.header.items() if k not in ("format", "version")}
    header.update(prioritized=prioritized, alpha=0.6, beta=0.4, eps=1e-6)
    rng = np.random.default_rng(0)

    def arrays() -> Iterator[tuple[str, np.ndarray]]:
        with np.load(new, allow_pickle=False) as npz:
            for name in npz.files:
                if name == "header.json":
                    continue
                yield name, npz[name]
                if prioritized and name == "rng_state":
                    yield "max_priority", np.array(np.nan)  # nonsense: it must not even be read
                if prioritized and name.startswith("flags_"):
                    yield f"priorities_{name[6:]}", rng.exponential(1.0, npz[name].shape[0])

    write_replay_file(old, header, list(arrays()))


@pytest.mark.parametrize("prioritized", [False, True])
def test_a_file_saved_with_the_prioritized_replay_fields_restores(tmp_path, prioritized):
    """Replays saved while prioritized replay existed resume runs: their records and RNG state
    restore exactly and the priorities and exponents are ignored."""
    mem, _, _ = filled_memory()
    mem.save(tmp_path / "new.npz")
    old = tmp_path / "old.npz"
    old_format_copy(tmp_path / "new.npz", old, prioritized=prioritized)
    with zipfile.ZipFile(old) as zf:
        assert ("priorities_0.npy" in zf.namelist()) is prioritized
    other, _, _ = filled_memory(seed=7)
    other.restore(old)
    assert_same_state(mem, other)
    assert_same_batches(mem, other)
    loaded = ReplayMemory.load(old)
    assert loaded.geometry == mem.geometry and loaded.inserted == mem.inserted


def test_a_new_file_holds_no_priorities(tmp_path):
    mem, _, _ = filled_memory()
    mem.save(tmp_path / "r.npz")
    with ReplayReader(tmp_path / "r.npz") as reader:
        assert not {"prioritized", "alpha", "beta", "eps"} & reader.header.keys()
    with zipfile.ZipFile(tmp_path / "r.npz") as zf:
        assert not [n for n in zf.namelist() if "priorit" in n]


def test_file_is_a_plain_npz_without_pickles(tmp_path):
    mem, _, written = filled_memory()
    mem.save(tmp_path / "r.npz")
    with np.load(tmp_path / "r.npz", allow_pickle=False) as npz:
        assert npz["count"].tolist() == mem._count.tolist()
        assert np.array_equal(npz["frames_1"], mem._frames[1, : written[1]].numpy())
    with zipfile.ZipFile(tmp_path / "r.npz") as zf:
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
    assert not [p for p in os.listdir(tmp_path) if p != "r.npz"]  # no temp file left


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    mem, _, _ = filled_memory()
    path = tmp_path / "r.npz"
    mem.save(path)
    before = path.read_bytes()
    mem.add(2, to_array(build_stream([(5, "open")], IdCounter(), random.Random(1))))
    calls = {"n": 0}
    real = np.lib.format.write_array

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        mem.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["r.npz"]


# ---------------------------------------------------------------------------- errors


def test_geometry_mismatch_names_both_geometries(tmp_path):
    mem, _, _ = filled_memory()
    mem.save(tmp_path / "r.npz")
    cases = [
        (ReplayMemory(4 * C, 4, **GEOMETRY), "num_streams=3", "num_streams=4"),
        (ReplayMemory(3 * (C + 1), 3, **GEOMETRY), "capacity_per_stream=30", "capacity_per_stream=31"),
        (ReplayMemory(3 * C, 3, frame_stack=4, n_step=3, gamma=0.9), "frame_stack=3", "frame_stack=4"),
        (ReplayMemory(3 * C, 3, frame_stack=3, n_step=1, gamma=0.9), "n_step=3", "n_step=1"),
        (ReplayMemory(3 * C, 3, frame_stack=3, n_step=3, gamma=0.99), "gamma=0.9,", "gamma=0.99"),
    ]
    for other, saved, mine in cases:
        ids = IdCounter()
        other.add(0, to_array(build_stream([(5, "term")], ids, random.Random(0))))
        frames = other._frames.clone()
        with pytest.raises(ReplayFileError, match="geometry mismatch") as info:
            other.restore(tmp_path / "r.npz")
        text = str(info.value)
        assert saved in text and mine in text and "r.npz" in text
        assert isinstance(info.value, ValueError)
        assert other.inserted == 6 and torch.equal(other._frames, frames)  # untouched


def corrupt_variants(data: bytes) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    flipped = bytearray(data)
    for pos in (len(data) // 3, len(data) // 2):
        flipped[pos] ^= 0xFF
    # A byte flipped inside the compressed frames of the last stream with data: the header
    # and the first members read fine, the memory has been cleared when the CRC fails.
    in_frames = bytearray(data)
    if len(data) > 1000:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo("frames_1.npy")
        # Data starts after the 30-byte local header, the name and the local extra field.
        name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
        middle = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
        for pos in range(middle, middle + 8):
            in_frames[pos] ^= 0x55
    return {
        "flipped_in_frames": bytes(in_frames),
        "empty": b"",
        "random": rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(),
        "random_with_zip_magic": b"PK\x03\x04" + rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(),
        "truncated_10pc": data[: len(data) // 10],
        "truncated_half": data[: len(data) // 2],
        "truncated_last_byte": data[:-1],
        "flipped_bytes": bytes(flipped),
    }


@pytest.mark.parametrize("variant", sorted(corrupt_variants(b"x" * 100)))
def test_corrupt_files_raise_replay_file_error_and_leave_memory_empty(tmp_path, variant):
    mem, _, _ = filled_memory()
    good = tmp_path / "good.npz"
    mem.save(good)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(corrupt_variants(good.read_bytes())[variant])
    target, _, _ = filled_memory(seed=3)
    with pytest.raises(ReplayFileError, match="bad.npz"):
        target.restore(bad)
    # Either untouched (header-level failure) or emptied (data failure): never half-restored.
    fresh, _, _ = filled_memory(seed=3)
    if variant != "flipped_in_frames":
        assert_same_state(target, fresh)
    else:
        assert len(target) == 0 and not target._frames.any()
        assert (target.sample(64).weight == 0).all()
    with pytest.raises(ReplayFileError):
        ReplayMemory.load(bad)


def test_missing_file_and_foreign_zip(tmp_path):
    mem = ReplayMemory(3 * C, 3, **GEOMETRY)
    with pytest.raises(ReplayFileError, match="does not exist"):
        mem.restore(tmp_path / "nope.npz")
    np.savez(tmp_path / "other.npz", count=np.zeros(3, dtype=np.int64))
    with pytest.raises(ReplayFileError, match="header"):
        mem.restore(tmp_path / "other.npz")


def test_wrong_member_dtype_or_shape_is_rejected_before_reading(tmp_path):
    """A member holding a pickled object array (or the wrong shape) is refused from its .npy header."""
    mem, _, _ = filled_memory()
    header = dict(mem.geometry, inserted=3, rng_device="cpu")
    path = tmp_path / "evil.npz"
    write_replay_file(path, header, [("count", np.array([1, 2, 0]))])
    with zipfile.ZipFile(path, "a") as zf, zf.open("rng_state.npy", "w") as member:
        np.lib.format.write_array(member, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ReplayFileError, match="rng_state"):
        mem.restore(path)
    write_replay_file(path, header, [("count", np.array([1, 2], dtype=np.int64))])
    with pytest.raises(ReplayFileError, match="count"):
        mem.restore(path)
    with ReplayReader(path) as reader, pytest.raises(ReplayFileError, match="expected"):
        reader.read("count", np.int64, (3,))
    bad_header = dict(header, num_streams="3")
    write_replay_file(path, bad_header, [])
    with pytest.raises(ReplayFileError, match="num_streams"):
        ReplayMemory.load(path)
    assert torch.equal(mem._count_dev, torch.from_numpy(mem._count))  # untouched by all of it


def test_header_geometry_is_range_checked(tmp_path):
    """A header whose geometry is out of range is refused by name, before any memory is built."""
    mem, _, _ = filled_memory()
    header = dict(mem.geometry, inserted=0, rng_device="cpu")
    path = tmp_path / "r.npz"
    write_replay_file(path, header, [])
    with ReplayReader(path) as reader:
        assert reader.geometry() == mem.geometry
    write_replay_file(path, dict(header, frame_stack=0), [])
    with pytest.raises(ReplayFileError, match="bad geometry .*frame_stack=0"):
        ReplayMemory.load(path)
