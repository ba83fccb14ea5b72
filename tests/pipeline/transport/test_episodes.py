"""Episode summaries: msgpack round trips and defensive decoding in the episode ring."""

from __future__ import annotations

import math
from dataclasses import asdict, fields

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.transport import episodes as E
from pipeline.transport import ring as R
from tests.pipeline import producers as P

TAG = P.new_tag("episodes")

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=False, width=64)
SUMMARIES = st.builds(
    E.EpisodeSummary,
    ret=FLOATS,
    length=I64,
    x_pos=I64,
    flag_get=st.booleans(),
    world=I64,
    stage=I64,
    collector=I64,
    weights_version=I64,
    epsilon=FLOATS,
    truncated=st.booleans(),
)


@pytest.fixture(scope="module")
def episode_ring():
    """One shared ring for the module (hypothesis runs many examples against it)."""
    layout = R.RingLayout(num_slots=1, capacity=2, episode_cells=16)
    with P.ring_segment(TAG, layout) as (_, ring):
        yield ring


def _good(i: int) -> E.EpisodeSummary:
    return P.make_summary(collector=3, index=i)


def _put_raw(ring: R.SpscRing, data: bytes, length: int | None = None) -> None:
    assert ring.wait_for_space() == 0
    cell = ring.next_cell()
    n = min(len(data), E.MAX_PAYLOAD)
    cell["data"][:n] = np.frombuffer(data[:n], np.uint8)
    cell["length"] = len(data) if length is None else length
    ring.commit()


def _valid_dict(i: int = 0) -> dict:
    return asdict(_good(i))


# ------------------------------------------------------------------------ round trip
@given(SUMMARIES)
@settings(max_examples=300, deadline=None)
def test_encode_decode_round_trip(summary):
    data = E.encode(summary)
    assert 0 < len(data) <= E.MAX_PAYLOAD
    decoded = E.decode(data)
    assert decoded == summary
    for f in fields(E.EpisodeSummary):
        assert type(getattr(decoded, f.name)) is type(getattr(summary, f.name)), f.name


@given(st.lists(SUMMARIES, min_size=1, max_size=12))
@settings(max_examples=60, deadline=None)
def test_send_receive_round_trip_through_the_ring(episode_ring, summaries):
    ring = episode_ring.slots[0].episodes
    for s in summaries:
        assert E.send(ring, s) == 0
    received, bad = E.receive(ring)
    assert bad == 0
    assert received == summaries
    assert ring.pending() == 0


def test_infinite_floats_survive():
    s = _good(1)
    s.ret, s.epsilon = math.inf, -math.inf
    assert E.decode(E.encode(s)) == s


# ------------------------------------------------------------------------ malformed
def _truncations() -> list[bytes]:
    data = E.encode(_good(2))
    return [data[:n] for n in (1, 2, len(data) // 2, len(data) - 1)]


MALFORMED: list[tuple[str, bytes]] = [
    ("random bytes", bytes(np.random.default_rng(0).integers(0, 256, 120, np.uint8))),
    ("never-valid byte", b"\xc1" * 10),
    ("not a map", msgpack.packb([1, 2, 3])),
    ("a plain int", msgpack.packb(7)),
    ("missing field", msgpack.packb({k: v for k, v in _valid_dict().items() if k != "x_pos"})),
    ("extra field", msgpack.packb({**_valid_dict(), "extra": 1})),
    ("int keys", msgpack.packb(dict.fromkeys(range(10), 0))),
    ("bytes keys", msgpack.packb({k.encode(): v for k, v in _valid_dict().items()}, use_bin_type=True)),
    ("str in int field", msgpack.packb({**_valid_dict(), "length": "100"})),
    ("float in int field", msgpack.packb({**_valid_dict(), "world": 1.0})),
    ("None in float field", msgpack.packb({**_valid_dict(), "ret": None})),
    ("int in bool field", msgpack.packb({**_valid_dict(), "flag_get": 1})),
    ("bool in int field", msgpack.packb({**_valid_dict(), "length": True})),
    ("bool in float field", msgpack.packb({**_valid_dict(), "epsilon": False})),
    ("nested map", msgpack.packb({**_valid_dict(), "x_pos": {"a": 1}})),
    ("trailing bytes", E.encode(_good(3)) + b"\x00"),
] + [(f"truncated to {len(t)}", t) for t in _truncations()]


@pytest.mark.parametrize("label,payload", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_decode_rejects_malformed(label, payload):
    with pytest.raises(ValueError):
        E.decode(payload)


@given(st.binary(max_size=E.MAX_PAYLOAD))
@settings(max_examples=300, deadline=None)
def test_decode_of_arbitrary_bytes_only_raises_value_error(payload):
    try:
        summary = E.decode(payload)
    except ValueError:
        return
    assert isinstance(summary, E.EpisodeSummary)  # only a well-formed record gets here


def test_receive_counts_and_skips_bad_records_between_good_ones(episode_ring):
    ring = episode_ring.slots[0].episodes
    # Cells of every malformed kind, plus bad lengths, each between two good summaries;
    # processed in batches that fit the ring.
    bad_cells = (
        [(payload, None) for _, payload in MALFORMED]
        + [
            (E.encode(_good(0)), 0),  # zero length
            (E.encode(_good(0)), E.MAX_PAYLOAD + 1),  # longer than a cell
            (E.encode(_good(0)), 0xFFFF),
            (E.encode(_good(0))[:-3], None),  # length says less than the record
        ]
    )
    sent, got, bad_total, i = [], [], 0, 0
    for start in range(0, len(bad_cells), 5):
        batch = bad_cells[start : start + 5]
        for payload, length in batch:
            E.send(ring, _good(i))
            sent.append(_good(i))
            i += 1
            _put_raw(ring, payload, length)
        E.send(ring, _good(i))
        sent.append(_good(i))
        i += 1
        received, bad = E.receive(ring)
        assert bad == len(batch)
        got.extend(received)
        bad_total += bad
    assert got == sent
    assert bad_total == len(bad_cells)
    assert ring.pending() == 0
    # A stale cell left from an earlier lap must not leak: a zero-length cell over old
    # valid data is still bad.
    _put_raw(ring, b"", 0)
    assert E.receive(ring) == ([], 1)


def test_send_gives_up_when_asked_to_stop_on_a_full_ring(episode_ring):
    ring = episode_ring.slots[0].episodes
    for i in range(ring.capacity):
        E.send(ring, _good(i))
    assert ring.pending() == ring.capacity
    # Full ring: send waits for space, sees the stop request, and drops the summary.
    assert E.send(ring, _good(99), should_stop=lambda: True) == 0
    received, bad = E.receive(ring)
    assert (len(received), bad) == (ring.capacity, 0)
    assert received == [_good(i) for i in range(ring.capacity)]
