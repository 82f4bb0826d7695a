"""Stream core: the llama.cpp session (llama_session), the layer-shard residency controller
(residency, its pure decisions in residency_decisions), the disk emulator (ssd_rate_limiter),
the model-file guard, the run skeleton both run kinds share (run_skeleton, its row in
run_summary) and the dense StreamingRun.
"""

__all__ = ['llama_session', 'residency', 'residency_decisions', 'file_guard', 'ssd_rate_limiter', 'run_skeleton',
           'run_summary', 'streaming_run', 'build_info']
