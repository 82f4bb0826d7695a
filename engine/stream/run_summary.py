"""The row one run round produces: the CSV's columns, named after llama-bench's where they overlap.

Both run kinds fill it (engine/stream/run_skeleton.py computes every shared figure); an
expert run's row extends it with the expert columns (engine/experts/expert_run.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class RunSummary:
    """One CSV row: names follow llama-bench where they overlap."""

    model_filename: str
    model_size_mb: float
    n_layers: int
    n_shards: int
    n_threads: int
    n_gpu_layers: int  # effective: 0 when this llama.cpp build cannot offload
    n_gpu_layers_requested: int
    shard_mb: float
    prefetch_depth: int
    budget_mb: float
    policy: str
    emulated_ssd_mb_s: float
    n_prompt: int
    n_gen: int
    ttft_ms: float
    avg_ts: float
    stddev_ts: float
    peak_rss_mb: float
    resident_weights_mb: float  # peak of the model's bytes in RAM while generating (mincore)
    read_mb_per_token: float  # /proc/self/io read_bytes per decoded token
    streamed_mb_per_token: float  # what the controller loaded per decoded token
    ssd_mb_s: float  # 10^6 B/s: read_bytes over the wall time from the first token to the last
    # By bytes, decoded tokens only: of the weight bytes the tokens' layers (or picked
    # experts) needed, the share that was resident without a read for this use — the
    # figure that answers "how much came from memory" (≈ 1 − kernel read ÷ needed).
    cache_hit_rate: float
    on_time_rate: float  # by bytes: the share resident when compute arrived (the rest stalled it)
    cache_hits: int
    cache_misses: int
    stalls: int
    wait_ms_per_token: float  # decode time spent waiting for loads
    llama_eval_ms_per_token: float  # llama.cpp's own perf counter, cross-check
    globals_mb: float
    pinned_mb: float
    load_mechanism: str
    evict_mechanism: str
    stopped: bool = False
    io_path: str = ""  # mremap / portable / page cache (engine/stream/io_path.py)
    gpu_mb: float = 0.0  # peak GPU memory in use while generating (0 on a CPU build; issue #35)
    text: str = ""
    device: str = ""
    projected_ts: float = math.nan
    projected_bound: str = ""
    projected_serial_ts: float = math.nan  # compute + flash, nothing overlapped (engine/devices/projection.py)
    projected_overlapped_ts: float = math.nan  # max of the two: the best case
    # Not fields (no annotation), so no columns: each decoded token's wall time and, of it, the wait
    # for loads, set by the run (empty for a row read back from a CSV); the projection's per-token
    # compute is their median (engine/measure/token_stalls.py).
    token_s = ()
    token_wait_s = ()
    between_tokens_s = 0.0  # wall time from the first token to the last outside the tokens' decodes
    token_cpu_s = ()  # the decode thread's time on a CPU during each token (CLOCK_THREAD_CPUTIME_ID)
    compute_s_estimate = None  # the run's recent tokens' low quantile (engine/measure/compute_window.py)
    compute_tokens = 0  # the tokens it stands on

    @staticmethod
    def columns() -> list[str]:
        return [f for f in RunSummary.__dataclass_fields__ if f != "text"]

    def row(self) -> dict:
        return {k: getattr(self, k) for k in self.columns()}
