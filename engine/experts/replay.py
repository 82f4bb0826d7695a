"""``shardscope replay``: a routing trace through each expert-cache policy and size, offline.

The same ExpertCache decisions as a live run, in the same order (the prompt pass's
union first, then ``hot`` pins what the prompt picked most, then one access per decoded
token and layer), so a replay of a run's own trace gives that run's hit rate. Hit rates
count decoded tokens only, like the run's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.experts.expert_cache import POLICIES, ExpertCache, hot_reserve_bytes
from shardscope.engine.experts.routing_trace import RoutingTrace, read_trace
from shardscope.engine.base.units import MIB


@dataclass(frozen=True)
class ReplayRow:
    policy: str
    cache_mb: float
    expert_hit_rate: float  # 0..1 over decoded tokens' expert accesses
    hits: int
    misses: int
    expert_mb_per_token: float  # bytes of missed experts per decoded token
    n_tokens: int


def min_cache_bytes(trace: RoutingTrace) -> int:
    """The largest single access: a cache smaller than that cannot hold one layer's picks."""
    sizes = trace.header.unit_bytes
    return max(len(r.experts) * sizes[r.layer] for r in trace.records)


def replay_one(trace: RoutingTrace, policy: str, cache_bytes: int, cache_mb: float | None = None) -> ReplayRow:
    header = trace.header
    cache = ExpertCache(policy, cache_bytes, header.unit_bytes)
    has_prompt = any(r.prompt for r in trace.records)
    if not has_prompt:  # no prompt pass recorded: pin by the whole trace (an oracle)
        counts: dict = {}
        for r in trace.records:
            for e in r.experts:
                counts[(r.layer, e)] = counts.get((r.layer, e), 0) + 1
        cache.set_hot(counts, hot_reserve_bytes(header.unit_bytes, header.n_expert_used))
    in_prompt = True
    hits = misses = missed_bytes = 0
    tokens = set()
    for r in trace.records:
        if r.prompt:  # a run of several rounds has a prompt pass before each, like the live run
            cache.access(r.layer, r.experts, dict(zip(r.experts, r.counts)))
            in_prompt = True
            continue
        if in_prompt and has_prompt:
            cache.set_hot(dict(cache.counts), hot_reserve_bytes(header.unit_bytes, header.n_expert_used))
        in_prompt = False
        got = cache.access(r.layer, r.experts)
        hits += len(got.hits)
        misses += len(got.misses)
        missed_bytes += len(got.misses) * header.unit_bytes[r.layer]
        tokens.add(r.token)
    n = max(len(tokens), 1)
    return ReplayRow(policy, cache_bytes / MIB if cache_mb is None else cache_mb, hits / (hits + misses) if hits + misses else float("nan"),
                     hits, misses, missed_bytes / MIB / n, len(tokens))


def replay(trace: RoutingTrace, cache_mb: list[float], policies: list[str], where: str = "trace") -> list[ReplayRow]:
    """One row per (policy, cache size); sizes below one access's bytes, or too large to count
    in bytes, and an empty policy list are refused."""
    if not policies:
        raise ShardscopeError("--policy: give at least one policy (lru, lfu, hot)")
    for policy in policies:
        if policy not in POLICIES:
            raise ShardscopeError(f"--policy: '{policy}' is not one of {', '.join(POLICIES)}")
    floor = min_cache_bytes(trace)
    for mb in cache_mb:
        if not math.isfinite(mb * MIB) or mb * MIB > 2 ** 62:
            raise ShardscopeError(f"--cache-mb {mb:g}: too large (at most {2 ** 62 / MIB:g} MB)")
        if mb * MIB < floor:
            raise ShardscopeError(f"--cache-mb {mb:g}: below the {floor / MIB:.1f} MB that one layer's picks "
                                  f"in {where} need")
    return [replay_one(trace, policy, int(mb * MIB), mb) for policy in policies for mb in cache_mb]


def cacheability(records_or_path, sizes_mb: list[float], policies: list[str]) -> dict[str, list[tuple[float, float]]]:
    """The cacheability curve: per policy, (cache MiB, expert hit rate 0..1) at each size.

    ``records_or_path`` is a RoutingTrace (ExpertRun.routing_records()) or a trace file;
    the numbers are replay()'s, i.e. what ``shardscope replay`` prints. Sizes below one
    layer's picks are refused like there.
    """
    if isinstance(records_or_path, RoutingTrace):
        trace, where = records_or_path, "the session's trace"
    else:
        trace, where = read_trace(records_or_path), str(records_or_path)
    if not trace.records:
        raise ShardscopeError(f"{where}: no routing records yet")
    curve: dict[str, list[tuple[float, float]]] = {p: [] for p in policies}
    for row in replay(trace, list(sizes_mb), list(policies), where=where):
        curve[row.policy].append((row.cache_mb, row.expert_hit_rate))
    return curve


def format_rows(rows: list[ReplayRow], model: str) -> str:
    """A llama-bench-style markdown table: one row per replayed (policy, cache size)."""
    head = ["model", "policy", "cache_mb", "hit_rate", "expert_mb/token", "tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("-" * (len(h) + 2) for h in head) + "|"]
    for r in rows:
        cells = [model, r.policy, f"{r.cache_mb:g}", f"{100 * r.expert_hit_rate:.1f} %",
                 f"{r.expert_mb_per_token:.3g}", str(r.n_tokens)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["ReplayRow", "replay", "replay_one", "cacheability", "format_rows", "min_cache_bytes"]
