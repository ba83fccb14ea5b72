"""Collectors on a Ray cluster: one node agent per node, records pulled by the learner.

- :mod:`~pipeline.cluster.ray_setup`: whether Ray is installed, joining or starting a
  cluster, finding the nodes that offer collector capacity, the agents' actor options.
- :mod:`~pipeline.cluster.node_agent`: the node agent, a Ray actor that owns its node's
  ring and weights blocks, runs the node's collectors as the local backend does, and
  drains its rings only when the learner asks (a pull); :mod:`~pipeline.cluster.reaper`, the
  process outside Ray's tree that unlinks an agent's segments when Ray kills the agent.
- :mod:`~pipeline.cluster.batches`: what a pull carries (one contiguous uint8 array, the
  per-ring sequence ranges, the slot headers) and the learner's exactly-once ledger.
- :mod:`~pipeline.cluster.node_link`: the learner's side of one node: pulls in flight
  (credits), weights transfers, status, failures and incarnations.
- :mod:`~pipeline.cluster.ray_backend`: the :class:`~pipeline.run.trainer.collection.CollectionBackend`
  the trainer runs with ``--backend ray``: every node together, paced by one budget;
  :mod:`~pipeline.cluster.supervision` its half that places, watches and replaces agents.

Uses :mod:`pipeline.run` (the collector, the supervisor), :mod:`pipeline.transport` and,
lazily, ``ray``; nothing below this layer imports it.
"""
