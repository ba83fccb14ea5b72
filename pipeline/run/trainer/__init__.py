"""The learner process: the training loop, and what it builds and drives.

- :mod:`~pipeline.run.trainer.trainer`: :class:`~pipeline.run.trainer.trainer.Trainer`,
  one asyncio event loop running the whole training system (train loop, consolidator,
  monitor, evaluations, checkpoints, the collectors' supervision).
- :mod:`~pipeline.run.trainer.startup`: the ordered build of a run, :func:`open_run`
  (resume checkpoint, machine checks and lock, learner, replay, monitor, compile, then
  the shared memory and the collectors), every piece's release put on the caller's stack;
  :mod:`~pipeline.run.trainer.pieces`: the pieces it builds (run directory, resume
  checkpoint, learner, replay memory) and :class:`TrainingError`;
  :mod:`~pipeline.run.trainer.resources`: what a run holds from startup to shutdown.
- :mod:`~pipeline.run.trainer.shutdown`: what the run writes as it ends (the final
  evaluation, checkpoint, replay and summary); :mod:`~pipeline.run.trainer.interrupts`: a
  Ctrl-C of the startup is never lost, and one ends the shutdown's optional wait.
- :mod:`~pipeline.run.trainer.consolidator`: the asyncio task that drains the rings into
  the replay; :mod:`~pipeline.run.trainer.collection`: the interface of a backend that runs
  the collectors elsewhere (the Ray backend, :mod:`pipeline.cluster`).
- :mod:`~pipeline.run.trainer.calibration`: the learner's precise-BN states;
  :mod:`~pipeline.run.trainer.steadiness_watch`: when the steadiness probe runs;
  :mod:`~pipeline.run.trainer.thread_handover`: the learner's intra-op threads, handed
  over between it and the collectors.
- :mod:`~pipeline.run.trainer.publishing`: the weights handed to the collectors each epoch.
- :mod:`~pipeline.run.trainer.snapshots`: the counters turned into the monitor's snapshot
  (and the monitor task that shows them);
  :mod:`~pipeline.run.trainer.checkpoints`: checkpoints, the best one, resuming;
  :mod:`~pipeline.run.trainer.write_failures`: a write that fails while the run goes on.

All of it runs in the learner process (``python main.py``, or the benchmark's trainer
runs). Uses the run layer's :mod:`~pipeline.run.collector` (the supervisor and the
collectors' arguments), :mod:`~pipeline.run.evaluator` (the trainer's side),
:mod:`~pipeline.run.monitor`, :mod:`~pipeline.run.machine` (the checks) and ``pacing``;
none of them imports it.
"""
