"""The machine checks and measurements: what the learner process (``train``) and ``tune`` run
on the machine itself, before a run creates anything or instead of one.

- :mod:`~pipeline.run.machine.preflight`: the machine's limits (shared memory, RAM, cores)
  checked before a run starts, and the run directory's lock.
- :mod:`~pipeline.run.machine.tuning`: the ``auto`` preset's measurements (``python main.py
  tune``): the emulator's and the learner's speed on this machine, balanced and cached.
- :mod:`~pipeline.run.machine.load`: what other processes used of the cores while
  a measurement ran (``tune`` and the benchmark suite).

Uses :mod:`pipeline.transport` (the sizes of rings and weights), :mod:`pipeline.learning`
(the learner's speed) and ``envs``, and nothing else of the run layer: the trainer's
startup uses the checks, ``tune`` and the ``auto`` preset the measurements.
"""
