"""The hit rate at the run's k: a route trace replayed for a run that picks another number of experts.

A trace records the k_t picks its run made per token and layer, in the router's order (highest
weight first). A run at another k:

* **k < k_t**: its picks are the router's top k, i.e. the first k of each recorded access: the trace
  is replayed with those alone (exact, but for the prompt pass, whose union is kept whole);
* **k = k_t**: replayed as recorded;
* **k > k_t**: the extra picks were never recorded, so it cannot be replayed. The trace's miss
  rate m(k_t) (missed picks / picks at the same cache) is kept, the bytes scaled by k / k_t; how
  much that may be off is read from the trace itself: m(k) replayed at each k from k_t / 2 to k_t
  (top-k cuts, above), a line through them (least squares) extended to the run's k::

      may_be_off = slope x (k - k_t) / m(k_t)      (a share of the misses; they may be that much higher)

  Extending the line instead of keeping m(k_t) was tried on the published phone runs: BigMoeOnEdge's
  k = 8 runs of Qwen3 and Gemma 4 and k = 4 of gpt-oss read -7.6 / -4.6 / -6.3 / -2.9 % fewer bytes
  than the kept rate says, +10.5 / +5.3 / -0.4 / +29.5 % than the extended one (docs/decisions.md).
  With k_t = 1 there is no slope (``may_be_off`` None: unknown).

Every decoded access's misses are kept (``accesses``: layer, misses), so a flash model can read
each layer's batch as the run would (engine/devices/published_runs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_cache import ExpertCache
from shardscope.engine.experts.replay import decoded_accesses, run_order


@dataclass(frozen=True)
class ReplayAtK:
    k: int
    hit: float  # 0..1 over decoded accesses
    missed_mib_per_token: float
    accesses: tuple[tuple[int, float], ...]  # (layer, experts missed) per decoded token and layer
    n_tokens: int
    note: str  # "replayed", "replayed with the top 4 of the trace's 6 picks", "re-scaled from the trace's k=6 ..."
    scale: float = 1.0  # the factor on the replay's misses (1 where replayed at k)
    may_be_off: float | None = 0.0  # the re-scaling's own uncertainty, a fraction of the misses; None unknown


def _top(record, k: int):
    """The router's top k of a recorded access (its picks are in the router's order, highest weight first)."""
    if len(record.experts) <= k:
        return record
    order = list(range(len(record.experts)))
    if record.weights:
        order.sort(key=lambda i: -record.weights[i])
    keep = sorted(order[:k])
    return replace(record, experts=tuple(record.experts[i] for i in keep),
                   weights=tuple(record.weights[i] for i in keep) if record.weights else ())


def replay_picks(trace, policy: str, cache_bytes: int, k: int) -> ReplayAtK:
    """The trace replayed with each decoded access cut to its top ``k`` (k <= the trace's k)."""
    header = trace.header
    cache = ExpertCache(policy, cache_bytes, header.unit_bytes, k)
    hits = misses = missed = 0
    accesses = []
    tokens = set()
    for record, got in decoded_accesses(cache, run_order(trace, cache_bytes), header.unit_bytes, k,
                                        picks=lambda r: _top(r, k).experts):
        hits += len(got.hits)
        misses += len(got.misses)
        missed += len(got.misses) * header.unit_bytes[record.layer]
        accesses.append((record.layer, float(len(got.misses))))
        tokens.add(record.token)
    n = max(len(tokens), 1)
    note = ("replayed" if k == header.n_expert_used
            else f"replayed, the top {k} of the trace's {header.n_expert_used} picks")
    return ReplayAtK(k, hits / (hits + misses) if hits + misses else 0.0, missed / MIB / n, tuple(accesses), n, note)


def replay_at_k(trace, policy: str, cache_bytes: int, k: int, *, trend: bool = True) -> ReplayAtK:
    """The replay for a run at ``k`` (module doc). ``trend=False`` skips the k-trend's replays above the
    trace's k (the misses are the same; ``may_be_off`` is then None): for callers that need only the misses."""
    k_t = trace.header.n_expert_used
    if k <= k_t:
        return replay_picks(trace, policy, cache_bytes, k)
    base = replay_picks(trace, policy, cache_bytes, k_t)
    ks = list(range(max(1, -(-k_t // 2)), k_t + 1))
    base_miss = 1.0 - base.hit
    off: float | None = None
    if not trend:
        how = f"k={k} not in the trace: its k={k_t} miss rate (the k-trend not replayed)"
    elif len(ks) >= 2:
        points = [(j, 1.0 - (base if j == k_t else replay_picks(trace, policy, cache_bytes, j)).hit) for j in ks]
        mean_k = sum(j for j, _ in points) / len(points)
        mean_m = sum(m for _, m in points) / len(points)
        slope = (sum((j - mean_k) * (m - mean_m) for j, m in points)
                 / sum((j - mean_k) ** 2 for j, _ in points))
        off = max(0.0, slope * (k - k_t)) / base_miss if base_miss > 0 else 0.0
        how = (f"k={k} not in the trace: its k={k_t} miss rate, up to +{100 * off:.0f} % more misses "
               f"(its k={ks[0]}..{k_t} trend: {100 * slope:+.2f} pts a pick)")
    else:
        how = f"k={k} not in the trace: its k={k_t} miss rate, off by an unknown amount"
    scale = k / k_t
    accesses = tuple((layer, n * scale) for layer, n in base.accesses)
    return ReplayAtK(k, base.hit, base.missed_mib_per_token * scale, accesses, base.n_tokens, how, scale, off)


__all__ = ["ReplayAtK", "replay_at_k", "replay_picks"]
