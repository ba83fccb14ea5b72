"""The benchmark suite, ``python main.py bench`` (see docs/benchmarks.md).

Exports :func:`bench_command`; uses every lower layer, and no user command.
"""
