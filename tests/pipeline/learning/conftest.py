"""One compiled warm-up for the learning tests that only need a compiled learner.

torch.compile of a new learner takes tens of seconds on two cores (minutes beside a
training run). The tests that need *a* compiled learner of the acting-copy shape
(tests/pipeline/learning/acting_learners.py) share :func:`compiled_learner`: compiled and
warmed up once a session, handed to each test in the state it was built in. The tests of
compilation itself (its fallback, each option's graph against eager) build their own.
"""

from __future__ import annotations

import copy

import pytest

from pipeline.learning.learner import Learner
from tests.pipeline.learning.acting_learners import BATCH, acting_learner


@pytest.fixture(scope="session")
def _warm_compiled_learner() -> tuple[Learner, dict]:
    learner = acting_learner(compile=True)
    learner.warmup(batch_size=BATCH)  # compiles; puts every weight, buffer and counter back
    assert learner.compiled
    return learner, copy.deepcopy(learner.state_dict())


@pytest.fixture
def compiled_learner(_warm_compiled_learner: tuple[Learner, dict]) -> Learner:
    """The session's compiled learner, back in the state it was built in (weights, acting
    copy, optimizer, counters), with no metrics pending."""
    learner, built = _warm_compiled_learner
    learner.load_state_dict(copy.deepcopy(built))
    learner.pop_metrics()
    return learner
