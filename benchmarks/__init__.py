"""empo2 benchmark suite.

Each module is runnable as ``python -m benchmarks.<name>`` and exposes ``main(argv) -> dict``;
``python -m benchmarks.run_all`` (``make bench``) runs them all in their ``--quick`` sizes. Every
script measures the machine's fp32 matmul peak in the same run and reports throughputs also as a
fraction of it; results go to ``benchmarks/results/<name>.json``. See ``benchmarks/README.md``.
"""

BENCHMARKS = ("threads", "update", "shared_prefix", "generation", "retrieval", "env_steps", "iteration", "peak_rss")
"""Module names, in the order ``run_all`` runs them."""
