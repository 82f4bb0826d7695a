"""Output: the benchmark CSV and llama-bench's output formats.
"""

__all__ = ['csv_out', 'llama_bench_format', 'llama_bench_output']
