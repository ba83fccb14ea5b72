"""The processes of a training run and the learner's event loop that drives them.

- :mod:`~pipeline.run.collector` (a sub-package): the collector process (emulators,
  acting, ring writes, frontier starts), and the supervisor that starts, watches and
  restarts collectors.
- :mod:`~pipeline.run.evaluator` (a sub-package): evaluations beside training, best
  video; the protocol it and the learning benchmark share (episodes at an epsilon, each
  from a seed of its own; mean and median x_pos, flag rate), training's hold for an
  overdue evaluation, and the trainer's side of it; the per-stage table of ``eval`` and
  the learning benchmark with where the episodes end, and the values of the protocol's
  greedy steps against the returns that followed them (``eval --values``).
- :mod:`~pipeline.run.monitor` (a sub-package): the throughput monitor, the typed keys
  of its snapshots, its log line and live table, and the CPU and memory of a process for
  its rows.
- :mod:`~pipeline.run.trainer` (a sub-package): the learner process, one event loop
  running all of them: the ordered startup of a run and the pieces it builds, the
  consolidator that drains the rings into replay, the interface of a backend that runs
  the collectors elsewhere (the Ray backend, :mod:`pipeline.cluster`), the learner's
  precise-BN states and threads, the monitor's snapshot, checkpoints and the shutdown.
- :mod:`~pipeline.run.machine` (a sub-package): the machine's limits checked before a run
  starts and the run directory's lock, the ``auto`` preset's measurements (``python main.py
  tune``) and what other processes used of the cores meanwhile.

At the top level, what several of them share: :mod:`~pipeline.run.pacing`, the replay
ratio, the epsilon schedule and when a mark or an evaluation is next due (the trainer
and the evaluator process read it).

Each sub-package is one unit (``tests/test_layers.py``): the trainer imports the
collectors, the evaluator, the monitor and the machine checks, the evaluator imports the
monitor, and nothing imports back up that chain. Uses :mod:`pipeline.transport` and
:mod:`pipeline.learning`.
"""
