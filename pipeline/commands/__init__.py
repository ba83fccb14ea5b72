"""The user commands besides training: ``eval``, ``play``, ``export``, ``plot`` and ``tune``.

- :mod:`~pipeline.commands.evaluate`: ``python main.py eval`` (figures of a checkpoint).
- :mod:`~pipeline.commands.play`: ``python main.py play`` (a video of a checkpoint).
- :mod:`~pipeline.commands.export`: ``python main.py export`` (a checkpoint's acting
  network as a small file, the shipped one by default).
- :mod:`~pipeline.commands.plots`: ``python main.py plot`` (PNG figures of a run).
- :mod:`~pipeline.commands.tune`: ``python main.py tune`` (measure the machine for ``auto``).

Each exports ``<name>_command(...) -> exit code``; they use every lower layer.
"""
