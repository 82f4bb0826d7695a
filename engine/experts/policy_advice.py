"""Which expert policy to use, and how sure: a replay of a routing trace at the cache's size.

The advice names the trace it replayed (a file, or the run's own routing and its token count),
the cache size, both hit rates and the margin in points; a margin under ``TIE_POINTS`` is
reported as a tie, not a recommendation (two orders within a point on one trace of a hundred
tokens swap places on the next: docs/real-traces.md). Used by ``bench``'s note, the window's
advice line and ``replay``'s summary line.
"""

from __future__ import annotations

from typing import Mapping

from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_cache import AUTO, POLICIES
from shardscope.engine.experts.routing_trace import RoutingTrace

TIE_POINTS = 1.0
ADVICE_TOKENS = 64  # a run's advice replays at most its last this many decoded tokens (auto: ~40 ms a token at 48x6)
ONLINE = tuple(p for p in POLICIES if p != "hot")  # hot needs a prompt's reference: not advised


def compare(rates: dict[str, float], policy: str, where: str, cache_mb: float) -> str:
    """One line from hit rates (0..1 per policy, ``policy`` among them): "" when ``policy``
    is the best or no rate is known; a tie under TIE_POINTS; else the better policy by how much."""
    known = {p: r for p, r in rates.items() if r == r}
    if policy not in known or len(known) < 2:
        return ""
    best = max(known, key=lambda p: (known[p], p == policy, p == AUTO))
    if best == policy:
        return ""
    margin = 100 * (known[best] - known[policy])
    head = (f"replaying {where} at {cache_mb:,.0f} MiB: {best} {100 * known[best]:.1f} % "
            f"vs {policy} {100 * known[policy]:.1f} %")
    if margin < TIE_POINTS:
        return f"{head}: the policies tie ({margin:.1f} points apart, under {TIE_POINTS:g})"
    return f"{head}: {best} by {margin:.1f} points (expert policy {best})"


def advise(trace: RoutingTrace, cache_bytes: int, policy: str, where: str, earlier: bool = False) -> str:
    """Replay ``trace`` at ``cache_bytes`` through ``policy`` and the online policies; compare().
    ``earlier``: the trace is already the tail of a longer routing (a live run's last tokens)."""
    from shardscope.engine.experts.replay import min_cache_bytes, replay_one

    decoded = sorted({r.token for r in trace.records if not r.prompt})
    if not decoded or cache_bytes < min_cache_bytes(trace):
        return ""
    if len(decoded) > ADVICE_TOKENS:  # a long session: its last tokens (a replay costs ~5 policies' runs)
        first = decoded[-ADVICE_TOKENS]
        trace = RoutingTrace(trace.header, tuple(r for r in trace.records if not r.prompt and r.token >= first))
        label = f"the last {ADVICE_TOKENS} tokens of {where}"
    elif earlier:
        label = f"the last {len(decoded)} tokens of {where}"
    else:
        label = f"{where} ({len(decoded)} tokens)"
    policies = dict.fromkeys(ONLINE + (policy,))
    rates = {p: replay_one(trace, p, cache_bytes).expert_hit_rate for p in policies}
    return compare(rates, policy, label, cache_bytes / MIB)


def best_lines(rows, where: str) -> list[str]:
    """``replay``'s verdict per cache size: the best online policy replayed there and its margin
    over the runner-up, or a tie under TIE_POINTS (rows: replay.ReplayRow)."""
    by_size: dict[float, dict[str, float]] = {}
    for row in rows:
        if row.policy in POLICIES and row.expert_hit_rate == row.expert_hit_rate:
            by_size.setdefault(row.cache_mb, {})[row.policy] = row.expert_hit_rate
    lines = []
    for mb, rates in by_size.items():
        if len(rates) < 2:
            continue
        first, second = sorted(rates, key=lambda p: (-rates[p], p != AUTO))[:2]
        margin = 100 * (rates[first] - rates[second])
        head = (f"best at {mb:g} MiB replaying {where}: {first} {100 * rates[first]:.1f} %, "
                f"{second} {100 * rates[second]:.1f} %")
        lines.append(f"{head}: they tie ({margin:.1f} points apart, under {TIE_POINTS:g})" if margin < TIE_POINTS
                     else f"{head}: {first} by {margin:.1f} points")
    return lines


def cache_advice(policy: str, cache_bytes: int, unit_bytes: Mapping[int, int], n_expert_used: int,
                 trace=None, where: str = "this run's routing", earlier: bool = False) -> str:
    """One line naming a better policy for this cache, the trace replayed and the margin, else "".

    With ``trace`` (a RoutingTrace: the run's own routing), policy_advice replays it at
    ``cache_bytes`` through every online policy: a margin under one point is called a tie.
    Without one, only an lru cache smaller than one token's picks gets a line (it evicts an
    expert before the next token could reuse it), with the measured figures of a real router's
    trace at that size (docs/real-traces.md).
    """
    if trace is not None:
        return advise(trace, cache_bytes, policy, where, earlier)
    working_set = n_expert_used * sum(unit_bytes.values())
    if policy != "lru" or cache_bytes >= working_set:
        return ""
    return (f"the expert cache ({cache_bytes / 2**20:.0f} MB) is smaller than one token's experts "
            f"({working_set / 2**20:.0f} MB): lru evicts most of them before they are picked again; "
            f"replaying {QWEN_AT_ONE_TOKEN}")


# tests/test_real_trace_policy.py replays it and checks these figures
QWEN_AT_ONE_TOKEN = ("qwen.route.csv (Qwen3-30B-A3B, 128 tokens) at 783 MiB: auto 38.7 % vs lru 29.7 %: "
                     "auto by 8.9 points (expert policy auto)")


__all__ = ["advise", "compare", "best_lines", "cache_advice", "QWEN_AT_ONE_TOKEN", "TIE_POINTS", "ONLINE"]
