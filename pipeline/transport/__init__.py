"""The shared-memory transport between collectors and the learner (no torch, no config).

- :mod:`~pipeline.transport.records`: the fixed-size step record and its flags.
- :mod:`~pipeline.transport.ring`: single-producer single-consumer rings in one block,
  per-slot header counters (:class:`SlotCounters`); the lock-free protocol is written
  once, in this module's docstring.
- :mod:`~pipeline.transport.episodes`: msgpack episode summaries over a small ring.
- :mod:`~pipeline.transport.weights`: the double-buffered, versioned weights block.
- :mod:`~pipeline.transport.segments`: segment naming, creation, stale-segment removal.
"""
