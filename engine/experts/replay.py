"""``shardscope replay``: a routing trace through each expert-cache policy and size, offline.

The same ExpertCache decisions as a live run, in the same order (the prompt pass's
union first, then ``hot`` pins what the prompt picked most, then one access per decoded
token and layer), so a replay of a run's own trace gives that run's hit rate. Hit rates
count decoded tokens only, like the run's. ``optimal`` replays the same accesses through
Belady's MIN (optimal_cache): the limit the online policies are measured against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_cache import POLICIES, ExpertCache, hot_reserve_bytes
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.optimal_cache import belady_hits
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceRecord

OPTIMAL = "optimal"  # Belady's MIN (optimal_cache): the limit, not a policy a run can use
REPLAY_POLICIES = tuple(POLICIES) + (OPTIMAL,)
HOT_ORACLE = "hot (oracle)"  # hot pinned by the whole trace when no prompt pass was recorded


@dataclass(frozen=True)
class ReplayRow:
    policy: str
    cache_mb: float
    expert_hit_rate: float  # 0..1 over decoded tokens' expert accesses
    hits: int
    misses: int
    expert_mb_per_token: float  # bytes of missed experts per decoded token
    n_tokens: int
    # of expert_mb_per_token, the misses in hash-routed layers (the header's hash_layers): known from the
    # token, so a live run loads them before their layer (engine/experts/hash_prefetch.py); read all the same
    hash_mb_per_token: float = 0.0


def min_cache_bytes(trace: RoutingTrace) -> int:
    """The largest decoded access: a cache smaller than that cannot hold one layer's picks.
    (A prompt union larger than the cache is trimmed to what fits: ``fitted_prompt``.)"""
    sizes = trace.header.unit_bytes
    decoded = [r for r in trace.records if not r.prompt] or list(trace.records)
    return max(len(r.experts) * sizes[r.layer] for r in decoded)


def fitted_prompt(record: TraceRecord, cache_bytes: int, unit_bytes: int) -> TraceRecord:
    """A prompt pass's union for one layer, cut to the most-picked experts that fit the cache.

    The live run's cache always holds a whole layer's bank (expert_streaming.min_cache_bytes),
    so there the union always fits; a foreign trace replayed at a smaller cache (gpt-oss at
    one token's picks: 77 experts of 12.6 MB in a 908 MiB cache) keeps what the prompt
    picked most, ties in router order, and streams the rest through.
    """
    room = cache_bytes // unit_bytes
    if len(record.experts) <= room:
        return record
    order = sorted(range(len(record.experts)), key=lambda i: -record.counts[i])[:room]
    order.sort()
    return replace(record, experts=tuple(record.experts[i] for i in order),
                   counts=tuple(record.counts[i] for i in order))


def run_order(trace: RoutingTrace, cache_bytes: int) -> list[TraceRecord]:
    """The accesses a replay makes, in order: the trace's, prompt unions fitted to the cache."""
    sizes = trace.header.unit_bytes
    return [fitted_prompt(r, cache_bytes, sizes[r.layer]) if r.prompt else r for r in trace.records]


def decoded_accesses(cache: ExpertCache, records, unit_bytes, k: int, picks=lambda record: record.experts):
    """``records`` through ``cache`` as the live run meets them: each prompt pass's union with its
    counts, then (hot) the pins re-chosen from those counts at the first decoded access after it.
    Yields (record, the cache's answer) for each decoded access, its experts ``picks(record)``."""
    has_prompt = any(r.prompt for r in records)
    in_prompt = True
    for r in records:
        if r.prompt:  # a run of several rounds has a prompt pass before each, like the live run
            cache.access(r.layer, r.experts, dict(zip(r.experts, r.counts)))
            in_prompt = True
            continue
        if in_prompt and has_prompt:
            cache.set_hot(dict(cache.counts), hot_reserve_bytes(unit_bytes, k))
        in_prompt = False
        yield r, cache.access(r.layer, picks(r))


def replay_one(trace: RoutingTrace, policy: str, cache_bytes: int, cache_mb: float | None = None) -> ReplayRow:
    header = trace.header
    mb = cache_bytes / MIB if cache_mb is None else cache_mb
    records = run_order(trace, cache_bytes)
    tokens = {r.token for r in records if not r.prompt}
    n = max(len(tokens), 1)
    if policy == OPTIMAL:
        hits, misses, missed_bytes = belady_hits([(r.layer, r.experts) for r in records],
                                                 [not r.prompt for r in records], cache_bytes, header.unit_bytes)
        return ReplayRow(policy, mb, hits / (hits + misses) if hits + misses else float("nan"),
                         hits, misses, missed_bytes / MIB / n, len(tokens),
                         float("nan") if header.hash_layers else 0.0)  # Belady's totals are not split by layer
    cache = ExpertCache(policy, cache_bytes, header.unit_bytes, header.n_expert_used)
    has_prompt = any(r.prompt for r in records)
    label = policy
    if not has_prompt and policy == "hot":  # no prompt pass recorded: pinned by the whole trace
        label = HOT_ORACLE                 # it knows the future, so it is labelled an oracle
        counts: dict = {}
        for r in records:
            for e in r.experts:
                counts[(r.layer, e)] = counts.get((r.layer, e), 0) + 1
        cache.set_hot(counts, hot_reserve_bytes(header.unit_bytes, header.n_expert_used))
    hits = misses = missed_bytes = hash_bytes = 0
    hashed = set(header.hash_layers)
    for r, got in decoded_accesses(cache, records, header.unit_bytes, header.n_expert_used):
        hits += len(got.hits)
        misses += len(got.misses)
        missed_bytes += len(got.misses) * header.unit_bytes[r.layer]
        if r.layer in hashed:
            hash_bytes += len(got.misses) * header.unit_bytes[r.layer]
    return ReplayRow(label, mb, hits / (hits + misses) if hits + misses else float("nan"),
                     hits, misses, missed_bytes / MIB / n, len(tokens), hash_bytes / MIB / n)


def replay(trace: RoutingTrace, cache_mb: list[float], policies: list[str], where: str = "trace") -> list[ReplayRow]:
    """One row per (policy, cache size); sizes below one access's bytes, or too large to count
    in bytes, and an empty policy list are refused."""
    if not policies:
        raise ShardscopeError(f"--policy: give at least one policy ({', '.join(REPLAY_POLICIES)})")
    for policy in policies:
        if policy not in REPLAY_POLICIES:
            raise ShardscopeError(f"--policy: '{policy}' is not one of {', '.join(REPLAY_POLICIES)}")
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
        trace, where = load_trace(records_or_path), str(records_or_path)
    if not trace.records:
        raise ShardscopeError(f"{where}: no routing records yet")
    curve: dict[str, list[tuple[float, float]]] = {}
    for row in replay(trace, list(sizes_mb), list(policies), where=where):
        curve.setdefault(row.policy, []).append((row.cache_mb, row.expert_hit_rate))
    return curve


def format_rows(rows: list[ReplayRow], model: str, hash_layers: tuple[int, ...] = ()) -> str:
    """A llama-bench-style markdown table: one row per replayed (policy, cache size); with hash-routed
    layers (the trace header's), a column of the misses there, which a run loads ahead of the layer."""
    head = ["model", "policy", "cache_mb", "hit_rate", "expert_mb/token", "tokens"]
    if hash_layers:
        head.insert(5, "of it known ahead (hash layers)")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("-" * (len(h) + 2) for h in head) + "|"]
    for r in rows:
        cells = [model, r.policy, f"{r.cache_mb:g}", f"{100 * r.expert_hit_rate:.1f} %",
                 f"{r.expert_mb_per_token:.3g}", str(r.n_tokens)]
        if hash_layers:
            cells.insert(5, "n/a" if r.hash_mb_per_token != r.hash_mb_per_token else f"{r.hash_mb_per_token:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["ReplayRow", "OPTIMAL", "REPLAY_POLICIES", "HOT_ORACLE", "fitted_prompt", "run_order", "replay",
           "replay_one", "decoded_accesses", "cacheability", "format_rows", "min_cache_bytes"]
