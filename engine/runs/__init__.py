"""Runs: open_run (picks the run kind for a model and budget), one headless bench run with
its outputs (bench_command) and the --verify cross-checks against independent sources.
"""

__all__ = ['run_factory', 'verify', 'bench_command']
