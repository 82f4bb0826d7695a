"""Stream core: the llama.cpp session (llama_session), the layer-shard residency controller
(residency, its pure decisions in residency_decisions), the disk emulator (ssd_rate_limiter),
the model-file guard, and the dense StreamingRun with its round loop.
"""

__all__ = ['llama_session', 'residency', 'residency_decisions', 'file_guard', 'ssd_rate_limiter', 'streaming_run', 'round_loop', 'build_info']
