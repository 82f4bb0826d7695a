"""What-if: the time to the first token of an expert-streamed prompt on a device.

The run decodes the prompt in micro-batches of m tokens so that a layer's union of a batch's
picks fits the expert cache X (engine/layout/budget_minimum.py): m = X ÷ P, P = one layer's k
picked experts' bytes (one pass when X holds a layer's whole bank). The layer computing may use
the whole cache, so every batch reads its own picks again:

    per batch and layer  U = the union of m tokens' picks: m x P when the experts are unknown
                         (numbers only: no two tokens share an expert, the upper bound), else
                         n_expert x (1 - (1 - k/n_expert)^m) experts (uniform routing)
    bytes read           = batches x layers x U,   batches = ceil(prompt tokens / m)
    TTFT                 = bytes read / SSD rate   (compute not modelled: a lower bound on time)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardscope.engine.devices.sizing import SizingResult


@dataclass(frozen=True)
class PromptProjection:
    n_prompt: int
    batch_tokens: int  # m (= n_prompt: one pass)
    n_batches: int
    read_bytes: float
    ttft_s: float


def project_prompt(result: SizingResult, n_prompt: int, n_expert: int | None = None,
                   n_expert_used: int | None = None) -> PromptProjection:
    """The prompt of ``n_prompt`` tokens under ``result``'s budget (an expert-streamed MoE plan)."""
    if not result.is_moe or result.fits_in_memory or result.layer_picks_bytes <= 0:
        raise ValueError("project_prompt: the plan is not an expert-streamed MoE")
    picks, n_layers = result.layer_picks_bytes, result.n_layers
    bank = picks * n_expert / n_expert_used if n_expert and n_expert_used else math.inf
    if result.expert_cache_bytes >= bank:
        m = n_prompt
    else:
        m = max(1, min(n_prompt, int(result.expert_cache_bytes // picks)))
    n_batches = math.ceil(n_prompt / m)
    sizes = [m] * (n_prompt // m) + ([n_prompt % m] if n_prompt % m else [])
    read = 0.0
    for size in sizes:
        if n_expert and n_expert_used:
            union = n_expert * (1 - (1 - n_expert_used / n_expert) ** size) * picks / n_expert_used
        else:
            union = size * picks
        read += n_layers * union
    return PromptProjection(n_prompt, m, n_batches, read, read / (result.ssd_mb_s * 1e6))


__all__ = ["PromptProjection", "project_prompt"]
