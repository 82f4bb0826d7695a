"""The smallest memory budget a model runs under, and how a budget above it is split: one
definition that the run's refusal, ``size``/``plan``, the knob range and the window's slider
floor all read (``minimum_for``), for dense and MoE models alike.

    minimum = globals + the layer window + the step's expert picks

- globals: what never streams (embeddings, head, norms, routers, the pages around streamed
  ranges); for an MoE file whole pages, as mincore counts them.
- the layer window: the largest layer (its shards must all be resident while it computes) plus
  ``prefetch_depth`` shards in flight, capped at every streamed byte (then everything fits). For
  an MoE file the layers are its trunk (engine/layout/shard_plan.py plan_trunk: attention, shared
  experts, dense FFN layers, never the routed experts).
- the step's picks (MoE only): the ``k`` experts a router picks in one layer, twice over — the
  layer computing and the next layer's picks loading; speculation loads a further layer's
  guesses. An expert's slices may share a page with a neighbour, read with it: each expert is
  booked with those edge pages.

Above the minimum an MoE budget has room to give: to the trunk (pinned layers, read again every
token when they are not resident) or to the expert cache (an expert kept is read again only when
picked again). engine/experts/budget_split.py's ``split_budget`` gives the trunk ``trunk_share`` % of that room (the
knob; 0 = the engine's choice, ``default_trunk_share``), the rest to the cache. A trunk given all its bytes is
resident and does not stream: the run is the expert run of old.

The prompt does not set the minimum: it is decoded in micro-batches of ``prompt_batch_tokens``
tokens, whose union of picks in any layer (at most tokens x k experts) always fits the cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB

if TYPE_CHECKING:  # only the type: sizing from numbers imports this module without the gguf package
    from shardscope.engine.layout.moe_layout import MoeLayout
    from shardscope.engine.layout.shard_plan import ShardPlan

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
    return memory_calls.merge_ranges(memory_calls.page_outward(start, end) for start, end in moe.dense_ranges)


def pages_without(pages: list[tuple[int, int]], streamed) -> list[tuple[int, int]]:
    """``pages`` less the (page-aligned, disjoint) ``streamed`` ranges: the dense pages that stay
    resident when the trunk's shards stream."""
    out: list[tuple[int, int]] = []
    cuts = sorted(streamed)
    for lo, hi in pages:
        position = lo
        for start, end in cuts:
            if end <= position or start >= hi:
                continue
            if start > position:
                out.append((position, start))
            position = max(position, end)
        if position < hi:
            out.append((position, hi))
    return out


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
    """Dense pages + the cache one decoding step needs: the smallest budget that keeps the whole
    trunk resident (below it the trunk streams too: ``moe_minimum``)."""
    return resident_dense_bytes(moe) + min_expert_cache_bytes(moe, speculation)


# ----------------------------------------------------------------- the one minimum
def layer_window_bytes(plan: ShardPlan, depth: int) -> int:
    """The largest layer's shards + ``depth`` shards prefetched, capped at every streamed byte."""
    if not plan.shards:
        return 0
    biggest = max(plan.layer_bytes(i) for i in range(len(plan.layers)))
    return min(biggest + depth * plan.max_shard_bytes, plan.streamable_bytes)


@dataclass(frozen=True)
class Minimum:
    """globals + the layer window + the step's picks: the smallest budget a run accepts."""

    globals_bytes: int
    window_bytes: int
    picks_bytes: int  # 0 for a dense model
    depth: int
    n_picks: int = 0  # experts one router picks (k); 0 for a dense model
    speculation: bool = False
    layers: str = "layer"  # "layer" (dense) or "trunk layer" (MoE)

    @property
    def bytes(self) -> int:
        return self.globals_bytes + self.window_bytes + self.picks_bytes

    @property
    def mb(self) -> int:
        """Whole MiB, rounded up: a budget of this many MiB is accepted, one less is refused."""
        return whole_mb(self.bytes)

    def parts(self) -> str:
        """"globals 12.0 MiB + trunk window 8.0 MiB (...) + picks 3.0 MiB (...)": what it is made of."""
        text = f"globals {self.globals_bytes / MIB:.1f} MiB"
        if self.window_bytes:  # none: nothing streams by layer (a trunk kept whole, a model without shards)
            text += (f" + {self.layers} window {self.window_bytes / MIB:.1f} MiB (largest {self.layers} + "
                     f"{self.depth} prefetched shard{'s' if self.depth != 1 else ''})")
        if self.picks_bytes:
            n_layers = STEP_LAYERS + (SPECULATION_LAYERS if self.speculation else 0)
            text += (f" + picks {self.picks_bytes / MIB:.1f} MiB ({n_layers} layers' picks of {self.n_picks} "
                     f"expert{'s' if self.n_picks != 1 else ''}{', speculation on' if self.speculation else ''})")
        return text


def dense_minimum(plan: ShardPlan, depth: int) -> Minimum:
    """A layer-streamed run's minimum: globals + the largest layer + ``depth`` prefetched shards."""
    return Minimum(plan.globals_bytes, layer_window_bytes(plan, depth), 0, depth)


def moe_minimum(moe: MoeLayout, trunk: ShardPlan | None, depth: int, speculation: bool) -> Minimum:
    """An expert-streamed run's minimum: globals (the dense pages no trunk shard holds) + the trunk
    window + the step's picks. ``trunk`` None (GPU layers): the whole trunk stays resident."""
    streamed = trunk.streamable_bytes if trunk is not None else 0
    window = layer_window_bytes(trunk, depth) if trunk is not None else 0
    return Minimum(resident_dense_bytes(moe) - streamed, window, min_expert_cache_bytes(moe, speculation), depth,
                   moe.n_expert_used, speculation, "trunk layer")


def minimum_for(settings) -> Minimum:
    """The minimum budget of ``settings``' model and knobs (shard size, prefetch depth, speculation,
    GPU layers): what the run refuses below, what ``size --model`` prints, the budget slider's floor."""
    from shardscope.engine.base.bundled_model import resolve_model_path
    from shardscope.engine.layout.layout_cache import load_layout

    return minimum_of_layout(load_layout(resolve_model_path(settings.model_path)), settings)


def minimum_of_layout(layout, settings) -> Minimum:
    from shardscope.engine.layout.moe_layout import read_moe_layout
    from shardscope.engine.layout.shard_plan import plan_shards

    moe = read_moe_layout(layout)
    if moe is None:
        return dense_minimum(plan_shards(layout, settings.shard_mb, gpu_layers=settings.n_gpu_layers),
                             settings.prefetch_depth)
    return moe_minimum(moe, trunk_plan_for(layout, moe, settings), settings.prefetch_depth,
                       settings.expert_speculation)


def trunk_plan_for(layout, moe: MoeLayout, settings) -> ShardPlan | None:
    """The trunk's shard plan an expert run streams (None with GPU layers: their trunk is on the GPU)."""
    from shardscope.engine.layout.shard_plan import plan_trunk

    return None if settings.n_gpu_layers else plan_trunk(layout, moe, settings.shard_mb,
                                                         keep_routers=settings.expert_speculation)


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
