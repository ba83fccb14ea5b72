"""The benchmark suite, ``python main.py bench`` (see docs/benchmarks.md).

Exports :func:`bench_command`; uses every lower layer, and no user command.
``python -m pipeline.bench`` runs the same command.

==========================  ============================================================
``command``                 the entry point: flags -> suite -> table and JSON
``options``                 the flags, the parts, the resolved configuration
``suite``                   :class:`~pipeline.bench.suite.Suite`: runs the parts in order
``suite_base``              what every part shares: results, env pool, part configs
``parts_collection``        raw, collector, pipeline, consolidator
``parts_training``          learner, training, startup, evaluator, soak
``parts_cluster``           ray: the Ray backend's extra hop, one pull path's records/s
``parts_consolidator``      the consolidator's throughput against flooding producers
``figures``                 every figure's label, format, meaning and target
``report``                  the table and the JSON
``envpool``                 env worker processes (the baselines)
``trainer_run``             a real Trainer in its own process, measured over a window
``soak``                    the soak part's arithmetic
``learning``                ``--only learning``: train seeds, evaluate the marks, report
``learning_curves``         the marks evaluated by the protocol (parallel, cached), plotted
``learning_figures``        a run's figures, mean and spread over seeds, variants compared
``learning_steadiness``     the steadiness figures of a run, at its marks
==========================  ============================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.bench.command import bench_command

__all__ = ["bench_command"]


def __getattr__(name: str) -> Any:
    # Lazy: importing a submodule (a child process imports pipeline.bench.envpool, say)
    # runs this file, and need not import the whole suite with it.
    if name == "bench_command":
        from pipeline.bench.command import bench_command

        return bench_command
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
