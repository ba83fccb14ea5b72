"""The learning core: what turns records into a trained Q-network, and plays it back.

- :mod:`~pipeline.learning.replay`: the replay memory (frames stored once, stacks and
  n-step returns built by vectorized indexing).
- :mod:`~pipeline.learning.learner`: Double DQN updates, compile and AMP.
- :mod:`~pipeline.learning.checkpoint`: atomic, safely loaded, rotated checkpoints.
- :mod:`~pipeline.learning.policy`: the greedy policy of a checkpoint or of published
  weights and the episode loop that ``eval``, ``play`` and the evaluator share.
- :mod:`~pipeline.learning.recording`: colour video of an episode (MP4 or GIF).

Uses :mod:`pipeline.transport`; knows nothing about processes or the command line.
"""
