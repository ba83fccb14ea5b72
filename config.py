"""Training configuration: the knobs a user edits, the hardware presets, and validation.

Edit the knobs right below to change what ``python main.py`` does without flags. A value
is resolved with this precedence (highest first):

    command line  >  knobs in this file  >  preset  >  dataclass defaults

:func:`configuration.resolution.resolve_config` applies it and returns the final :class:`Config`
together with where each value came from (``python main.py --print-config`` shows both);
it reads the knobs and presets here when called. Validation
(:mod:`configuration.validation`, re-exported here as :func:`validate` and
:class:`ConfigError`) collects every problem and raises a single :class:`ConfigError`
before any process or shared memory is created. A checkpoint's saved config is read
with :meth:`Config.from_dict`, which refuses the options removed since (each removal
after a tag) at any value the code no longer has (:mod:`configuration.removed`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

# Validation and the removed options live beside this file; their names stay importable
# from here (``X as X``).
from configuration.removed import RemovedOptionError as RemovedOptionError
from configuration.removed import check_saved
from configuration.validation import BACKENDS as BACKENDS
from configuration.validation import DEVICES as DEVICES
from configuration.validation import MONITORS as MONITORS
from configuration.validation import SWITCH_VALUES as SWITCH_VALUES
from configuration.validation import TRAJECTORY_SEARCH as TRAJECTORY_SEARCH
from configuration.validation import ConfigError as ConfigError
from configuration.validation import validate as validate

# ---------------------------------------------------------------------------------------
# Knobs: edit these by hand. None keeps the preset's value.
# ---------------------------------------------------------------------------------------
PRESET: str = "auto"  # one of: auto, cpu, laptop, desktop, server, tiny
NUM_PROCESSES: int | None = None  # collector processes (each steps envs_per_collector emulators)
BATCH_SIZE: int | None = None  # learner mini-batch size
ENV_ID: str | None = None  # e.g. "SuperMarioBros-1-1-v0", "SuperMarioBrosRandomStages-v0", "Catch-v0"
TOTAL_FRAMES: int | None = None  # stop after this many emulator frames (0 = run until Ctrl-C)
BACKEND: str | None = None  # "local" (collectors on this machine) or "ray" (collectors on a Ray cluster)
# ---------------------------------------------------------------------------------------

# The mark of a field a resumed run may change without changing what it learns (where
# and how long it runs, what it reports, on which device and threads): every other field
# that differs from the checkpoint's is named at the resume (RUN_ONLY_FIELDS).
RUN_ONLY: dict[str, Any] = {"run_only": True}
# The mark of a field with a knob of its own above (its name in capitals): KNOBS.
KNOB: dict[str, Any] = {"knob": True}
# The mark of a field that shapes the network: a checkpoint resumes only into the same
# shape (NETWORK_FIELDS).
SHAPES_NETWORK: dict[str, Any] = {"shapes_network": True}


def saved_before(value: Any) -> dict[str, Any]:
    """The mark of a field added after runs were saved: ``value`` is what those runs
    trained with, whatever the default is today (SAVED_BEFORE)."""
    return {"saved_before": value}


@dataclass
class Config:
    """Every setting of a training run. Each field's docstring says what it controls."""

    # --- environment -------------------------------------------------------------------
    env_id: str = field(default="SuperMarioBros-1-1-v0", metadata=KNOB)
    """Environment id: SuperMarioBros-<world>-<stage>-v<0..3>, SuperMarioBros-v0..3 (full
    game), SuperMarioBrosRandomStages-v0..3, or Catch-v0 (synthetic, for tests)."""
    stages: str = ""
    """SuperMarioBrosRandomStages ids: the stages each reset draws from, as world-stage
    separated by commas, e.g. 1-1,1-2,1-3,1-4 for one network over World 1 ('' = all 32).
    Evaluation (eval, the learning benchmark) plays each of them and reports per stage."""
    action_set: str = "right_only"
    """Joypad action set: right_jump (2 actions: right, right+A), right_only (5: NOOP, right,
    right+A, right+B, right+A+B), simple (7: those, A alone and left) or
    complex (12). With right_only and 1,024 calibration states 1-1's 2M marks finish it in
    0.40 and 0.30 of their episodes on two seeds, against simple's 0.20 and 0.05
    (docs/learning.md)."""
    frame_skip: int = 4
    """Emulator frames per agent step (the action repeats; max over the last two frames)."""
    reward_scale: float = 0.1
    """Multiplier applied to the game's reward before it is stored."""
    no_progress_steps: int = 200
    """Truncate an episode after this many agent steps without new x progress (0 = off)."""
    flag_reward: float = field(default=0.0, metadata=saved_before(0.0))
    """Mario: added, in game units before reward_scale, to the reward of the step that
    reaches the flag (or the axe); 0 = off, the task's own reward. That reward pays x
    progress and nothing for the flag, so on 1-2 the warp zone's wall returns more than the
    flag (envs.wrappers.FlagReward). Evaluation's returns stay the task's."""
    max_episode_steps: int = 4000
    """Truncate an episode after this many agent steps (0 = off)."""

    # --- collectors --------------------------------------------------------------------
    num_processes: int = field(default=2, metadata=KNOB)
    """Collector processes; each steps ``envs_per_collector`` emulators, each env writing
    to its own ring slot (so the ring has num_processes x envs_per_collector slots)."""
    envs_per_collector: int = 4
    """Environments each collector steps in lockstep, choosing their actions with one
    batched forward pass (batch-1 inference is the collector's main overhead)."""
    ring_capacity: int = 1024
    """Records per ring slot (one slot per environment; about 7 KB each)."""
    heartbeat_timeout_s: float = field(default=30.0, metadata=RUN_ONLY)
    """A collector whose heartbeat is older than this is killed and restarted."""

    # --- replay and learning -----------------------------------------------------------
    replay_capacity: int = 100_000
    """Transitions kept in the replay memory (one 84x84 frame each)."""
    replay_device: str = "cpu"
    """Where the replay memory lives: cpu, cuda, or auto (the learner's device)."""
    batch_size: int = field(default=32, metadata=KNOB)
    """Learner mini-batch size (samples per update)."""
    learning_starts: int = 10_000
    """Transitions in replay before the first update."""
    replay_ratio: float = 8.0
    """Samples drawn per inserted transition; the learner waits when it is ahead."""
    frame_stack: int = field(default=4, metadata=SHAPES_NETWORK)
    """Frames stacked into one observation (rebuilt from replay at sampling time)."""
    n_step: int = 3
    """Steps of the n-step return."""
    gamma: float = 0.99
    """Discount factor."""
    learning_rate: float = 1e-4
    """Adam learning rate."""
    target_sync_updates: int = 2000
    """Updates between target network syncs (full state_dict, BatchNorm buffers included)."""
    quantiles: int = field(default=32, metadata=saved_before(0))
    """QR-DQN (Dabney et al. 2018): the network learns this many quantiles of the return per
    action and the quantile Huber loss trains them; the Q-value that acts is their mean
    (0 = Q-values and the Huber loss; else >= 2). 32 finished 1-1 in 0.50 of the 2M marks'
    episodes on seeds 0 and 1, against the Q-value learner's 0.40 and 0.30, and was ahead
    at 1M on both (docs/learning.md, "What it reaches")."""
    bn_calibration_states: int = field(default=1024, metadata=saved_before(0))
    """Precise BN (Wu & Johnson 2021): before every publish and every target copy the
    online network's BatchNorm statistics are re-estimated with its current weights over
    this many uniform replay states (>= 1), and left alone by the training forwards in
    between, so every eval-mode forward (acting copies, evaluator, target, Double-DQN
    argmax) normalises as training does; a running average moved the eval-mode Q-values
    by several action gaps. 256 states gave the steadiness of 1,024 at a quarter of the
    cost (docs/learning-history.md, "Steadiness"), but a draw of 256 can stick a network
    at one obstacle (docs/learning.md, "What a mark's statistics cost"): 1,024 holds the
    collectors, the target and the evaluator to the network's own behaviour. 512 halves a
    publish and held the steadiness figures, but read lower at 1M on both seeds screened
    (docs/learning.md, "At the machine's floor"), so 1,024 stays."""
    acting_tau: float = field(default=0.005, metadata=saved_before(0.0))
    """The collectors, the evaluator, marks and play act with a moving average of the online
    weights, acting += tau * (online - acting) after every update, its BatchNorm statistics
    calibrated for its own weights at every publish (BBF acts with such an average at
    0.005). Churn per publish 0.11 against 0.37-0.42 at the same x_pos on two seeds to 2M
    (docs/learning-history.md). 0 = act with the online weights."""
    updates_per_epoch: int = 100
    """Learner updates per epoch."""
    epsilon_end: float = 0.05
    """Exploration epsilon after the decay."""
    epsilon_decay_frames: int = 1_000_000
    """Emulator frames over which epsilon falls linearly from 1 (pipeline.run.pacing) to epsilon_end."""
    frontier_start_share: float = field(default=0.0, metadata=saved_before(0.0))
    """Share of training episodes that start at a point of the collector's furthest
    trajectory so far instead of the level's start (Go-Explore's return-then-explore; the
    collector replays the recorded actions to get there: replayed_frames counts the cost).
    0 = off; needs a Mario id (random stages keep a trajectory per stage). Evaluation always
    starts at the level's start."""
    frontier_trajectory: str = field(default="", metadata=saved_before(""))
    """A trajectory file (``python main.py explore`` finds one by search on the emulator) that
    each collector's furthest trajectory starts from in a fresh run, so that restarts
    (``frontier_start_share``) are drawn along it from the first episode: Go-Explore's two
    phases. "search": the run searches its stage (each of a random-stages run's) as explore
    does, before its collectors start, and keeps the file in <run>/frontier/searched.npz
    (searched-W-S.npz per stage): one setting for every stage. "" = the collectors' own
    episodes only."""
    frontier_demo_steps: int = field(default=0, metadata=saved_before(0))
    """Steps of the trajectory a restart plays before the policy takes over, recorded as
    transitions of its episode: the episode starts that many steps before the drawn step,
    so the replay holds the trajectory's own actions where the policy fails (learning from
    a demonstration, as DQfD does with its expert's). 0 = the policy acts from the start point."""

    # --- compute -----------------------------------------------------------------------
    device: str = field(default="auto", metadata=RUN_ONLY)
    """Learner device: cpu, cuda or auto (cuda when available)."""
    compile: str = field(default="auto", metadata=RUN_ONLY)
    """torch.compile the learner: on, off, or auto (measured on this machine, see amp; a failed
    compile falls back to eager with one warning)."""
    amp: str = field(default="auto", metadata=RUN_ONLY)
    """Mixed precision (bf16 autocast on CPU and recent GPUs, fp16 + GradScaler on older GPUs):
    on, off, or auto. With auto, the learner's variants are timed once per machine, torch
    version and learner shape (cached), and the fastest is used; bf16 is slower than fp32 on
    CPUs without native bf16, and compile does not pay everywhere."""
    learner_threads: int = field(default=0, metadata=RUN_ONLY)
    """Torch intra-op threads of the learner (0 = cores left after the collectors, >= 1): the
    fewest it runs with."""
    learner_threads_max: int = field(default=0, metadata=RUN_ONLY)
    """The most intra-op threads the learner takes while the collectors wait for it (0 = every
    core; learner_threads or fewer = a fixed count). See pipeline/run/trainer/thread_handover.py."""
    collector_niceness: int = field(default=15, metadata=RUN_ONLY)
    """Levels of CPU priority (nice) the collectors run below the learner, 0-19: the learner,
    the run's bottleneck whenever they wait for it, gets a core the moment it wants one. At 5
    the learner still lost a tenth of its core to two busy processes and its second thread
    gained nothing; at 15 it ran as on a quiet machine (pipeline/common/priority.py)."""

    # --- run control -------------------------------------------------------------------
    total_frames: int = field(default=0, metadata={**RUN_ONLY, **KNOB})
    """Stop after this many emulator frames (0 = run until Ctrl-C)."""
    seed: int = 0
    """Base random seed (env stream i uses seed + 1000 * i: pipeline/common/seeds.py)."""
    run_dir: str = field(default="runs", metadata=RUN_ONLY)
    """Directory that holds one sub-directory per run."""
    run_name: str = field(default="", metadata=RUN_ONLY)
    """Run sub-directory name ('' = a timestamped name)."""
    resume: str = field(default="", metadata=RUN_ONLY)
    """Checkpoint file or run directory to resume from ('' = fresh run)."""
    checkpoint_interval_s: float = field(default=300.0, metadata=RUN_ONLY)
    """Seconds between periodic checkpoints."""
    replay_save_interval_s: float = field(default=0.0, metadata=RUN_ONLY)
    """The replay memory is always saved beside the final checkpoint (compressed, ~55 MB per
    100k Mario transitions, written atomically) and restored on --resume, so a resumed run
    does not start again from an empty buffer (a missing or corrupt file gives one warning).
    This saves it every this many seconds too (0 = only with the final checkpoint), so a run
    killed without a final checkpoint still resumes with its replay. Each save holds the
    learner for a few seconds."""
    mark_interval_frames: int = field(default=0, metadata=RUN_ONLY)
    """Also keep the network's weights every this many frames in checkpoints/marks/ (the
    learning benchmark evaluates them afterwards; 0 = off). About 7 MB each."""
    monitor_interval_s: float = field(default=5.0, metadata=RUN_ONLY)
    """Seconds between monitor refreshes (table, log line, CSV row, TensorBoard)."""
    monitor: str = field(default="auto", metadata=RUN_ONLY)
    """Monitor display: auto (live table on a terminal, log lines otherwise), table, log, off."""

    # --- cluster -------------------------------------------------------------------------
    backend: str = field(default="local", metadata=KNOB)
    """Where the collectors run: local (processes on this machine, nothing to install) or ray
    (a node agent on every node of a Ray cluster that offers the collector_node resource
    starts num_processes collectors there; needs pip install -e ".[ray]")."""
    ray_address: str = ""
    """The Ray cluster of --backend ray: '' starts a one-node Ray on this machine for the run,
    'auto' joins the cluster `ray start` runs here, HOST:PORT joins the head node there."""
    ray_nodes: int = 0
    """With --backend ray, collector nodes to wait for before the run starts (0 = the ones
    present, at least one); the replay keeps one stream per env of each, and a node that
    dies leaves its place to the next node that joins."""

    # --- evaluation during training ------------------------------------------------------
    eval_interval_frames: int = field(default=250_000, metadata=RUN_ONLY)
    """Emulator frames between evaluations of the latest weights by the evaluator process
    (0 = none): evaluations land at the same frames on every machine (at multiples of
    it), as the learning benchmark's marks do."""
    eval_episodes: int = field(default=10, metadata=RUN_ONLY)
    """Episodes per evaluation, each from a seed of its own, at eval_epsilon (the field's way
    of judging a policy; the learning benchmark plays 20). With eval_epsilon > 0 one greedy
    episode is played beside them (what ``play`` shows)."""
    eval_max_steps: int = field(default=2000, metadata=RUN_ONLY)
    """Agent steps after which an evaluation episode is cut."""
    eval_epsilon: float = 0.05
    """Probability of a random action in the evaluator's episodes (0 = greedy: on a fixed
    stage a greedy policy plays the same episode from every seed)."""
    eval_max_lag_frames: int = 0
    """When > 0, training waits for the evaluator: the collectors pause while an evaluation
    due this many frames ago (at a multiple of eval_interval_frames) has not started, so a
    slow evaluator (niced, on a busy machine) evaluates at every interval instead of
    skipping some, and the run takes longer by what it waits. 0: never waits (>= 0)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], *, source: str = "a saved config") -> Config:
        """A Config from a saved ``to_dict()`` (a checkpoint's, named by ``source`` in errors):
        fields it lacks take the value runs had before the field existed (``SAVED_BEFORE``),
        else today's default; options removed since are dropped when they hold the value the
        code now always behaves as, and refused otherwise (:class:`RemovedOptionError`)."""
        saved = {**SAVED_BEFORE, **values}
        check_saved(saved, source)
        return cls(**{k: v for k, v in saved.items() if k in FIELD_NAMES})

    def env_kwargs(self, *, task_reward: bool = False) -> dict[str, Any]:
        """Keyword arguments of :func:`envs.make_env` for this run's env settings (all but
        the env id and the seed); ``task_reward`` gives the task's reward in game units
        (no scale, no flag reward), what evaluation reports."""
        return dict(
            action_set=self.action_set,
            frame_skip=self.frame_skip,
            reward_scale=1.0 if task_reward else self.reward_scale,
            no_progress_steps=self.no_progress_steps,
            flag_reward=0.0 if task_reward else self.flag_reward,
            max_episode_steps=self.max_episode_steps,
            stages=self.stages,
        )


FIELD_NAMES: frozenset[str] = frozenset(f.name for f in fields(Config))
RUN_ONLY_FIELDS: frozenset[str] = frozenset(f.name for f in fields(Config) if f.metadata.get("run_only"))
# What a run saved before these fields existed did: a checkpoint without them was trained
# so, whatever today's defaults are. Options removed since, and the value each now has,
# are configuration.removed's: a saved config is read through both (``Config.from_dict``).
SAVED_BEFORE: dict[str, Any] = {
    f.name: f.metadata["saved_before"] for f in fields(Config) if "saved_before" in f.metadata
}
# The knobs at the top of this file, by the field each sets: NUM_PROCESSES -> num_processes.
KNOBS: dict[str, str] = {f.name.upper(): f.name for f in fields(Config) if f.metadata.get("knob")}
NETWORK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Config) if f.metadata.get("shapes_network"))
FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Config)}

# How every Mario preset learns: the setting the learning benchmark measured
# (docs/learning.md, "What it reaches": QR-DQN on 1-1, seeds 0, 1 and 2 to 2M frames,
# flag rate 0.50 at 2M on each). What is learned per frame does not depend on the machine,
# so a preset for bigger hardware changes only what runs where (collectors, devices, ring
# sizes) and gets its speed from more collectors and a faster update, never from a
# learning setting nobody measured (batch 64-256 at ratio 4-8 with this learning rate,
# the presets' earlier settings, never were).
LEARNING_AS_MEASURED: dict[str, Any] = dict(
    batch_size=32,
    replay_capacity=100_000,
    learning_starts=5_000,
    epsilon_decay_frames=250_000,
    replay_ratio=4.0,
    learning_rate=1e-4,
    target_sync_updates=2000,
    updates_per_epoch=100,
)

# Presets change only what differs from the defaults. Sizes follow the hardware: the
# collectors should keep every core but the learner's busy.
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(LEARNING_AS_MEASURED, num_processes=2, device="cpu", learner_threads=1, ring_capacity=512),
    "laptop": dict(LEARNING_AS_MEASURED, num_processes=4, device="auto"),
    "desktop": dict(LEARNING_AS_MEASURED, num_processes=8, device="auto", ring_capacity=2048),
    "server": dict(LEARNING_AS_MEASURED, num_processes=16, device="cuda", replay_device="cuda", ring_capacity=4096),
    # Catch-v0 is learned within 5k frames: eight seeds (0-7) read 1.8-5.0 of 5 at 4k frames
    # and 4.6-5.0 at 5k with this preset (with 4 frames stacked and batches of 32, as the
    # Mario presets, 1.8-5.0 at 6k and 4.8-5.0 at 8k).
    # No evaluator: the preset is for smoke tests, where one more process only costs time.
    # One learner thread: beside the collectors, two threads on a busy 2-core box took
    # 370 ms an update against one thread's 75 ms (torch's threads wait on each other).
    "tiny": dict(
        env_id="Catch-v0",
        reward_scale=1.0,
        num_processes=1,
        envs_per_collector=1,
        # Batches of 16 at the same replay ratio: twice the updates per frame, each ~0.7 of
        # a batch-32 update's time on one core: Catch is learned in 5k frames instead of 7k
        # (batch 32 with one frame: 4.4-5.0 of 5 at 7k, 438 updates) for the learner time
        # of those 438 updates.
        batch_size=16,
        replay_capacity=4_000,
        learning_rate=5e-4,
        learning_starts=200,
        ring_capacity=64,
        replay_ratio=2.0,
        # One frame, not a stack of 4: Catch's ball falls straight down one row a step, so
        # one frame holds the whole state, and the stack only made Catch slower to learn
        # (batches of 32, seeds 0-7: 1.8-5.0 of 5 at 6k frames stacked, 4.4-5.0 with one).
        frame_stack=1,
        compile="off",
        amp="off",
        device="cpu",
        learner_threads=1,
        learner_threads_max=1,
        # A publish every 20 updates, every 160 frames as 10 of batch 32 were: at every 10,
        # publishing (calibrating 64 states) took 12 % of the learner's time. Seeds 0-7
        # read 4.6-5.0 of 5 at 5k frames either way (seven of them 5.0 at 20, five at 10).
        updates_per_epoch=20,
        epsilon_decay_frames=2_000,
        target_sync_updates=200,
        # 64 calibration states, not 256: with a publish every 10 updates of 32, 256 took 21 %
        # of the learner's time and 64 took 6 %; Catch's 10 x 12 grid of then (35k frames,
        # seeds 0-3) still reached 5.0 of 5 by 27.5k frames and ended at 4.8-5.0.
        bn_calibration_states=64,
        monitor="off",
        checkpoint_interval_s=60.0,
        monitor_interval_s=1.0,
        eval_interval_frames=0,
    ),
}
PRESET_NAMES: tuple[str, ...] = ("auto", *PRESETS)
