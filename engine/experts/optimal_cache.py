"""The optimum an expert cache could reach on a trace: Belady's MIN, which knows the future.

Over the same accesses, in the same order, as the online policies' replay (the prompt's
union per layer first, then one access per decoded token and layer), a miss evicts the
resident experts whose next use lies farthest ahead (never used again first) until the
picks fit; the layer's current picks are never evicted. No online policy can know the
next uses, so this is the limit the cacheability plot and ``replay`` show beside them:
the gap between a policy and it is what a better policy could still win. (With experts
of different sizes MIN is not exactly optimal in bytes; every trace here has one size or
two within 15 %, so it is the limit to within that.)

The heap holds (−next use, unit) entries and skips stale ones (a unit re-used or evicted
since its entry was pushed), so each access costs O(picks × log resident).
"""

from __future__ import annotations

import heapq
from typing import Mapping, Sequence

Unit = tuple[int, int]
NEVER = 1 << 62  # the next use of a unit the trace never picks again


def next_uses(accesses: Sequence[tuple[int, Sequence[int]]]) -> list[list[int]]:
    """For access ``i``'s picks, the index of each unit's next access (NEVER if none)."""
    following: dict[Unit, int] = {}
    out: list[list[int]] = [[] for _ in accesses]
    for i in range(len(accesses) - 1, -1, -1):
        layer, experts = accesses[i]
        out[i] = [following.get((layer, e), NEVER) for e in experts]
        for e in experts:
            following[(layer, e)] = i
    return out


def belady_hits(accesses: Sequence[tuple[int, Sequence[int]]], counted: Sequence[bool],
                capacity_bytes: int, unit_bytes: Mapping[int, int]) -> tuple[int, int, int]:
    """(hits, misses, missed bytes) over the accesses whose ``counted`` flag is set.

    ``accesses`` are (layer, experts) in run order; every access must fit the cache alone.
    """
    ahead = next_uses(accesses)
    resident: dict[Unit, int] = {}  # unit → index of its next use
    heap: list[tuple[int, Unit]] = []
    used = hits = misses = missed_bytes = 0
    for i, (layer, experts) in enumerate(accesses):
        size = unit_bytes[layer]
        absent = [e for e in experts if (layer, e) not in resident]
        if counted[i]:
            hits += len(experts) - len(absent)
            misses += len(absent)
            missed_bytes += len(absent) * size
        need = len(absent) * size
        while used + need > capacity_bytes:
            if not heap:
                raise ValueError(f"{need} bytes of picked experts do not fit a {capacity_bytes}-byte cache")
            negative, unit = heapq.heappop(heap)
            # stale: evicted already, or re-used since (then a newer entry exists); the
            # current picks' entries say i (their use now) and wait until they are updated
            if resident.get(unit) != -negative or -negative == i:
                continue
            del resident[unit]
            used -= unit_bytes[unit[0]]
        for e, upcoming in zip(experts, ahead[i]):
            unit = (layer, e)
            if unit not in resident:
                used += size
            resident[unit] = upcoming
            heapq.heappush(heap, (-upcoming, unit))
    return hits, misses, missed_bytes


__all__ = ["belady_hits", "next_uses", "NEVER"]
