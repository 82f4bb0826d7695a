"""shardscope engine: GGUF layout, shard planning, residency, llama.cpp session, metrics.

Pure Python with no Qt import, so the CLI, the benches and the GUI share one engine.
"""
