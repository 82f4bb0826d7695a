"""What llama.cpp itself says its context holds besides the weights: KV cache, recurrent state, buffers.

The RSS a run shows beyond its resident weights is llama.cpp's context (and Python's). llama.cpp logs
the buffers it allocates when it creates a context, one line each, e.g. (llama-cpp-python 0.3.36):

    llama_kv_cache:        CPU KV buffer size =     0.12 MiB
    llama_memory_recurrent:        CPU RS buffer size =     0.53 MiB       KDA / gated delta-net state
    llama_dsv4_comp_state:        CPU DSV4 csa state buffer size =     0.02 MiB   DeepSeek V4's compressors
    sched_reserve:        CPU compute buffer size =     3.56 MiB
    llama_context:        CPU  output buffer size =     0.00 MiB

``from_log`` sums them by kind from the lines logged while one context was created (LlamaSession marks
where that starts): the recurrent state of kimi-k3's KDA layers and qwen3next/qwen35moe's delta nets
(fixed, whatever the context length), deepseek4's compressed rows (its KV lines) and compressor states,
as llama.cpp booked them — not the engine's arithmetic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardscope.engine.base.units import MIB


@dataclass(frozen=True)
class LlamaMemory:
    kv_bytes: int = 0  # attention KV cache (deepseek4: its raw, compressed and indexer rows too)
    state_bytes: int = 0  # recurrent state (KDA, gated delta net) and deepseek4's compressor states
    compute_bytes: int = 0  # the scheduler's compute buffers
    output_bytes: int = 0  # logits / embeddings

    @property
    def total_bytes(self) -> int:
        return self.kv_bytes + self.state_bytes + self.compute_bytes + self.output_bytes


def from_log(text: str) -> LlamaMemory:
    sums = {"kv": 0.0, "state": 0.0, "compute": 0.0, "output": 0.0}
    for line in text.splitlines():
        m = re.search(r"^(\S+?):\s+\S+\s+(.*?)buffer size\s*=\s*([\d.]+)\s*MiB", line.strip())
        if not m:
            continue
        who, what, mib = m.group(1), m.group(2).strip(), float(m.group(3))
        if what.startswith("KV"):
            sums["kv"] += mib
        elif what.startswith("RS") or "state" in what or "recurrent" in who:
            sums["state"] += mib
        elif what.startswith("compute"):
            sums["compute"] += mib
        elif what.startswith("output"):
            sums["output"] += mib
    return LlamaMemory(*(int(round(sums[k] * MIB)) for k in ("kv", "state", "compute", "output")))


__all__ = ["LlamaMemory", "from_log"]
