"""Tests for pipeline.common.seeds: every stream and every restart plays its own episodes."""

from __future__ import annotations

from pipeline.common.seeds import stream_seed


def test_streams_and_restarts_never_share_a_seed() -> None:
    seeds = [stream_seed(7, stream, starts) for stream in range(256) for starts in range(64)]
    assert len(set(seeds)) == len(seeds)


def test_the_first_start_of_stream_i_is_the_documented_seed_plus_1000_i() -> None:
    assert [stream_seed(5, i) for i in range(3)] == [5, 1005, 2005]
    assert stream_seed(5, 2, starts=1) == 5 + 2000 + 1_000_003
