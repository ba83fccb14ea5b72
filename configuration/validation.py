"""Validation of a training run's settings: every problem found at once, in one line.

:func:`validate` checks a :class:`config.Config` (types first, then ranges, choices and
the rules that tie fields together) and raises one :class:`ConfigError` that names every
invalid field with its value, the rule and the fix, so a user sees all of them before
any process or shared memory is created. ``config`` re-exports both names: import them
from there.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

# No import of config here, not even for type checking: config imports this module, and
# imports point one way. ``validate`` takes the Config as a dataclass instance it reads by
# field name.

SWITCH_VALUES: tuple[str, ...] = ("auto", "on", "off")  # compile and amp
# The values the choice fields accept: validation, main.py's and the bench's flags use these.
DEVICES: tuple[str, ...] = ("cpu", "cuda", "auto")
MONITORS: tuple[str, ...] = ("auto", "table", "log", "off")
BACKENDS: tuple[str, ...] = ("local", "ray")
# frontier_trajectory's value for "search the stage at the run's start" instead of a file's path.
TRAJECTORY_SEARCH = "search"


class ConfigError(ValueError):
    """One or more configuration values are invalid; the message lists every problem."""


def _problem(name: str, value: Any, rule: str, fix: str) -> str:
    return f"{name}={value!r}: {rule}; {fix}"


def _summarise(problems: list[str]) -> str:
    """Every problem on one line, so a user error is always one clear line."""
    if len(problems) == 1:
        return f"invalid configuration: {problems[0]}"
    return f"invalid configuration ({len(problems)} problems): " + " | ".join(problems)


def _env_kind(env_id: str) -> str | None:
    """The kind of ``env_id`` (:func:`envs.ids.parse_env_id`); None for an invalid id, which
    the env id check reports."""
    from envs.ids import EnvIdError, parse_env_id

    try:
        return parse_env_id(env_id).kind
    except EnvIdError:
        return None


def _frontier_start_unfit(env_id: str) -> str | None:
    """What makes ``env_id`` unfit for restarts near the frontier (None: fit, or an invalid
    id, which the env id check reports)."""
    return "Catch (it has no x position)" if _env_kind(env_id) == "catch" else None


def validate(cfg: Any) -> None:
    """Raise one ConfigError listing every invalid field (name, value, rule, fix) of
    ``cfg``, a :class:`config.Config`."""
    problems: list[str] = []
    types_ok = True
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        expected = {"int": int, "float": (int, float), "str": str, "bool": bool}[f.type]
        # bool is an int subclass: refuse True where a number is meant, and vice versa.
        bad = not isinstance(value, expected) or (f.type in ("int", "float") and isinstance(value, bool))
        if f.type == "float" and not bad and value != value:  # NaN
            bad = True
        if bad:
            types_ok = False
            article = "an" if f.type == "int" else "a"
            problems.append(_problem(f.name, value, f"must be {article} {f.type}", f"set {article} {f.type} value"))
    if not types_ok:
        raise ConfigError(_summarise(problems))

    def positive(name: str, fix: str = "use a value >= 1") -> None:
        if getattr(cfg, name) < 1:
            problems.append(_problem(name, getattr(cfg, name), "must be >= 1", fix))

    def non_negative(name: str) -> None:
        if getattr(cfg, name) < 0:
            problems.append(_problem(name, getattr(cfg, name), "must be >= 0", "use 0 to disable or a positive value"))

    positive("num_processes", "use --num-processes N with N >= 1")
    positive("batch_size", "use --batch-size N with N >= 1")
    for name in (
        "frame_skip",
        "envs_per_collector",
        "ring_capacity",
        "replay_capacity",
        "frame_stack",
        "n_step",
        "target_sync_updates",
        "updates_per_epoch",
        "epsilon_decay_frames",
        "eval_episodes",
        "eval_max_steps",
    ):
        positive(name)
    for name in (
        "no_progress_steps",
        "max_episode_steps",
        "learning_starts",
        "total_frames",
        "seed",
        "learner_threads",
        "learner_threads_max",
        "collector_niceness",
        "mark_interval_frames",
        "eval_interval_frames",
        "ray_nodes",
        "eval_max_lag_frames",
    ):
        non_negative(name)
    if cfg.collector_niceness > 19:
        problems.append(
            _problem("collector_niceness", cfg.collector_niceness, "must be 0-19", "use 15 (the default) or 0")
        )
    # Precise BN is the only BatchNorm path: the running average (0) was removed.
    positive("bn_calibration_states", "use 1024 (replay states the BatchNorm statistics are estimated over)")
    for name in (
        "heartbeat_timeout_s",
        "checkpoint_interval_s",
        "monitor_interval_s",
        "replay_ratio",
        "learning_rate",
    ):
        if not getattr(cfg, name) > 0 or getattr(cfg, name) == float("inf"):
            problems.append(_problem(name, getattr(cfg, name), "must be a finite number > 0", "use a positive value"))
    if not 0.0 <= cfg.replay_save_interval_s < float("inf"):
        problems.append(
            _problem(
                "replay_save_interval_s",
                cfg.replay_save_interval_s,
                "must be a finite number >= 0",
                "use 0 to save the replay only at the end, or seconds between saves",
            )
        )
    if not 0.0 < cfg.gamma <= 1.0:
        problems.append(_problem("gamma", cfg.gamma, "must be in (0, 1]", "use e.g. 0.99"))
    for name, example in (
        ("epsilon_end", "0.05"),
        ("acting_tau", "0.005"),
        ("eval_epsilon", "0.05"),
    ):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            problems.append(_problem(name, getattr(cfg, name), "must be in [0, 1]", f"use e.g. {example}"))
    if cfg.quantiles < 0 or cfg.quantiles == 1:
        problems.append(_problem("quantiles", cfg.quantiles, "must be 0 or >= 2", "use 0 (Q-values) or e.g. 32"))
    if not 0.0 <= cfg.frontier_start_share < 1.0:
        problems.append(
            _problem(
                "frontier_start_share", cfg.frontier_start_share, "must be in [0, 1)", "use e.g. 0.5, or 0 for off"
            )
        )
    elif cfg.frontier_start_share > 0 and _frontier_start_unfit(cfg.env_id) is not None:
        problems.append(
            _problem(
                "frontier_start_share",
                cfg.frontier_start_share,
                f"needs a stage that replays the same way from its start, not {_frontier_start_unfit(cfg.env_id)}",
                "use a fixed-stage id such as SuperMarioBros-1-1-v0, or 0 for off",
            )
        )
    if cfg.frontier_trajectory and cfg.frontier_start_share == 0:
        problems.append(
            _problem(
                "frontier_trajectory",
                cfg.frontier_trajectory,
                "is only used by restarts near the frontier, which are off",
                "add --set frontier_start_share=0.5, or leave frontier_trajectory empty",
            )
        )
    if cfg.frontier_trajectory not in ("", TRAJECTORY_SEARCH) and _env_kind(cfg.env_id) == "mario_random_stages":
        problems.append(
            _problem(
                "frontier_trajectory",
                cfg.frontier_trajectory,
                "is one stage's trajectory; random stages restart along one trajectory per stage",
                "use search (each stage searched at the run's start), or leave it empty",
            )
        )
    if cfg.frontier_trajectory == TRAJECTORY_SEARCH and cfg.backend != "local":
        problems.append(
            _problem(
                "frontier_trajectory",
                cfg.frontier_trajectory,
                f"searches on this machine, which backend {cfg.backend}'s collectors do not read",
                "run python main.py explore, copy the file to every node and give its path",
            )
        )
    if isinstance(cfg.frontier_demo_steps, int) and cfg.frontier_demo_steps < 0:
        problems.append(
            _problem("frontier_demo_steps", cfg.frontier_demo_steps, "must be >= 0", "use e.g. 16, or 0 for off")
        )
    elif cfg.frontier_demo_steps and cfg.frontier_start_share == 0:
        problems.append(
            _problem(
                "frontier_demo_steps",
                cfg.frontier_demo_steps,
                "is only used by restarts near the frontier, which are off",
                "add --set frontier_start_share=0.5, or use 0",
            )
        )
    if not 0.0 <= cfg.flag_reward < float("inf"):
        problems.append(
            _problem("flag_reward", cfg.flag_reward, "must be a finite number >= 0", "use e.g. 500, or 0 for off")
        )
    elif cfg.flag_reward > 0 and _env_kind(cfg.env_id) == "catch":
        problems.append(_problem("flag_reward", cfg.flag_reward, "applies to Mario ids only", "use 0"))
    if not cfg.reward_scale > 0 or cfg.reward_scale == float("inf"):
        problems.append(_problem("reward_scale", cfg.reward_scale, "must be a finite number > 0", "use e.g. 0.1"))
    from envs import ACTION_SET_NAMES, DEFAULT_ACTION_SET, EnvIdError, StagesError, check_stages, validate_env_id

    if cfg.action_set not in ACTION_SET_NAMES:
        problems.append(
            _problem(
                "action_set",
                cfg.action_set,
                f"must be one of {', '.join(ACTION_SET_NAMES)}",
                f"use {DEFAULT_ACTION_SET}",
            )
        )
    for name, allowed in (
        ("device", DEVICES),
        ("replay_device", DEVICES),
        ("monitor", MONITORS),
        ("compile", SWITCH_VALUES),
        ("amp", SWITCH_VALUES),
        ("backend", BACKENDS),
    ):
        if getattr(cfg, name) not in allowed:
            problems.append(
                _problem(name, getattr(cfg, name), f"must be one of {', '.join(allowed)}", f"use {allowed[0]}")
            )
    if cfg.batch_size >= 1 and cfg.replay_capacity >= 1 and cfg.batch_size > cfg.replay_capacity:
        problems.append(
            _problem(
                "batch_size",
                cfg.batch_size,
                f"must not exceed replay_capacity ({cfg.replay_capacity})",
                "lower --batch-size or raise replay_capacity",
            )
        )
    streams = cfg.num_processes * cfg.envs_per_collector
    if streams >= 1 and cfg.replay_capacity >= 1 and cfg.replay_capacity // streams < 64:
        problems.append(
            _problem(
                "replay_capacity",
                cfg.replay_capacity,
                f"must hold at least 64 transitions per environment ({streams} environments)",
                "raise replay_capacity or lower num_processes / envs_per_collector",
            )
        )
    if cfg.learning_starts > cfg.replay_capacity >= 1:
        problems.append(
            _problem(
                "learning_starts",
                cfg.learning_starts,
                f"must not exceed replay_capacity ({cfg.replay_capacity})",
                "lower learning_starts",
            )
        )
    if cfg.num_processes > 256:
        problems.append(_problem("num_processes", cfg.num_processes, "must be <= 256", "use fewer collectors"))
    if cfg.envs_per_collector > 64:
        problems.append(
            _problem("envs_per_collector", cfg.envs_per_collector, "must be <= 64", "use more collectors instead")
        )
    try:
        validate_env_id(cfg.env_id)
    except EnvIdError as exc:
        problems.append(f"env_id={cfg.env_id!r}: {exc}")
    else:
        try:
            check_stages(cfg.env_id, cfg.stages)
        except StagesError as exc:
            problems.append(_problem("stages", cfg.stages, exc.rule, exc.fix))
    if problems:
        raise ConfigError(_summarise(problems))
