"""The processes of a training run and the learner's event loop that drives them.

- :mod:`~pipeline.run.collector`: the collector process (emulators, acting, ring writes).
- :mod:`~pipeline.run.supervisor`: starts, watches and restarts collectors.
- :mod:`~pipeline.run.consolidator`: the asyncio task that drains the rings into replay.
- :mod:`~pipeline.run.evaluator`: greedy evaluations beside training, best video.
- :mod:`~pipeline.run.monitor`, :mod:`~pipeline.run.procstats`: the throughput monitor
  and its typed snapshot keys.
- :mod:`~pipeline.run.trainer`: the learner process, one event loop running all of them.

Uses :mod:`pipeline.transport` and :mod:`pipeline.learning`.
"""
