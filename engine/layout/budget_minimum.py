"""The smallest memory budget an expert-streamed (MoE) model runs under, and what a budget leaves
for the expert cache: one definition that the run's refusal, ``size``/``plan``, the knob range
and the window's slider floor all read.

Expert streaming keeps every dense byte resident (attention, norms, routers, shared experts,
embeddings: whole pages, as mincore counts them) and streams routed experts through a cache.
What one decoding step needs of that cache at a time is the ``k`` experts its router picks in
one layer, twice over: the layer computing and the next layer's picks loading. Speculation
loads a further layer's guesses while that happens. An expert's slices may share a page with a
neighbour, read with it: each expert is booked with those edge pages.

    minimum budget   = dense pages + (2 [+ 1 with speculation]) x k x largest booked expert
    expert cache     = --expert-cache-mb if given, else budget - dense pages

The prompt no longer sets the minimum: it is decoded in micro-batches of
``prompt_batch_tokens`` tokens, whose union of picks in any layer (at most tokens x k experts)
always fits the cache, so the prompt runs under any budget decoding runs under.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB

if TYPE_CHECKING:  # only the type: sizing from numbers imports this module without the gguf package
    from shardscope.engine.layout.moe_layout import MoeLayout

STEP_LAYERS = 2  # one decoding step holds two layers' picks: the layer computing, the next loading
SPECULATION_LAYERS = 1  # speculation loads one more layer's guessed picks


def edge_bytes(moe: MoeLayout, layer: int) -> int:
    """The most bytes one of the layer's experts reads beyond its slices: the pages they share
    with neighbours (0 where slices are page-aligned, as synth writes them)."""
    def extra(expert: int) -> int:
        return sum(hi - lo - (end - start) for start, end in moe.unit_ranges(layer, expert)
                   for lo, hi in [memory_calls.page_outward(start, end)])
    # expert e's slices start at offset + e x size: their place within a page repeats every
    # PAGE / gcd(size, PAGE) experts, so that many cover every case (one, where slices are aligned)
    period = 1
    for _, per in moe.expert_tensors[layer]:
        period = math.lcm(period, memory_calls.PAGE // math.gcd(per, memory_calls.PAGE))
    return max(extra(expert) for expert in range(min(moe.n_expert, period)))


def dense_pages(moe: MoeLayout) -> list[tuple[int, int]]:
    """The dense ranges widened to whole pages and merged: what stays resident for the whole run."""
    merged: list[list[int]] = []
    for start, end in sorted(moe.dense_ranges):
        lo, hi = memory_calls.page_outward(start, end)
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


def resident_dense_bytes(moe: MoeLayout) -> int:
    """Dense bytes as they sit in RAM (whole pages): what the budget must hold before any expert."""
    return sum(hi - lo for lo, hi in dense_pages(moe))


def booked_unit_bytes(moe: MoeLayout) -> int:
    """The largest (layer, expert) as the cache books it: its slices plus its edge pages."""
    return max(moe.unit_bytes(layer) + edge_bytes(moe, layer) for layer in moe.layers)


def min_cache_for(layer_picks_bytes: float, speculation: bool) -> float:
    """The expert cache one decoding step needs, given the bytes of one layer's k picks."""
    return (STEP_LAYERS + (SPECULATION_LAYERS if speculation else 0)) * layer_picks_bytes


def min_expert_cache_bytes(moe: MoeLayout, speculation: bool) -> int:
    return int(min_cache_for(moe.n_expert_used * booked_unit_bytes(moe), speculation))


def min_budget_bytes(moe: MoeLayout, speculation: bool) -> int:
    """Dense pages + the cache one decoding step needs: the smallest budget the run accepts."""
    return resident_dense_bytes(moe) + min_expert_cache_bytes(moe, speculation)


def whole_mb(n_bytes: float) -> int:
    """A minimum in whole MiB, rounded up: a budget of that many MiB is accepted."""
    return math.ceil(n_bytes / MIB - 1e-9)


def min_budget_mb(moe: MoeLayout, speculation: bool) -> int:
    return whole_mb(min_budget_bytes(moe, speculation))


def expert_cache_bytes(moe: MoeLayout, budget_mb: float, expert_cache_mb: float = 0) -> int:
    """The expert cache of a budget: the given size, else all the budget leaves after dense pages."""
    if expert_cache_mb:
        return int(expert_cache_mb * MIB)
    return int(budget_mb * MIB) - resident_dense_bytes(moe)


def prompt_batch_tokens(moe: MoeLayout, cache_bytes: int) -> int:
    """Prompt tokens per llama_decode so that any layer's union of picks fits the cache; 0 when
    the cache holds a whole layer's bank (then the prompt goes in one pass).

    A batch of m tokens picks at most m x k experts in a layer, so m = cache // (k x unit) is
    safe whatever the routing; the layer computing may take the whole cache (other layers'
    experts leave), so each picked expert is read once per batch that picks it.
    """
    unit = booked_unit_bytes(moe)
    if cache_bytes >= moe.n_expert * unit:
        return 0
    return max(1, cache_bytes // (moe.n_expert_used * unit))


__all__ = ["edge_bytes", "dense_pages", "resident_dense_bytes", "booked_unit_bytes", "min_cache_for",
           "min_expert_cache_bytes", "min_budget_bytes", "min_budget_mb", "whole_mb", "expert_cache_bytes",
           "prompt_batch_tokens", "STEP_LAYERS", "SPECULATION_LAYERS"]
