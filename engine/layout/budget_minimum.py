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
picked again). ``split_budget`` gives the trunk ``trunk_share`` % of that room (the knob; 0 = the
engine's choice, ``default_trunk_share``), the rest to the cache. A trunk given all its bytes is
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
    merged: list[list[int]] = []
    for start, end in sorted(moe.dense_ranges):
        lo, hi = memory_calls.page_outward(start, end)
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


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
    GPU layers): what the run refuses below, what ``size --gguf`` prints, the budget slider's floor."""
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


# ----------------------------------------------------------------- the split
TRUNK_GAIN = 1.0  # MiB re-read per token saved per MiB of trunk kept: every trunk byte is read every token


def expert_gain(moe: MoeLayout, pick_shares: list[float] | None = None) -> float:
    """MiB re-read per token saved by the first MiB of expert cache past the step's picks: the
    chance that the most-picked expert is picked again at the next token. Without routing,
    uniform (k of n); with ``pick_shares`` (each expert's picks per token, replayed or measured),
    the largest of them."""
    if pick_shares:
        return min(1.0, max(pick_shares))
    return moe.n_expert_used / moe.n_expert


def default_trunk_share(moe: MoeLayout, pick_shares: list[float] | None = None) -> int:
    """The split the engine chooses (percent of the room above the minimum to the trunk): the
    side whose MiB saves more re-reads per token gets the room first. A trunk byte not resident
    is read every token; an expert byte cached saves a read only when its expert is picked, at
    most once a token, so the trunk wins unless an expert is picked at every token (a tie: the
    trunk's reads are the larger, sequential ones) — docs/decisions.md measures it."""
    return 100 if TRUNK_GAIN >= expert_gain(moe, pick_shares) else 1


@dataclass(frozen=True)
class BudgetSplit:
    """Where one budget goes: globals, the trunk (window and pinned layers), the expert cache."""

    minimum: Minimum
    budget_bytes: int
    trunk_total: int  # every trunk byte a shard holds
    trunk_bytes: int  # what the trunk's shards may hold (its window included)
    cache_bytes: int  # the expert cache (the step's picks included)
    share: int  # percent of the room above the minimum given to the trunk
    chosen: bool  # True: the engine chose the share (trunk_share 0 = auto)

    @property
    def trunk_streams(self) -> bool:
        return self.trunk_bytes < self.trunk_total

    def text(self) -> str:
        how = "the engine's choice" if self.chosen else "given"
        return (f"trunk {self.trunk_bytes / MIB:.1f} of {self.trunk_total / MIB:.1f} MiB"
                f"{' (streams)' if self.trunk_streams else ' (resident)'} + expert cache "
                f"{self.cache_bytes / MIB:.1f} MiB + globals {self.minimum.globals_bytes / MIB:.1f} MiB; "
                f"trunk share {self.share} % of the room above the minimum ({how})")


def split_budget(moe: MoeLayout, trunk: ShardPlan | None, settings, pick_shares: list[float] | None = None,
                 auto_share: int | None = None) -> BudgetSplit:
    """The split of ``settings.budget_mb``, or a one-line refusal naming the knob that is too small
    or too large (KnobRefusal: the CLI names the flag, the window the slider)."""
    from pathlib import Path

    from shardscope.engine.knobs.knob_refusal import KnobRefusal

    name = Path(moe.path).name
    minimum = moe_minimum(moe, trunk, settings.prefetch_depth, settings.expert_speculation)
    budget = int(settings.budget_mb * MIB)
    if budget < minimum.bytes:
        raise KnobRefusal(f"budget {settings.budget_mb:g} MiB is below the minimum for {name}; the minimum is "
                          f"{minimum.mb} MiB ({minimum.parts()})", "budget_mb", minimum.mb)
    trunk_total = trunk.streamable_bytes if trunk is not None else 0
    room = budget - minimum.bytes
    given_cache = int(settings.expert_cache_mb * MIB)
    share = settings.trunk_share or auto_share or default_trunk_share(moe, pick_shares)
    if given_cache:
        if settings.trunk_share:
            raise KnobRefusal(f"is given with --trunk-share {settings.trunk_share}; the two split one budget, give "
                              f"one of them", "expert_cache_mb", 0, "at most", given=settings.expert_cache_mb)
        if given_cache < minimum.picks_bytes:
            raise KnobRefusal(f"below the minimum expert cache of {name}, {whole_mb(minimum.picks_bytes)} MiB "
                              f"({minimum.parts()})", "expert_cache_mb", whole_mb(minimum.picks_bytes),
                              given=settings.expert_cache_mb)
        most = budget - minimum.globals_bytes - minimum.window_bytes
        if given_cache > most:
            raise KnobRefusal(f"exceeds what the budget of {settings.budget_mb:g} MiB leaves {name}'s experts "
                              f"({minimum.parts()})", "expert_cache_mb", max(0, most // MIB), "at most",
                              given=settings.expert_cache_mb)
        trunk_bytes = min(trunk_total, budget - minimum.globals_bytes - given_cache)
        share = round(100 * (trunk_bytes - minimum.window_bytes) / room) if room else 100
        return BudgetSplit(minimum, budget, trunk_total, trunk_bytes, given_cache, share, False)
    extra = min(trunk_total - minimum.window_bytes, room * share // 100)
    trunk_bytes = minimum.window_bytes + extra
    cache = budget - minimum.globals_bytes - trunk_bytes
    return BudgetSplit(minimum, budget, trunk_total, trunk_bytes, cache, share, not settings.trunk_share)


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


CANDIDATE_SHARES = (100, 75, 50, 25, 1)  # what auto weighs, the trunk first (it wins a tie)


def trunk_read_bytes(split: BudgetSplit) -> int:
    """Trunk bytes read again per token under ``split``: all but its pinned layers (what it holds
    beyond its window), none when it holds every byte."""
    if not split.trunk_streams:
        return 0
    return split.trunk_total - max(0, split.trunk_bytes - split.minimum.window_bytes)


def choose_trunk_share(moe: MoeLayout, trunk: ShardPlan, settings, expert_mib_at, trunk_s_per_mib: float,
                       expert_s_per_mib: float) -> int:
    """The share (of CANDIDATE_SHARES) whose split costs a token the least time re-reading weights:
    trunk MiB re-read x what a trunk MiB cost the decode, plus the expert MiB missed at that split's
    cache (``expert_mib_at(cache_bytes)``: a replay of the run's own routing) x what an expert MiB
    cost it. Both costs are the run's measured waits per MiB read, so a side read in small requests
    (a latent MoE's experts of tens of kB) weighs what it really costs, not only its bytes."""
    best: tuple[float, int] | None = None
    for share in CANDIDATE_SHARES:
        split = split_budget(moe, trunk, settings.with_changes(trunk_share=share, expert_cache_mb=0))
        cost = trunk_read_bytes(split) / MIB * trunk_s_per_mib + expert_mib_at(split.cache_bytes) * expert_s_per_mib
        if best is None or cost < best[0] * (1 - 1e-9):
            best = (cost, share)
    return best[1]


__all__ = ["CANDIDATE_SHARES", "trunk_read_bytes", "choose_trunk_share", "Minimum", "BudgetSplit", "minimum_for", "minimum_of_layout", "dense_minimum", "moe_minimum",
           "layer_window_bytes", "split_budget", "pages_without", "default_trunk_share", "expert_gain", "trunk_plan_for", "edge_bytes", "dense_pages", "resident_dense_bytes", "booked_unit_bytes", "min_cache_for",
           "min_expert_cache_bytes", "min_budget_bytes", "min_budget_mb", "whole_mb", "expert_cache_bytes",
           "prompt_batch_tokens", "STEP_LAYERS", "SPECULATION_LAYERS"]
