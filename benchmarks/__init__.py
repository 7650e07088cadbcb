"""Benchmarks: each measures hvd-selector side by side with its peer in one run
and writes ratios to benchmarks/results/. Measurements, not tests.

Run them from the repository root as modules, ``python -m benchmarks.<name>``
(e.g. ``python -m benchmarks.bench_resolve --help``), so that ``selector_backend``,
``benchmarks`` and ``devtools`` import from the checkout. What they share with
the tests (variant builds, the NCCL plugin build) lives in ``devtools``; nothing
here imports from tests/.
"""
