"""The throughput monitor: where every second of a run goes, on screen, in CSV and TensorBoard.

- :mod:`~pipeline.run.monitor.monitor`: :class:`Snapshot` (a tick's raw counters and
  gauges), the rates over trailing windows, and :class:`Monitor`, which derives each row
  and writes it (``metrics.csv``, TensorBoard, the log line or the live table).
- :mod:`~pipeline.run.monitor.keys`: the typed keys of a snapshot that more than one
  module names (counters, phases, node gauges).
- :mod:`~pipeline.run.monitor.view`: the log line and the live table of a derived row.
- :mod:`~pipeline.run.monitor.procstats`: CPU and memory of a process (psutil, cached per
  pid), for the rows of the learner, the evaluator and each collector.

All of it runs in the learner process, and a node agent of the Ray backend measures its
own collectors with ``procstats``. It reads snapshots and knows nothing of the processes
behind them: the trainer builds them (:mod:`pipeline.run.trainer.snapshots`). Uses
:mod:`pipeline.transport` (the collector phases) and :mod:`pipeline.common`.
"""
