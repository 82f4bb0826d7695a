"""Measure: what the kernel and llama.cpp say about a run -- every figure declared once
(metric_registry), the 10 Hz sampler (metrics),
token clock (token_rate), mincore residency reads (residency_reader) and another
process's view of ours (outside_watch).
"""

__all__ = ['metric_registry', 'metrics', 'token_rate', 'outside_watch', 'residency_reader']
