"""The evaluator: evaluations of the published weights beside training, and the best video;
and the protocol's figures that ``eval`` and the learning benchmark print.

- :mod:`~pipeline.run.evaluator.evaluator`: :class:`Evaluator`, the learner's handle on
  the evaluator process (start, poll results without blocking, final evaluation, stop);
  its module docstring describes the whole protocol.
- :mod:`~pipeline.run.evaluator.evaluator_main`: the process itself (its entry point), which plays
  the protocol on each new version of the weights block.
- :mod:`~pipeline.run.evaluator.protocol`: the evaluation protocol that it, ``eval`` and
  the learning benchmark share (episodes at an epsilon, each from a seed of its own; mean
  and median x_pos, flag rate).
- :mod:`~pipeline.run.evaluator.hold`: where training waits for an overdue evaluation
  (``eval_max_lag_frames``), and the learner's handle on that hold.
- :mod:`~pipeline.run.evaluator.progress`: the process's steps and seconds of evaluating,
  shared as it goes.
- :mod:`~pipeline.run.evaluator.evaluations`: the trainer's side: start the evaluator,
  take and announce its results, and turn them into the monitor's gauges.
- :mod:`~pipeline.run.evaluator.stage_report`: the protocol played on every stage a policy
  is judged on, and the per-stage table; :mod:`~pipeline.run.evaluator.episode_ends`:
  where the episodes that did not finish end, grouped by obstacle.
- :mod:`~pipeline.run.evaluator.value_check`: the values of the protocol's greedy steps
  against the returns that followed them (``eval --values``).

The process runs ``process`` (and ``protocol``, ``hold``, ``progress``); the learner
process runs ``evaluator``, ``hold`` and ``evaluations``; ``stage_report``,
``episode_ends`` and ``value_check`` run in ``eval`` and in the learning benchmark's
evaluations of its marks. Uses the run layer's :mod:`~pipeline.run.monitor`
(announcements, and its ``procstats``), ``pacing``, and the gauge names of
:mod:`pipeline.common.gauges`. The trainer's parts use it, and ``eval``, ``play``,
``export`` and the learning benchmark use its protocol.
"""
