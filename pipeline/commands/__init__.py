"""The user commands besides training: ``eval``, ``play`` and ``plot``.

- :mod:`~pipeline.commands.evaluate`: ``python main.py eval`` (figures of a checkpoint).
- :mod:`~pipeline.commands.play`: ``python main.py play`` (a video of a checkpoint).
- :mod:`~pipeline.commands.plots`: ``python main.py plot`` (PNG figures of a run).

Each exports ``<name>_command(argv) -> exit code``; they use every lower layer.
"""
