"""The training pipeline, one sub-package per layer; imports point down only.

================  ==========================================================================
``common``        errors and file helpers every layer may use (no torch, no config)
``transport``     the shared-memory protocols: records, ring, episodes, weights, segments
``learning``      replay, learner, checkpoints, and the policy/recording helpers
``run``           the processes of a training run and the event loop that drives them
``cluster``       the Ray backend: node agents on a cluster's nodes, pulled by the learner
``commands``      the user commands besides training: eval, play, export, plot, tune
``bench``         the benchmark suite (``python main.py bench``)
================  ==========================================================================

A module may import from its own package and from any package listed above it;
``tests/test_layers.py`` fails on an import that points up or sideways.
"""
