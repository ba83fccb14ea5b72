"""Evaluation per stage: the protocol played on every stage a policy is judged on, and
the per-stage table that ``eval`` and the learning benchmark print.

A policy trained on one stage is judged on that stage. One trained on random stages
draws a stage at every reset, so a protocol's episodes would fall on its stages by
chance, a stage sometimes getting none. Here every stage of the run
(:func:`envs.evaluation_stages`: each stage of its ``stages`` list, all 32 without one)
is played as its own fixed-stage env with the whole protocol, the same seeds on each, so
every stage gets its episodes and its figures: the mean x_pos, how far along the stage
that is (over the x_pos where the stage ends, :data:`envs.STAGE_ENDS`; none where it is
not recorded) and the flag rate. The full game and Catch have no one stage: one row
named "all".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from config import Config
from pipeline.common.errors import UserError
from pipeline.learning.episode_loop import EpisodeResult, build_env
from pipeline.run.evaluator import episode_ends

__all__ = ["StageRow", "combined_values", "ends_lines", "play_stages", "stage_table", "stages_played"]


@dataclass(frozen=True)
class StageRow:
    """One stage's figures under a protocol.

    Attributes:
        stage: "1-2", or "" for an env without one stage (the full game, Catch).
        episodes: episodes played on it.
        mean_x_pos: their mean x_pos.
        flag_rate: the share that got the flag (or the axe).
        along: how far along the stage the mean x_pos is (mean x_pos over the stage's
            end_x, at most 1); None where the stage's end is not recorded.
        ends: the x_pos of each episode that did not get the flag, in increasing order
            (:mod:`~pipeline.run.evaluator.episode_ends` groups them); None for a row read from an
            evaluation made before rows kept them.
    """

    stage: str
    episodes: int
    mean_x_pos: float
    flag_rate: float
    along: float | None
    ends: tuple[int, ...] | None = None

    @classmethod
    def of(
        cls, stage: str, episodes: int, mean_x_pos: float, flag_rate: float, ends: Sequence[int] | None = None
    ) -> StageRow:
        from envs import along

        kept = None if ends is None else tuple(sorted(int(x) for x in ends))
        return cls(stage, episodes, float(mean_x_pos), float(flag_rate), along(stage, mean_x_pos), kept)

    @classmethod
    def from_results(cls, stage: str, results: Sequence[EpisodeResult]) -> StageRow:
        if not results:
            raise ValueError(f"no episodes on stage {stage or 'all'}")
        return cls.of(
            stage,
            len(results),
            statistics.fmean(r.x_pos for r in results),
            statistics.fmean(float(r.flag_get) for r in results),
            [r.x_pos for r in results if not r.flag_get],
        )

    def describe_ends(self) -> str | None:
        """Where this row's episodes end, grouped by obstacle (None: not kept)."""
        return None if self.ends is None else episode_ends.describe_ends(self.ends, self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON has it (``ends`` a list), so a row played and a row read back
        from a cache compare equal."""
        values = asdict(self)
        values["ends"] = None if self.ends is None else list(self.ends)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> StageRow:
        """A row read back from JSON; ``along`` is worked out again from today's stage ends."""
        return cls.of(
            values["stage"], values["episodes"], values["mean_x_pos"], values["flag_rate"], values.get("ends")
        )


def stages_played(config: Config, env_id: str, stages: str | None = None) -> list[tuple[str, str]]:
    """The (stage name, env id) pairs that evaluate a policy of ``config`` on ``env_id``.

    ``stages`` (None: the run's own list, when ``env_id`` draws random stages) limits a
    random-stages id to those stages; a bad list is a :class:`UserError`.
    """
    from envs import EnvIdError, StagesError, evaluation_stages
    from envs.ids import parse_env_id

    try:
        random = parse_env_id(env_id).kind == "mario_random_stages"
        chosen = stages if stages is not None else (config.stages if random else "")
        return evaluation_stages(env_id, chosen)
    except StagesError as exc:
        raise UserError(f"stages {chosen!r}: {exc}") from None
    except EnvIdError as exc:
        raise UserError(f"cannot evaluate on {env_id}: {exc}") from None


def play_stages[T](
    config: Config,
    pairs: Sequence[tuple[str, str]],
    play: Callable[[Any], T],
    *,
    seed: int | None,
    sticky: float = 0.0,
) -> list[tuple[str, T]]:
    """``play(env)`` on each stage's env (built with ``config``'s settings, sticky actions of
    probability ``sticky`` and seeded with ``seed``, closed afterwards), in the order of ``pairs``."""
    played = []
    for stage, env_id in pairs:
        env = build_env(config, env_id, seed=seed, sticky=sticky)
        try:
            played.append((stage, play(env)))
        finally:
            env.close()
    return played


def combined_values(per_stage: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The value figures (:func:`~pipeline.run.evaluator.value_check.value_check`) of several stages
    as one: greedy steps summed, the mean Q taken and the mean return followed weighted by
    each stage's greedy steps (so their ratio is that of all the steps together), and the
    median of the stages' median action gaps."""
    counted = [figures for figures in per_stage if figures.get("greedy_steps")]
    steps = sum(figures["greedy_steps"] for figures in counted)
    combined: dict[str, float] = {"greedy_steps": float(steps)}
    if counted:
        mean_q = sum(f["greedy_steps"] * f["mean_q_taken"] for f in counted) / steps
        mean_return = sum(f["greedy_steps"] * f["mean_return_followed"] for f in counted) / steps
        combined |= {
            "mean_q_taken": mean_q,
            "mean_return_followed": mean_return,
            "q_over_return": mean_q / mean_return if mean_return else float("nan"),
            "median_action_gap": statistics.median(f["median_action_gap"] for f in counted),
        }
    return combined


def stage_table(rows: Sequence[tuple[str, StageRow]], *, first: str = "") -> list[str]:
    """The per-stage table: one line per (label, row), the label in a first column named
    ``first`` (the mark, in the learning benchmark; no such column when it is "")."""
    header = [first] if first else []
    header += ["stage", "episodes", "x_pos mean", "along", "flag rate"]
    lines = [header]
    for label, row in rows:
        along = "-" if row.along is None else f"{row.along:.2f}"
        cells = [row.stage or "all", str(row.episodes), f"{row.mean_x_pos:,.0f}", along, f"{row.flag_rate:.2f}"]
        lines.append(([label] if first else []) + cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    left = 2 if first else 1  # the names align left, the figures right
    return [
        "  "
        + "  ".join(
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    ]


def ends_lines(rows: Sequence[tuple[str, StageRow]]) -> list[str]:
    """Where each (label, row)'s episodes end, one line each (``label stage: x ...``);
    rows that did not keep their ends are left out."""
    lines = []
    for label, row in rows:
        described = row.describe_ends()
        if described is not None:
            lines.append(f"  {' '.join(part for part in (label, row.stage or 'all') if part)}: {described}")
    return lines
