"""Episode summaries: msgpack records carried in each slot's episode ring.

A collector sends one summary per finished episode; the consolidator decodes them for
the monitor. Decoding is defensive: a malformed cell (bad length, not msgpack, wrong
fields or types) is counted and skipped, never fatal to the learner.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import msgpack
import numpy as np

from pipeline.transport.ring import EPISODE_CELL_DTYPE, RingStopped, SpscRing

MAX_PAYLOAD = EPISODE_CELL_DTYPE["data"].shape[0]


@dataclass
class EpisodeSummary:
    """What the monitor needs to know of one finished episode."""

    ret: float  # undiscounted return in game units (before reward scaling)
    length: int  # agent steps
    x_pos: int
    flag_get: bool
    world: int
    stage: int
    collector: int
    weights_version: int
    epsilon: float
    truncated: bool
    replayed_steps: int = 0  # agent steps replayed to its start point (0: the level's start)


_FIELD_TYPES = {f.name: f.type for f in fields(EpisodeSummary)}
_PY_TYPES = {"float": (int, float), "int": int, "bool": bool}


def encode(summary: EpisodeSummary) -> bytes:
    data = msgpack.packb(asdict(summary), use_bin_type=True)
    if len(data) > MAX_PAYLOAD:  # cannot happen with the fixed fields above
        raise ValueError(f"episode summary of {len(data)} bytes exceeds a {MAX_PAYLOAD}-byte cell")
    return data


def decode(payload: bytes) -> EpisodeSummary:
    """Parse one record; raise ValueError on anything malformed."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated exception types
        raise ValueError(f"not a msgpack record: {exc}") from exc
    if not isinstance(obj, dict) or set(obj) != set(_FIELD_TYPES):
        raise ValueError("episode record has the wrong fields")
    for name, type_name in _FIELD_TYPES.items():
        value = obj[name]
        # bool is an int subclass: reject True/False in int and float fields too.
        if not isinstance(value, _PY_TYPES[type_name]) or (type_name != "bool" and isinstance(value, bool)):
            raise ValueError(f"episode field {name!r} is not a {type_name}")
    return EpisodeSummary(**obj)


def send(ring: SpscRing, summary: EpisodeSummary, should_stop=None) -> int:
    """Producer side: write one summary into the episode ring; return stall ns."""
    data = encode(summary)
    try:
        stalled = ring.wait_for_space(should_stop)
    except RingStopped:
        return 0
    cell = ring.next_cell()
    cell["data"][: len(data)] = np.frombuffer(data, np.uint8)
    cell["length"] = len(data)
    ring.commit()
    return stalled


def receive(ring: SpscRing) -> tuple[list[EpisodeSummary], int]:
    """Consumer side: decode every pending summary; return them and the bad-record count."""
    count, views = ring.peek()
    summaries: list[EpisodeSummary] = []
    bad = 0
    # Episodes end a few times per second per collector: a loop over them is cheap.
    for view in views:
        for cell in view:
            length = int(cell["length"])
            try:
                if not 0 < length <= MAX_PAYLOAD:
                    raise ValueError(f"bad length {length}")
                summaries.append(decode(cell["data"][:length].tobytes()))
            except ValueError:
                bad += 1
    ring.release(count)
    return summaries, bad
