"""Benchmarks, correctness sweeps, studies and screenshots, run from the repo root as modules
(``python -m bench.goals.overhead``); bench/README.md says which is which."""
