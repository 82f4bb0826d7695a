"""Benchmarks with goals: each prints its figure, the goal and the ratio between them."""
