"""How fast the learner may go, and how greedy the collectors act: the trainer's pacing rules.

- :class:`RateLimiter`: the replay ratio (samples drawn per inserted transition), held in
  both directions between the train loop and the consolidator.
- :func:`epsilon_at`: the exploration schedule, a linear decay over emulator frames from
  :data:`EPSILON_START` to a floor.
- :func:`next_mark`: when something done every N frames (a mark, an evaluation) is next due.

Pure arithmetic on counters, so the rules are tested without processes or torch.
"""

from __future__ import annotations

from config import Config

# Exploration epsilon at the start of training: every action random; never varied here.
EPSILON_START = 1.0


def epsilon_at(cfg: Config, frames: int) -> float:
    """Epsilon after ``frames`` emulator frames: linear from :data:`EPSILON_START` to
    ``epsilon_end`` over ``epsilon_decay_frames``, then constant at that floor."""
    start, end = EPSILON_START, cfg.epsilon_end
    fraction = min(1.0, frames / cfg.epsilon_decay_frames)
    return start + fraction * (end - start)


class RateLimiter:
    """Keeps samples drawn per inserted transition near ``ratio``, in both directions.

    Sampling waits while the learner is ahead; consolidation (and so, through the full
    ring, the collectors) may insert only as many transitions as keep the learner behind
    by at most ``slack`` samples. Before ``min_size`` transitions are stored, inserts are
    free. Handing the consolidator a budget, rather than a yes/no, paces collection
    smoothly: a yes used to let one pass drain every ring at once (thousands of records
    on a slow learner), after which collection stopped for a minute while the learner
    caught up, and the ratio over any window swung far from the configured one.
    """

    def __init__(self, ratio: float, min_size: int, slack_samples: float) -> None:
        self.ratio = ratio
        self.min_size = min_size
        self.slack = slack_samples

    def can_sample(self, inserted: int, samples: int, batch: int) -> bool:
        return inserted >= self.min_size and samples + batch <= (inserted - self.min_size) * self.ratio + batch

    def insert_budget(self, inserted: int, samples: int) -> int | None:
        """Transitions that may be inserted now (None = no limit yet, 0 = none)."""
        if inserted < self.min_size:
            return None
        return max(0, int((samples + self.slack) / self.ratio) + self.min_size - inserted)


def next_mark(frames: int, interval: int) -> int:
    """The first multiple of ``interval`` above ``frames`` (a resumed run goes on from there)."""
    return (frames // interval + 1) * interval
