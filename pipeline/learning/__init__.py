"""The learning core: what turns records into a trained Q-network, and plays it back.

- :mod:`~pipeline.learning.replay`: the uniform replay memory (frames stored once, stacks
  and n-step returns built by vectorized indexing by
  :mod:`~pipeline.learning.replay_transitions`; saved and restored by
  :mod:`~pipeline.learning.replay_store`).
- :mod:`~pipeline.learning.update`: the math of one update, top to bottom (targets,
  loss, step, the acting copy's average); :mod:`~pipeline.learning.learner` runs it on
  its networks, compiled and in mixed precision (:mod:`~pipeline.learning.learner_compile`);
  :mod:`~pipeline.learning.learner_choice` picks compile and precision for the machine by
  timing them (:mod:`~pipeline.learning.learner_speed`).
- :mod:`~pipeline.learning.flat_state`: a state_dict as one float32 vector and back
  (the torch side of the weights block).
- :mod:`~pipeline.learning.checkpoint`: atomic, safely loaded, rotated checkpoints.
- :mod:`~pipeline.learning.policy`: the greedy policy of a checkpoint, a mark or an export;
  :mod:`~pipeline.learning.episode_loop`: the episode loop that ``eval``, ``play`` and the
  evaluator play it with.
- :mod:`~pipeline.learning.recording`: colour video of an episode (MP4 or GIF).

Uses :mod:`pipeline.transport`; knows nothing about processes or the command line.
"""
