"""The cacheability curve's numbers: which cache sizes to replay, the replay itself, and the
projected tok/s at each size — pure functions, run off the GUI thread by the expert panel.

The hit rates are ``engine.replay.cacheability`` unchanged (the same numbers ``shardscope
replay`` prints for the same sizes); sizes are whole MiB so the CLI can be given exactly
the sizes the plot shows.

The replay is pure Python for seconds on a long session; in a thread of the app it would
hold the GIL that the decode thread's expert callbacks need at every layer, so the panel
replays in a separate process (docs/decisions.md has the measurement).
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from shardscope.engine.devices.projection import moe_ssd_bytes_per_token
from shardscope.engine.experts.foreign_traces import load_trace as read_any_trace
from shardscope.engine.experts.replay import REPLAY_POLICIES, cacheability, min_cache_bytes
from shardscope.engine.experts.routing_trace import RoutingTrace
from shardscope.engine.devices.run_projection import projection_for
from shardscope.engine.base.units import MIB

N_SIZES = 8


@dataclass(frozen=True)
class CacheabilityResult:
    curves: dict[str, list[tuple[float, float]]]  # policy → [(cache MiB, hit rate 0..1)]
    sizes_mb: tuple[float, ...]
    source: str  # "this session" or the trace file's name
    n_expert_used: int
    used_expert_mb: float  # one token's picked experts over all layers (what a miss costs per token)


def cache_sizes(floor_bytes: int, full_bytes: int, n: int = N_SIZES) -> list[float]:
    """``n`` whole-MiB sizes from the smallest cache a layer's picks fit in to every expert,
    spaced geometrically (hit rate changes fastest at small caches)."""
    lo = max(1, math.ceil(floor_bytes / MIB))
    hi = max(lo, math.ceil(full_bytes / MIB))
    if n < 2 or hi == lo:
        return [float(lo)]
    ratio = (hi / lo) ** (1 / (n - 1))
    return sorted({float(min(hi, math.ceil(lo * ratio ** i))) for i in range(n)})


def load_trace(source) -> tuple[RoutingTrace, str]:
    """A RoutingTrace from a file path or as given (a run's ``routing_records()``), and its name."""
    if isinstance(source, (str, Path)):
        return read_any_trace(source), Path(source).name
    return source, "this session"


def compute(source, policies: tuple[str, ...] = REPLAY_POLICIES) -> CacheabilityResult:
    """Replay ``source`` at ``cache_sizes`` for each policy and the optimum (Belady's limit).
    ShardscopeError for an empty or bad trace."""
    from shardscope.engine.base.errors import ShardscopeError

    trace, name = load_trace(source)
    if not any(not r.prompt for r in trace.records):
        raise ShardscopeError(f"{name}: no decoded tokens routed yet (run a few tokens first)")
    header = trace.header
    full = sum(size * header.n_expert for size in header.unit_bytes.values())
    # from one layer's picks to every expert, and one and two tokens' picks (where real
    # routers' caches are compared, docs/real-traces.md) when they lie in between
    used_bytes = header.n_expert_used * sum(header.unit_bytes.values())
    # whole MiB, so a size is added only where its floor still holds a layer's picks (a tiny trace's
    # token rounds down to 0 MiB)
    tokens_mib = {float(math.floor(m * used_bytes / MIB)) for m in (1, 2)}
    sizes = sorted(set(cache_sizes(min_cache_bytes(trace), full))
                   | {mib for mib in tokens_mib if min_cache_bytes(trace) <= mib * MIB < full})
    curves = cacheability(trace, sizes, list(policies))
    used = header.n_expert_used * sum(header.unit_bytes.values()) / MIB
    return CacheabilityResult({p: [(float(x), float(y)) for x, y in pts] for p, pts in curves.items()},
                              tuple(sizes), name, header.n_expert_used, used)


def compute_in_process(source, policies: tuple[str, ...] = REPLAY_POLICIES) -> CacheabilityResult:
    """``compute`` in a fresh (spawned: no copy of llama.cpp's threads) process at a lower
    priority, so the decode keeps its cores; the caller's thread only waits. Errors come
    back as raised there (one-line ShardscopeErrors)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                             initializer=os.nice, initargs=(10,)) as pool:
        return pool.submit(compute, source, policies).result()


def projected_points(summary, curve: list[tuple[float, float]], used_expert_mb: float,
                     device_id: str) -> list[tuple[float, float]]:
    """Projected tok/s on ``device_id`` at each (size, hit rate): the round's measured dense
    reads and compute, with its expert reads replaced by (1 − hit) × the used experts' bytes
    (``engine.projection.moe_ssd_bytes_per_token``)."""
    dense = getattr(summary, "dense_mb_per_token", 0.0) or 0.0
    out = []
    for size, hit in curve:
        if not math.isfinite(hit):
            continue
        read = moe_ssd_bytes_per_token(dense * MIB, used_expert_mb * MIB, hit) / MIB
        what_if = dataclasses.replace(summary, read_mb_per_token=read)
        out.append((size, projection_for(what_if, device_id).tokens_per_s))
    return out


__all__ = ["CacheabilityResult", "cache_sizes", "compute", "compute_in_process", "load_trace", "projected_points"]
