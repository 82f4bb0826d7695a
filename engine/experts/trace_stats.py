"""How a routing trace routes: the statistics that decide what any expert cache can do.

Computed per layer over the decoded tokens only (the prompt pass is a union, not a
token), then over the whole trace as the mean of the layers:

- lag-n reuse: the share of a token's picks in a layer that the token n back also
  picked there (lag 1: what LRU lives on; lag 8: how long the working set lasts);
- static top-k: the share of picks covered by that layer's k most-picked experts of the
  run (k = experts per token): what pinning a perfect hot list could reach;
- distinct: how many experts of the layer were picked at all;
- hottest-8 share: the share of the layer's picks taken by its 8 most-picked experts.

``random`` is what a uniform router gives for lag-n reuse (k / n_expert). A trace from
any source works: a RoutingTrace is all it takes (engine.experts.routing_trace).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.experts.routing_trace import RoutingTrace

HOTTEST = 8  # the "hottest-8 share" counts this many experts


@dataclass(frozen=True)
class LayerStats:
    layer: int
    tokens: int  # decoded tokens that routed in this layer
    lag1: float  # 0..1; nan with fewer than 2 tokens
    lag8: float  # 0..1; nan with fewer than 9 tokens
    static_topk: float
    distinct: int
    hottest8: float


@dataclass(frozen=True)
class TraceStats:
    n_expert: int
    n_expert_used: int
    tokens: int
    layers: tuple[LayerStats, ...]
    lag1: float  # the means over layers
    lag8: float
    static_topk: float
    distinct_mean: float
    distinct_min: int
    distinct_max: int
    hottest8: float
    hottest8_first_third: float  # mean over the first third of the layers (at least one layer)
    hottest8_last_third: float
    # layers routed by token id (the header's hash_layers), and the means over the other (scored) layers
    hash_layers: tuple[int, ...] = ()
    scored: "TraceStats | None" = None

    @property
    def random(self) -> float:
        return self.n_expert_used / self.n_expert


def _lag(seq: list[frozenset], n: int) -> float:
    picks = sum(len(s) for s in seq[n:])
    if not picks:
        return float("nan")
    return sum(len(seq[i] & seq[i - n]) for i in range(n, len(seq))) / picks


def layer_stats(layer: int, seq: list[frozenset], k: int) -> LayerStats:
    """``seq``: the layer's picks, one set per decoded token in token order."""
    counts = Counter(e for s in seq for e in s)
    total = sum(counts.values())
    ranked = [n for _, n in counts.most_common()]
    return LayerStats(layer, len(seq), _lag(seq, 1), _lag(seq, 8), sum(ranked[:k]) / total,
                      len(counts), sum(ranked[:HOTTEST]) / total)


def _mean(values) -> float:
    values = [v for v in values if v == v]
    return sum(values) / len(values) if values else float("nan")


def trace_stats(trace: RoutingTrace, where: str = "trace") -> TraceStats:
    """The statistics of ``trace``'s decoded tokens; a trace without any is refused."""
    by_layer: dict[int, dict[int, frozenset]] = {}
    for r in trace.records:
        if not r.prompt:
            by_layer.setdefault(r.layer, {})[r.token] = frozenset(r.experts)
    if not by_layer:
        raise ShardscopeError(f"{where}: no decoded tokens (only a prompt pass), so no routing statistics")
    k = trace.header.n_expert_used
    rows = tuple(layer_stats(layer, [picks[t] for t in sorted(picks)], k)
                 for layer, picks in sorted(by_layer.items()))
    hashed = tuple(layer for layer in trace.header.hash_layers if layer in by_layer)
    stats = _over(trace, by_layer, rows)
    scored_rows = tuple(r for r in rows if r.layer not in hashed)
    if not hashed or not scored_rows:
        return replace(stats, hash_layers=hashed)
    return replace(stats, hash_layers=hashed, scored=_over(trace, by_layer, scored_rows))


def _over(trace: RoutingTrace, by_layer: dict, rows: tuple) -> TraceStats:
    k = trace.header.n_expert_used
    third = max(1, len(rows) // 3)
    distinct = [r.distinct for r in rows]
    return TraceStats(
        trace.header.n_expert, k, len({t for picks in by_layer.values() for t in picks}), rows,
        _mean(r.lag1 for r in rows), _mean(r.lag8 for r in rows), _mean(r.static_topk for r in rows),
        sum(distinct) / len(distinct), min(distinct), max(distinct), _mean(r.hottest8 for r in rows),
        _mean(r.hottest8 for r in rows[:third]), _mean(r.hottest8 for r in rows[-third:]))


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.1f} %"


def format_stats(stats: TraceStats, name: str) -> str:
    """A markdown table, one row per layer and an ``all`` row (means; distinct as mean (min–max))."""
    head = ["layer", "tokens", "lag-1", "lag-8", "static top-k", "distinct", "hottest-8"]
    lines = [f"{name}: {plural(stats.tokens, 'decoded token')}, {stats.n_expert} experts, top-{stats.n_expert_used} "
             f"(random reuse {_pct(stats.random)})",
             "| " + " | ".join(head) + " |", "|" + "|".join("-" * (len(h) + 2) for h in head) + "|"]
    for r in stats.layers:
        cells = [f"{r.layer} (hash)" if r.layer in stats.hash_layers else str(r.layer), str(r.tokens), _pct(r.lag1),
                 _pct(r.lag8), _pct(r.static_topk),
                 f"{r.distinct} of {stats.n_expert}", _pct(r.hottest8)]
        lines.append("| " + " | ".join(cells) + " |")
    cells = ["all", str(stats.tokens), _pct(stats.lag1), _pct(stats.lag8), _pct(stats.static_topk),
             f"{stats.distinct_mean:.0f} ({stats.distinct_min}–{stats.distinct_max})", _pct(stats.hottest8)]
    lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"hottest-8 share: first third of layers {_pct(stats.hottest8_first_third)}, "
                 f"last third {_pct(stats.hottest8_last_third)}")
    if stats.hash_layers:
        named = ", ".join(str(x) for x in stats.hash_layers)
        lines.append(f"hash-routed layers {named}: picks fixed by the token id (ffn_gate_tid2eid), known before the "
                     f"layer runs, so a run loads them ahead exactly (engine/experts/hash_prefetch.py)")
        if stats.scored is not None:
            s = stats.scored
            lines.append(f"scored layers alone: lag-1 {_pct(s.lag1)}, lag-8 {_pct(s.lag8)}, static top-k "
                         f"{_pct(s.static_topk)}, hottest-8 {_pct(s.hottest8_first_third)} \u2192 "
                         f"{_pct(s.hottest8_last_third)} (first \u2192 last third)")
    return "\n".join(lines)


def summary_line(stats: TraceStats) -> str:
    """The overall figures in two short lines (the window's expert panel shows them)."""
    return (f"Routing, {stats.tokens} decoded tokens: lag-1 reuse {_pct(stats.lag1)}, lag-8 {_pct(stats.lag8)} "
            f"(random {_pct(stats.random)})\nstatic top-{stats.n_expert_used} {_pct(stats.static_topk)}, distinct "
            f"{stats.distinct_mean:.0f} of {stats.n_expert}, hottest-8 {_pct(stats.hottest8_first_third)} \u2192 "
            f"{_pct(stats.hottest8_last_third)} (first \u2192 last third of layers)")


__all__ = ["summary_line", "HOTTEST", "LayerStats", "TraceStats", "layer_stats", "trace_stats", "format_stats"]
