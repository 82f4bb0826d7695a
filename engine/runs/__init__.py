"""Runs: open_run (picks the run kind for a model and budget), one headless bench run with
its outputs (bench_command) and the --verify cross-checks against independent sources
(verify, and verify_experts for expert runs).
"""

__all__ = ['run_factory', 'verify', 'verify_experts', 'bench_command']
