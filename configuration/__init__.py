"""How ``config.py``'s settings become a run's: resolution, validation and the removed options.

``config.py`` at the top holds what a user edits (the knobs, the ``Config`` dataclass, the
presets); this package holds the rules applied to it:

- :mod:`~configuration.resolution`: the merge (command line > knobs > preset > defaults),
  the ``auto`` preset and the hardware it detects, and where each value came from;
- :mod:`~configuration.validation`: every invalid value reported at once (field, value,
  rule, fix), and the values the choice fields accept;
- :mod:`~configuration.removed`: the options removed after a tag, what the code now always
  does, and the one-line refusal of a checkpoint trained with one of them.

``validation`` and ``removed`` never import ``config`` (``config`` imports them); only
``resolution`` reads it, at call time. Importing this package imports none of them.
"""
