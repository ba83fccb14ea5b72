"""The bottom layer: what every other layer may use, with no torch and no config.

- :mod:`~pipeline.common.errors`: :class:`UserError` (one line, non-zero exit) and
  :class:`OneLineParser` (argparse that reports a bad flag in one line).
- :mod:`~pipeline.common.files`: atomic writes (temp file, fsync, rename) and the
  output-path check every command that writes a file runs first.
- :mod:`~pipeline.common.gauges`: the names of the gauges that several layers name (the
  steadiness probe's and the evaluator's), for the monitor, the benchmark and ``plot``.
- :mod:`~pipeline.common.seeds`: the seed of each env stream and collector start.
"""
