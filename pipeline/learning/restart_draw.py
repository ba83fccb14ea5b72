"""Where on the kept trajectory a restart begins: where restarts have been failing.

The frontier archive (:mod:`pipeline.learning.frontier`) draws restart steps uniformly by
default, so every obstacle is met in proportion to the steps of the trajectory in front of
it. On 1-3 that left the hard part unlearned: the gap needs three presses, and the first
one (on the low treetop, about 2 % of a 415-step trajectory) was never learned while the
two after it were.

``frontier_start_draw=failures`` draws the restarts where they fail. It keeps the idea of
Salimans and Chen's backward algorithm (2018: start where the agent cannot yet do what the
demonstration did) without its schedule, so several hard places are worked on at once.
The trajectory is cut into sections of ``SECTION_STEPS`` steps. Each section keeps the
share of its restarts that failed, as an exponential average; a restart failed when its
episode got less than ``PROGRESS_X`` further along x than where it began and did not take
the flag. A section is drawn with probability proportional to its failure share plus
``FAILURE_FLOOR``, so a section that is mastered is still met now and then; a section
never started from counts as failing, so each is tried early. The step within the
section is uniform.

When the archive keeps a new trajectory (an episode went further), the sections of the
prefix the two share keep their figures; the rest start again as untried.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FAILURE_FLOOR", "PROGRESS_X", "SECTION_STEPS", "FailureWeightedDraw"]

SECTION_STEPS = 8  # agent steps per section (32 emulator frames: about half a second of play)
PROGRESS_X = 256  # pixels further than the start that count as getting on: one screen's width
FAILURE_FLOOR = 0.05  # weight of a section whose every restart succeeds, beside 1 for one that always fails
AVERAGE_RATE = 0.1  # weight of a restart's outcome in its section's failure share


def restart_failed(start_x: int, furthest_x: int, flag: bool) -> bool:
    """Whether an episode that began at ``start_x`` and got to ``furthest_x`` failed."""
    return not flag and furthest_x < start_x + PROGRESS_X


class FailureWeightedDraw:
    """Failure shares of a trajectory's sections, and restart steps drawn by them."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.steps = 0  # the trajectory's length
        self.failure = np.zeros(0)  # per section: exponential average of failed restarts
        self.tries = np.zeros(0, np.int64)  # per section: restarts whose outcome was recorded
        self.start_x = np.zeros(0)  # per section: mean x its restarts began at (for the log)

    def follow(self, shared_steps: int, steps: int) -> None:
        """The archive replaced its trajectory by one of ``steps`` steps whose first
        ``shared_steps`` are the old one's: keep the figures of the sections within them,
        start the others as untried."""
        shared = shared_steps // SECTION_STEPS
        sections = -(-steps // SECTION_STEPS)
        shared = min(shared, sections, len(self.failure))
        failure, tries, start_x = np.ones(sections), np.zeros(sections, np.int64), np.zeros(sections)
        failure[:shared], tries[:shared], start_x[:shared] = (
            self.failure[:shared],
            self.tries[:shared],
            self.start_x[:shared],
        )
        self.failure, self.tries, self.start_x = failure, tries, start_x
        self.steps = steps

    def draw(self) -> int:
        """Steps of the trajectory to replay (1..its length)."""
        weights = self.failure + FAILURE_FLOOR
        section = int(self.rng.choice(len(weights), p=weights / weights.sum()))
        first = section * SECTION_STEPS + 1
        last = min(self.steps, first + SECTION_STEPS - 1)
        return int(self.rng.integers(first, last + 1))

    def record(self, start_step: int, start_x: int, furthest_x: int, flag: bool) -> None:
        """An episode that began after ``start_step`` replayed steps ended: count its outcome."""
        section = (start_step - 1) // SECTION_STEPS
        if not 0 <= section < len(self.failure):
            return  # began on a trajectory the archive has since replaced beyond it
        failed = float(restart_failed(start_x, furthest_x, flag))
        self.failure[section] += AVERAGE_RATE * (failed - self.failure[section])
        self.tries[section] += 1
        self.start_x[section] += (start_x - self.start_x[section]) / self.tries[section]

    def hardest(self, count: int = 3) -> str:
        """The tried sections that fail most, e.g. ``x 601: 0.93 of 120``: for the log."""
        tried = np.flatnonzero(self.tries > 0)
        order = tried[np.argsort(-self.failure[tried], kind="stable")][:count]
        return ", ".join(f"x {self.start_x[s]:.0f}: {self.failure[s]:.2f} of {self.tries[s]}" for s in order)
