"""The collectors: what runs in a collector process, and the supervisor that starts them.

- :mod:`~pipeline.run.collector.collector_main`: the collector process itself (its entry point,
  :func:`~pipeline.run.collector.collector_main.collector_main`): its emulators, a CPU copy of
  the Q-network acting epsilon-greedy, every step written into its ring slots.
- :mod:`~pipeline.run.collector.env_stream`: one environment of a collector, the ring
  slot it writes to, and its episode's state.
- :mod:`~pipeline.run.collector.frontier_starts`: an episode that begins on the furthest
  trajectory so far, reached by replaying its recorded actions.
- :mod:`~pipeline.run.collector.stage_frontiers`: the furthest trajectory and its starter
  per stage (one for a fixed stage, one per stage drawn for random stages).
- :mod:`~pipeline.run.collector.supervisor`: starts the collector processes, watches
  their heartbeats, restarts them and stops them.

``process``, ``env_stream``, ``frontier_starts`` and ``stage_frontiers`` run in each collector process; the
supervisor runs in the process that owns the rings: the learner process, or a node
agent of the Ray backend (:mod:`pipeline.cluster.node_agent`). Uses
:mod:`pipeline.transport` and :mod:`pipeline.learning`, and nothing else of the run layer.
"""
