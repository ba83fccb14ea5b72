"""``python main.py bench``: parse the flags, run the suite, print the table, write the JSON.

The entry point the package exports (:func:`pipeline.bench.bench_command`); the
measuring is :class:`~pipeline.bench.suite.Suite`'s, the output
:mod:`~pipeline.bench.report`'s.
"""

from __future__ import annotations

import json
import os
import time

from pipeline.bench.options import parse_options
from pipeline.bench.report import render_table, results_json
from pipeline.bench.suite import Suite
from pipeline.bench.suite_base import log


def _without_only_learning(argv: list[str]) -> list[str] | None:
    """``argv`` less its ``--only learning`` when it asks for the learning benchmark, else None."""
    for index, arg in enumerate(argv):
        if arg == "--":  # training flags follow
            break
        if arg == "--only=learning":
            return argv[:index] + argv[index + 1 :]
        if arg == "--only" and argv[index + 1 : index + 2] == ["learning"]:
            return argv[:index] + argv[index + 2 :]
    return None


def bench_command(argv: list[str]) -> int:
    """``python main.py bench [...]``: run the suite, print one table; 0, or 1 if a part failed.

    A part measured on a busy machine is no failure (its rows say BUSY), nor is one that
    found no steady window there (its row says so); one that found none on a quiet
    machine is.

    ``--only learning`` is the learning benchmark (:mod:`pipeline.bench.learning`): hours
    of training, not seconds of measuring, with flags of its own.
    """
    learning_argv = _without_only_learning(argv)
    if learning_argv is not None:
        from pipeline.bench.learning import learning_command

        return learning_command(learning_argv)
    options, resolved = parse_options(argv)
    cfg = resolved.config
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    started = time.monotonic()
    suite = Suite(options, resolved)
    interrupted = False
    try:
        results = suite.run()
    except KeyboardInterrupt:
        interrupted = True
        results = suite.results
        log("interrupted" + ("; the results so far:" if results else ""))
    elapsed = time.monotonic() - started
    header = (
        f"mario-dqn bench{' --quick' if options.quick else ''}: {cfg.env_id}, preset {resolved.preset}, "
        f"{cfg.num_processes} collectors, {options.seconds:g} s per part, {os.cpu_count()} cores "
        f"(load average {os.getloadavg()[0]:.1f}), {elapsed:.0f} s"
    )
    busy = [name for name, r in results.items() if r.busy]
    if busy:
        header += f"; measured beside other load: {', '.join(busy)}"
    if results:
        render_table(results, header)
    if busy:
        log(
            f"other processes kept the machine busy during {', '.join(busy)}: their figures are likely low "
            "(marked BUSY); measure again on a quiet machine to quote them"
        )
    if options.json_path is not None:
        payload = results_json(results, options, resolved, argv, elapsed)
        options.json_path.write_text(json.dumps(payload, indent=2) + "\n")
    if options.keep_runs is not None:
        log(f"run directories kept in {options.keep_runs}")
    if interrupted:
        return 130
    return 1 if any(r.error for r in results.values()) else 0
