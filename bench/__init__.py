"""Runnable benchmarks (not timed tests). `python -m bench.run_all` runs them all."""
