"""The processes of a training run and the learner's event loop that drives them.

- :mod:`~pipeline.run.collector` (a sub-package): the collector process (emulators,
  acting, ring writes, frontier starts), and the supervisor that starts, watches and
  restarts collectors.
- :mod:`~pipeline.run.consolidator`: the asyncio task that drains the rings into replay.
- :mod:`~pipeline.run.evaluator` (a sub-package): evaluations beside training, best
  video; the protocol it and the learning benchmark share (episodes at an epsilon, each
  from a seed of its own; mean and median x_pos, flag rate), training's hold for an
  overdue evaluation, and the trainer's side of it; the per-stage table of ``eval`` and
  the learning benchmark with where the episodes end, and the values of the protocol's
  greedy steps against the returns that followed them (``eval --values``).
- :mod:`~pipeline.run.monitor` (a sub-package): the throughput monitor, the typed keys
  of its snapshots, its log line and live table, and the CPU and memory of a process for
  its rows.
- :mod:`~pipeline.run.collection`: the interface of a backend that runs the collectors
  elsewhere (the Ray backend, :mod:`pipeline.cluster`), handed to the trainer.
- :mod:`~pipeline.run.trainer`: the learner process, one event loop running all of them;
  :mod:`~pipeline.run.run_startup` builds what a run holds (one
  :class:`~pipeline.run.resources.RunResources`) before the loop, in order, and
  :mod:`~pipeline.run.run_shutdown` writes what it leaves after it;
  :mod:`~pipeline.run.interrupts` keeps a Ctrl-C of the startup from being lost,
  :mod:`~pipeline.run.startup` builds the pieces (run directory, learner, replay),
  :mod:`~pipeline.run.calibration` hands the learner its precise-BN states,
  :mod:`~pipeline.run.pacing` holds the replay ratio and epsilon schedule,
  :mod:`~pipeline.run.snapshots` turns counters into the monitor's snapshot,
  :mod:`~pipeline.run.evaluator.evaluations` and :mod:`~pipeline.run.run_checkpoints` drive the
  evaluator and the checkpoints, :mod:`~pipeline.run.write_failures` reports a write that
  fails while the run goes on.
- :mod:`~pipeline.run.machine` (a sub-package): the machine's limits checked before a run
  starts and the run directory's lock, the ``auto`` preset's measurements (``python main.py
  tune``) and what other processes used of the cores meanwhile.

Uses :mod:`pipeline.transport` and :mod:`pipeline.learning`.
"""
