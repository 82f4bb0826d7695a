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
  and two tokens' worth of cache (docs/real-traces.md).
- ``auto`` (the default): the order of whichever of lru, lfu, decay and ``rank`` (decay, the
  layer's last picks weighed by their router slot's repeat rate: pick_rank.py; auto's candidate
  only) would have hit most lately (adaptive_policy.py's shadow directories).
Ties left by a key go to the unit that came in first.

Why heaps: a 61-layer model with 384 experts a layer keeps ~22k units resident, and every
layer of every token with a miss needs the next victim; sorting all resident units per miss
cost ~5 ms a layer (issue #24). A lazy heap per class (streamed, pinned; decay: one per layer, since a layer's units
keep their order between its passes and only the L heads are compared) gives the same order
in O(log n): a unit's entry is pushed again whenever its key changes, stale entries are
skipped when they surface and the heap is rebuilt once stale ones outnumber live ones.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from shardscope.engine.experts.adaptive_policy import ShadowDirectories
from shardscope.engine.experts.decaying_frequency import DecayingFrequency
from shardscope.engine.experts.pick_rank import PickRank

AUTO = "auto"
POLICIES = (AUTO, "decay", "lru", "lfu", "hot")
ORDERS = ("decay", "lru", "lfu", "hot", "rank")  # what a victim is chosen by (auto picks one of them)
Unit = tuple[int, int]  # (layer, expert)


@dataclass
class Access:
    hits: list[Unit] = field(default_factory=list)
    misses: list[Unit] = field(default_factory=list)
    evicted: list[Unit] = field(default_factory=list)


class ExpertCache:
    def __init__(self, policy: str, capacity_bytes: int, unit_bytes: Mapping[int, int],
                 n_expert_used: int | None = None, *, trackers: tuple | None = None):
        """``trackers`` (decaying, ranks): a shadow's, shared with the live cache that updates them."""
        if policy not in POLICIES and policy not in ORDERS:
            raise ValueError(f"expert policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self._policy = policy
        self._order = policy  # the order victims leave in (auto: its shadows' leader)
        self._shadows: ShadowDirectories | None = None
        self._mirror = False  # auto: this cache is its leader directory's twin, whose victims it takes
        self._capacity = int(capacity_bytes)
        self.unit_bytes = dict(unit_bytes)
        self.n_expert_used = n_expert_used
        self.resident: dict[Unit, int] = {}  # unit → last use tick (read-only outside this class)
        self.counts: dict[Unit, int] = {}
        self._pinned: frozenset[Unit] = frozenset()
        self.used_bytes = 0
        self.pinned_bytes = 0  # resident bytes of pinned units
        self._tick = 0
        self._seq = 0
        self._since: dict[Unit, int] = {}  # unit → its last touch (the tie-break: router order within an access)
        self._entry: dict[Unit, tuple] = {}  # unit → its live heap entry
        # (pinned?, layer for decay's streamed units else None) → [(key, since, unit)]
        self._heaps: dict[tuple[bool, int | None], list] = {}
        # decay's estimates (n_expert_used turns a prompt pass's counts into shares of its
        # tokens; without it they are shares of its most-picked expert's count)
        self._ranked_pick: dict[int, tuple[int, Unit]] = {}  # rank: layer → (its pass, its last picks' victim)
        self._owns_trackers = trackers is None
        if trackers is None:
            trackers = (DecayingFrequency(sorted(self.unit_bytes), n_expert_used),
                        PickRank(sorted(self.unit_bytes), n_expert_used))
        self.decaying, self.ranks = trackers
        if policy == AUTO:
            self._follow()

    # ------------------------------------------------------------ auto
    def _follow(self) -> None:
        """Shadow directories of auto's candidates, seeded with what is resident now."""
        self._shadows = ShadowDirectories(
            lambda name: ExpertCache(name, self._capacity, self.unit_bytes, self.n_expert_used,
                                     trackers=(self.decaying, self.ranks)), len(self.unit_bytes))
        self._shadows.seed(self.resident)
        self._order = self._shadows.leader

    def seed(self, resident: Mapping[Unit, int]) -> None:
        """Hold ``resident``'s units (unit → last use tick), oldest first (a shadow's start)."""
        for unit in sorted(resident, key=resident.__getitem__):
            if unit not in self.resident and self.used_bytes + self.unit_bytes[unit[0]] <= self._capacity:
                self._insert(unit, resident[unit], self._seq)
                self._seq += 1
        self._tick = max([self._tick, *resident.values()])  # later accesses are later than the seeded ones

    @property
    def order(self) -> str:
        """The order victims leave in now: the policy's, or under auto the candidate it follows."""
        return self._order

    @property
    def shadows(self) -> ShadowDirectories | None:
        self.settle()
        return self._shadows

    def settle(self) -> None:
        """Let auto's shadow directories take the last access now (the expert streamer calls it once
        a layer's reads are out; otherwise the next access or a look at the shadows does)."""
        if self._shadows is not None:
            self._shadows.settle()

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @capacity_bytes.setter
    def capacity_bytes(self, capacity: int) -> None:
        """A new size; the caller evicts what no longer fits (make_room(0)), shadows shrink alike."""
        self._capacity = int(capacity)
        self._mirror = False
        if self._shadows is not None:
            self._shadows.settle()
            for cache in self._shadows.caches.values():
                cache.capacity_bytes = self._capacity
                cache.make_room(0, protected=set())

    # ------------------------------------------------------------ policy and pins
    @property
    def policy(self) -> str:
        return self._policy

    @policy.setter
    def policy(self, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"expert policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self._policy = policy
        self._shadows = None
        self._mirror = False
        self._order = policy
        if policy == AUTO:
            self._follow()
        self._rebuild()

    @property
    def pinned(self) -> frozenset[Unit]:
        return self._pinned

    @pinned.setter
    def pinned(self, units: Iterable[Unit]) -> None:
        self._pinned = frozenset(units)
        self.pinned_bytes = sum(self.unit_bytes[u[0]] for u in self.resident if u in self._pinned)
        self._rebuild()

    def eviction_key(self, unit: Unit) -> tuple:
        """Where a resident unit stands in its policy's eviction order: the smallest key leaves
        first. A new policy is a new key here (recomputed on every access of the unit)."""
        if unit in self._pinned:  # pinned units leave by age alone
            return (self.resident[unit],)
        if self._order == "lfu":
            return self.counts.get(unit, 0), self.resident[unit]
        if self._order in ("decay", "rank"):  # within a layer: the lowest decayed count waits longest
            return self.decaying.level(unit), self.resident[unit]
        return (self.resident[unit],)

    def _heap_key(self, unit: Unit) -> tuple[bool, int | None]:
        pinned = unit in self._pinned
        return pinned, (unit[0] if self._order in ("decay", "rank") and not pinned else None)

    # ------------------------------------------------------------ reference
    def set_hot(self, counts: Mapping[Unit, int], reserve_bytes: int) -> frozenset[Unit]:
        """Pin the most-picked units of ``counts``, leaving ``reserve_bytes`` for streaming.

        Only the ``hot`` policy pins; the others ignore the reference.
        """
        if self._order != "hot":
            return self.pinned
        room = self.capacity_bytes - reserve_bytes
        pinned: list[Unit] = []
        for unit, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            size = self.unit_bytes[unit[0]]
            if count <= 0 or size > room:
                continue
            pinned.append(unit)
            room -= size
        self.pinned = pinned
        return self.pinned

    # ------------------------------------------------------------ accesses
    def __contains__(self, unit: Unit) -> bool:
        return unit in self.resident

    def access(self, layer: int, experts: Iterable[int], weights: Mapping[int, int] | None = None) -> Access:
        """The router of ``layer`` picked ``experts``: count hits and misses, admit the misses.

        ``weights`` counts how many tokens picked each expert (a prompt pass); 1 each
        otherwise. Raises ValueError when the picks cannot fit however much is evicted.
        """
        self.settle()  # the shadows take the last access before the trackers move on
        picked = [(layer, e) for e in dict.fromkeys(experts)]
        size = self.unit_bytes[layer]
        self._tick += 1
        # kept under every policy (O(picks)), so a live switch to decay starts with the run's history;
        # a shadow's are the live cache's (updated there, once)
        if self._owns_trackers:
            self.decaying.picked(layer, [u[1] for u in picked], weights)
            self.ranks.picked(layer, [u[1] for u in picked], bool(weights))
        mirror = None
        if self._shadows is not None:
            leader = self._shadows.decide(layer, [u[1] for u in picked], weights)
            if leader != self._order:
                self._order = leader
                self._mirror = False
                self._rebuild()
            elif self._mirror:
                mirror = self._shadows.settle(leader)
        # The picks become the most recent in router order, hits and misses alike: units touched
        # by one access tie on the tick, and their touch order breaks the tie.
        touch = {unit: self._seq + i for i, unit in enumerate(picked)}
        self._seq += len(picked)
        result = Access()
        for unit in picked:
            self.counts[unit] = self.counts.get(unit, 0) + (weights.get(unit[1], 1) if weights else 1)
            if unit in self.resident:
                result.hits.append(unit)
                self.resident[unit] = self._tick
                self._since[unit] = touch[unit]
                self._push(unit)
            else:
                result.misses.append(unit)
        need = size * len(result.misses)
        if mirror is not None and (mirror.misses != result.misses or any(
                u not in self.resident or u in touch for u in mirror.evicted)):
            mirror = self._mirror = False  # not the leader's twin after all: decide alone from here
        if need:
            if mirror:  # the leader's directory holds what this cache holds: its victims are this cache's
                for unit in mirror.evicted:
                    self.discard(unit)
                result.evicted = list(mirror.evicted)
                if self.used_bytes + need > self._capacity:
                    self._mirror = False
                    result.evicted += self.make_room(need, protected=set(picked))
            else:
                result.evicted = self.make_room(need, protected=set(picked))
            for unit in result.misses:
                self._insert(unit, self._tick, touch[unit])
        if self._shadows is not None and not self._mirror and self.decaying.position.get(layer) == 0:
            self._shadows.settle(self._order)
            twin = self._shadows.caches[self._order]  # once a token: has this cache become the leader's twin?
            self._mirror = self.resident == twin.resident and self._since == twin._since
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
        self._mirror = False  # a guess the directories never see
        self._insert(unit, 0, self._seq)
        self._seq += 1
        return evicted

    def discard(self, unit: Unit) -> None:
        if unit in self.resident:
            del self.resident[unit]
            del self._since[unit]
            self._entry.pop(unit, None)
            size = self.unit_bytes[unit[0]]
            self.used_bytes -= size
            if unit in self._pinned:
                self.pinned_bytes -= size

    # ------------------------------------------------------------ eviction
    def _can_free(self, need: int, protected: set[Unit], allow_pinned: bool) -> bool:
        """Whether evicting every evictable unit would free ``need`` bytes (no victim chosen)."""
        free = self.used_bytes - (0 if allow_pinned else self.pinned_bytes)
        free -= sum(self.unit_bytes[u[0]] for u in protected
                    if u in self.resident and (allow_pinned or u not in self._pinned))
        return free >= need

    def make_room(self, need: int, protected: set[Unit], allow_pinned: bool = True) -> list[Unit]:
        """Evict, first to leave first, until ``need`` more bytes fit: streamed units in their
        policy's order, then (``allow_pinned``) pinned ones, least recently used first; never a
        ``protected`` one."""
        evicted: list[Unit] = []
        skipped: list[tuple] = []  # protected entries popped on the way: pushed back after
        try:
            classes = [False, True] if allow_pinned else [False]
            for pinned in classes:
                if self.used_bytes + need <= self.capacity_bytes:
                    continue
                # each heap's candidate, computed once: a victim changes only its own heap's. Under
                # decay and rank a layer first enters by a bound on its wait (from its heap's first
                # entry, stale or not: no live unit has a lower count), computed exactly only when
                # that bound comes first: most layers' heads are never looked at
                heads: list[tuple] = []
                by_wait = not pinned and self._order in ("decay", "rank")
                for key, heap in self._heaps.items():
                    if key[0] == pinned and heap:
                        if by_wait:
                            heapq.heappush(heads, ((-self._wait_bound(key, heap),), -1, key, None))
                        else:
                            self._push_candidate(heads, key, protected, skipped)
                while heads and self.used_bytes + need > self.capacity_bytes:
                    _, _, key, entry = heapq.heappop(heads)
                    if entry is None:  # a bound came first: the layer's exact candidate takes its place
                        self._push_candidate(heads, key, protected, skipped)
                        continue
                    self.discard(entry[2])
                    evicted.append(entry[2])
                    self._push_candidate(heads, key, protected, skipped)
            if self.used_bytes + need > self.capacity_bytes:
                raise ValueError(f"{need} bytes of picked experts do not fit a {self.capacity_bytes}-byte cache")
        finally:
            for entry in skipped:
                heapq.heappush(self._heaps[self._heap_key(entry[2])], entry)
        return evicted

    def _live_head(self, heap: list, protected: set[Unit], skipped: list, skip: Mapping = {}) -> tuple | None:
        """The heap's first live, unprotected entry (left on the heap), dropping stale ones; entries
        of experts in ``skip`` (rank: the layer's last picks, weighed apart) are set aside too."""
        while heap:
            entry = heap[0]
            unit = entry[2]
            if self._entry.get(unit) is not entry:
                heapq.heappop(heap)  # stale: the unit left, or its key changed since
            elif unit in protected or unit[1] in skip:
                skipped.append(heapq.heappop(heap))
            else:
                return entry
        return None

    def _push_candidate(self, heads: list, key: tuple, protected: set[Unit], skipped: list) -> None:
        """Push heap ``key``'s next victim onto ``heads`` as (rank, since, key, entry), if it has one:
        its head, or under decay the head ranked by its expected wait (ties: least recently used);
        under rank the layer's last picks are weighed beside its head with their slot's repeat
        rate. Across heaps (decay: one per layer) the smallest rank leaves first."""
        pinned, layer = key
        heap = self._heaps[key]
        by_wait = not pinned and self._order in ("decay", "rank")
        ranked = self.ranks.rank.get(layer, {}) if by_wait and self._order == "rank" else {}
        entry = self._live_head(heap, protected, skipped, ranked)
        rank = ()
        decaying = self.decaying
        if entry is not None and by_wait:
            chance = decaying.chance(entry[2])
            if chance >= 1.0:
                # the head has the layer's lowest count, so every unit of the layer is sure to be
                # picked at its next pass: they all wait alike and the least recent one leaves
                entry = min((e for e in heap if self._entry.get(e[2]) is e and e[2] not in protected
                             and e[2][1] not in ranked),
                            key=lambda e: (self.resident[e[2]], self._since[e[2]]))
            unit = entry[2]
            rank = (-decaying.expected_wait(unit, chance), self.resident[unit], self._since[unit])
            if ranked and chance < self.ranks.lowest[layer]:
                ranked = {}  # no last pick of the layer can wait longer than its head
        if ranked:
            unit = self._ranked_victim(layer, ranked, protected)
            if unit is not None:
                repeat = self.ranks.repeat_by_slot[layer][ranked[unit[1]]]
                mine = (-decaying.expected_wait(unit, 0.5 * (decaying.chance(unit) + repeat)),
                        self.resident[unit], self._since[unit])
                if entry is None or mine < rank:
                    entry, rank = self._entry[unit], mine
        if entry is not None:
            heapq.heappush(heads, (rank, entry[1], key, entry))

    def _wait_bound(self, key: tuple, heap: list) -> float:
        """No unit of this layer's heap (nor, under rank, of its last picks) waits longer than this."""
        while heap and self._entry.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)  # stale: the unit left or its key changed (its live entry is elsewhere)
        chance = self.decaying.chance_at_level(heap[0][0][0]) if heap else 1.0
        layer = key[1]
        if self._order == "rank" and self.ranks.rank.get(layer):
            cached = self._ranked_pick.get(layer)
            if cached is not None and cached[0] == self.ranks.passes[layer] and cached[1] in self.resident:
                unit = cached[1]  # the pick chosen this pass; any other last pick waits less
                slot = self.ranks.rank[layer][unit[1]]
                lower = 0.5 * (self.decaying.chance(unit) + self.ranks.repeat_by_slot[layer][slot])
            else:
                lower = self.ranks.lowest[layer]
            chance = min(chance, lower)
        return self.decaying.wait_at(layer, chance)

    def _ranked_victim(self, layer: int, ranked: Mapping[int, int], protected: set[Unit]) -> Unit | None:
        """Of the layer's last picks (resident, unprotected), the one with the longest expected wait
        by its mixed chance, chosen once per pass of the layer and kept while it stays resident and
        unprotected: all of a layer's chances decay alike, so the choice rarely changes before the
        layer's next pass, and rechecking k picks for every eviction cost auto most of its time."""
        passes = self.ranks.passes[layer]
        cached = self._ranked_pick.get(layer)
        if cached is not None and cached[0] == passes and cached[1] in self.resident and cached[1] not in protected:
            return cached[1]
        decaying, repeat, resident = self.decaying, self.ranks.repeat_by_slot[layer], self.resident
        best, best_rank = None, None
        for expert, slot in ranked.items():
            unit = (layer, expert)
            if unit in protected or unit not in resident:
                continue
            mine = (-decaying.expected_wait(unit, 0.5 * (decaying.chance(unit) + repeat[slot])),
                    resident[unit], self._since[unit])
            if best is None or mine < best_rank:
                best, best_rank = unit, mine
        if best is not None:
            self._ranked_pick[layer] = (passes, best)
        return best

    def _insert(self, unit: Unit, tick: int, since: int) -> None:
        self.resident[unit] = tick
        self._since[unit] = since
        size = self.unit_bytes[unit[0]]
        self.used_bytes += size
        if unit in self._pinned:
            self.pinned_bytes += size
        self._push(unit)

    def _push(self, unit: Unit) -> None:
        entry = (self.eviction_key(unit), self._since[unit], unit)
        self._entry[unit] = entry
        heap = self._heaps.setdefault(self._heap_key(unit), [])
        heapq.heappush(heap, entry)
        if len(heap) > 64 and sum(map(len, self._heaps.values())) > 2 * len(self._entry):
            self._rebuild()

    def _rebuild(self) -> None:
        """Fresh heaps from the resident units alone (a policy or pin change, or too many stale entries)."""
        self._entry = {u: (self.eviction_key(u), self._since[u], u) for u in self.resident}
        self._heaps = {}
        for unit, entry in self._entry.items():
            self._heaps.setdefault(self._heap_key(unit), []).append(entry)
        for heap in self._heaps.values():
            heapq.heapify(heap)


def hot_reserve_bytes(unit_bytes: Mapping[int, int], n_expert_used: int) -> int:
    """Room ``hot`` leaves unpinned: two layers' picks (the layer computing, the next one loading)."""
    return 2 * n_expert_used * max(unit_bytes.values())


__all__ = ["ExpertCache", "Access", "AUTO", "POLICIES", "ORDERS", "hot_reserve_bytes"]
