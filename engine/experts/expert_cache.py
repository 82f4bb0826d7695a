"""Which experts stay resident under a byte budget: the decisions, without any I/O.

A unit is one (layer, expert). An access is the set of experts a layer's router picked
for a pass (one token, or the union over a prompt's tokens): picked units already in the
cache are hits, the rest are misses and come in, evicting others if the cache is full.
The live streamer and the offline replay both drive this class, so a replay of a run's
trace reproduces the run's hit rate.

Policies differ in what leaves first:
- ``lru``: the unit used longest ago.
- ``lfu``: the unit picked least often so far (ties: the one used longest ago).
- ``hot``: units with the highest counts in a reference (``set_hot``) are pinned and
  never leave; the rest stream through what remains, least recently used first.
- ``decay``: the unit whose next use looks farthest away (decaying_frequency.py): each
  unit's chance of being picked at its layer's next pass is its pick count decayed with a
  half-life of a few tokens, and a layer already passed this token waits a whole token
  longer than one still to come. On real routers' traces it beats lru, lfu and hot at one
  and two tokens' worth of cache (docs/real-traces.md), so it is the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from shardscope.engine.experts.decaying_frequency import DecayingFrequency

POLICIES = ("decay", "lru", "lfu", "hot")
Unit = tuple[int, int]  # (layer, expert)


@dataclass
class Access:
    hits: list[Unit] = field(default_factory=list)
    misses: list[Unit] = field(default_factory=list)
    evicted: list[Unit] = field(default_factory=list)


class ExpertCache:
    def __init__(self, policy: str, capacity_bytes: int, unit_bytes: Mapping[int, int],
                 n_expert_used: int | None = None):
        if policy not in POLICIES:
            raise ValueError(f"expert policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.policy = policy
        self.capacity_bytes = int(capacity_bytes)
        self.unit_bytes = dict(unit_bytes)
        self.resident: dict[Unit, int] = {}  # unit → last use tick
        self.counts: dict[Unit, int] = {}
        self.pinned: frozenset[Unit] = frozenset()
        self.used_bytes = 0
        self._tick = 0
        # decay's estimates (n_expert_used turns a prompt pass's counts into shares of its
        # tokens; without it they are shares of its most-picked expert's count)
        self.decaying = DecayingFrequency(sorted(self.unit_bytes), n_expert_used)

    # ------------------------------------------------------------ reference
    def set_hot(self, counts: Mapping[Unit, int], reserve_bytes: int) -> frozenset[Unit]:
        """Pin the most-picked units of ``counts``, leaving ``reserve_bytes`` for streaming.

        Only the ``hot`` policy pins; the others ignore the reference.
        """
        if self.policy != "hot":
            return self.pinned
        room = self.capacity_bytes - reserve_bytes
        pinned: list[Unit] = []
        for unit, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            size = self.unit_bytes[unit[0]]
            if count <= 0 or size > room:
                continue
            pinned.append(unit)
            room -= size
        self.pinned = frozenset(pinned)
        return self.pinned

    # ------------------------------------------------------------ accesses
    def __contains__(self, unit: Unit) -> bool:
        return unit in self.resident

    def access(self, layer: int, experts: Iterable[int], weights: Mapping[int, int] | None = None) -> Access:
        """The router of ``layer`` picked ``experts``: count hits and misses, admit the misses.

        ``weights`` counts how many tokens picked each expert (a prompt pass); 1 each
        otherwise. Raises ValueError when the picks cannot fit however much is evicted.
        """
        picked = [(layer, e) for e in dict.fromkeys(experts)]
        need = sum(self.unit_bytes[layer] for u in picked if u not in self.resident)
        self._tick += 1
        # kept under every policy (O(picks)), so a live switch to decay starts with the run's history
        self.decaying.picked(layer, [u[1] for u in picked], weights)
        result = Access()
        for unit in picked:
            self.counts[unit] = self.counts.get(unit, 0) + (weights.get(unit[1], 1) if weights else 1)
            if unit in self.resident:
                result.hits.append(unit)
            else:
                result.misses.append(unit)
        if need:
            result.evicted = self.make_room(need, protected=set(picked))
        # The picks become the most recent in router order, hits and misses alike: units
        # touched by one access tie on the tick, and the dict's order breaks the tie.
        for unit in picked:
            if self.resident.pop(unit, None) is None:
                self.used_bytes += self.unit_bytes[unit[0]]
            self.resident[unit] = self._tick
        return result

    def admit(self, unit: Unit, protected: Iterable[Unit] = ()) -> list[Unit] | None:
        """Bring a unit in ahead of use (speculation): the evicted units, or None if no room.

        Never evicts a ``protected`` unit (what the current token still needs) or a
        pinned one; the admitted unit counts as the least recently used, so a wrong
        guess is the first to leave.
        """
        if unit in self.resident:
            return []
        size = self.unit_bytes[unit[0]]
        protected = set(protected) | {unit}
        if self.used_bytes + size > self.capacity_bytes and not self._can_free(
                self.used_bytes + size - self.capacity_bytes, protected, allow_pinned=False):
            return None
        evicted = self.make_room(size, protected, allow_pinned=False)
        self.resident[unit] = 0
        self.used_bytes += size
        return evicted

    def discard(self, unit: Unit) -> None:
        if unit in self.resident:
            del self.resident[unit]
            self.used_bytes -= self.unit_bytes[unit[0]]

    # ------------------------------------------------------------ eviction
    def _victims(self, protected: set[Unit], allow_pinned: bool) -> list[Unit]:
        """Evictable units, first to leave first."""
        units = [u for u in self.resident if u not in protected]
        streamed = [u for u in units if u not in self.pinned]
        if self.policy == "lfu":
            streamed.sort(key=lambda u: (self.counts.get(u, 0), self.resident[u]))
        elif self.policy == "decay":
            streamed.sort(key=lambda u: (-self.decaying.expected_wait(u), self.resident[u]))
        else:
            streamed.sort(key=lambda u: self.resident[u])
        pinned = sorted((u for u in units if u in self.pinned), key=lambda u: self.resident[u])
        return streamed + (pinned if allow_pinned else [])

    def _can_free(self, need: int, protected: set[Unit], allow_pinned: bool) -> bool:
        return sum(self.unit_bytes[u[0]] for u in self._victims(protected, allow_pinned)) >= need

    def make_room(self, need: int, protected: set[Unit], allow_pinned: bool = True) -> list[Unit]:
        evicted: list[Unit] = []
        victims = iter(self._victims(protected, allow_pinned))
        while self.used_bytes + need > self.capacity_bytes:
            victim = next(victims, None)
            if victim is None:
                raise ValueError(f"{need} bytes of picked experts do not fit a {self.capacity_bytes}-byte cache")
            self.discard(victim)
            evicted.append(victim)
        return evicted


def hot_reserve_bytes(unit_bytes: Mapping[int, int], n_expert_used: int) -> int:
    """Room ``hot`` leaves unpinned: two layers' picks (the layer computing, the next one loading)."""
    return 2 * n_expert_used * max(unit_bytes.values())


__all__ = ["ExpertCache", "Access", "POLICIES", "hot_reserve_bytes"]


def cache_advice(policy: str, cache_bytes: int, unit_bytes: Mapping[int, int], n_expert_used: int) -> str:
    """One line when the cache cannot help this policy, else "".

    A decoded token picks ``n_expert_used`` experts in every layer, in layer order, so an LRU
    cache smaller than one token's picks evicts an expert before the next token could reuse
    it (0 % on a router that repeats only token to token). What keeps hitting there, measured
    on three real routers' traces (docs/real-traces.md), is ``decay``: it keeps the experts
    each layer keeps picking and lets near-uniform layers' experts go first.
    """
    working_set = n_expert_used * sum(unit_bytes.values())
    if policy != "lru" or cache_bytes >= working_set:
        return ""
    return (f"the expert cache ({cache_bytes / 2**20:.0f} MB) is smaller than one token's experts "
            f"({working_set / 2**20:.0f} MB): lru evicts most of them before they are picked again; "
            f"the decay policy keeps the experts the router keeps picking (real traces just under one "
            f"token's experts: Qwen3-30B-A3B lru 29.6 %, decay 36.9 %)")
