"""The trainer's pacing rules: the replay-ratio limiter and the epsilon schedule."""

from __future__ import annotations

import pytest

from config import Config
from pipeline.run.pacing import EPSILON_START, RateLimiter, epsilon_at


def test_epsilon_decays_linearly_over_frames_then_stays():
    cfg = Config(epsilon_end=0.1, epsilon_decay_frames=1000)
    assert epsilon_at(cfg, 0) == EPSILON_START == 1.0
    assert epsilon_at(cfg, 500) == pytest.approx(0.55)
    assert epsilon_at(cfg, 1000) == epsilon_at(cfg, 10**9) == pytest.approx(0.1)


def test_limiter_holds_the_ratio_in_both_directions():
    limiter = RateLimiter(ratio=2.0, min_size=100, slack_samples=64)
    # Before min_size: no sampling, inserts are free.
    assert not limiter.can_sample(inserted=99, samples=0, batch=32)
    assert limiter.insert_budget(inserted=99, samples=0) is None
    # 50 transitions past min_size allow 100 samples (plus one batch of headroom).
    assert limiter.can_sample(inserted=150, samples=96, batch=32)
    assert not limiter.can_sample(inserted=150, samples=104, batch=32)
    # Inserts are paced: only what keeps the learner behind by at most the slack.
    assert limiter.insert_budget(inserted=150, samples=100 - 64) == 0
    assert limiter.insert_budget(inserted=150, samples=100) == 32  # (100 + 64) / 2 + 100 - 150
    assert limiter.insert_budget(inserted=182, samples=100) == 0
    assert limiter.insert_budget(inserted=150, samples=0) == 0
