"""What the residency controller decides, apart from how it does it: no threads, no I/O.

The controller (engine/stream/residency.py) holds a ``ResidencyBook`` under its lock and asks
it every question — which shards to pin, what compute needs, what to load next, what
to evict for it — then does the disk and memory work on its threads. Keeping the
decisions here lets tests drive thousands of simulated layers in milliseconds.

Every access of a layer to a shard is counted twice (names shared with the metrics),
in accesses and in the layer's bytes held by that shard (``needed_bytes``):
``cache_hits``/``cache_misses`` (``hit_bytes``) — the bytes stayed resident since
*this layer's* last use of them, or were read from the disk since (prefetched or not;
a shard of two layers read once for the first one is a read for the second one too);
``on_time``/``stalls`` (``on_time_bytes``) — resident when compute arrived, or compute
waited. The hit rate is hit_bytes ÷ needed_bytes: ≈ 1 − kernel-read ÷ needed bytes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.layout.budget_minimum import dense_minimum
from shardscope.engine.layout.shard_plan import ShardPlan

EVICTED, LOADING, RESIDENT, PINNED = 0, 1, 2, 3
MAX_READ_GAP = 1 * MIB


def require_budget(plan: ShardPlan, budget_mb: float, depth: int) -> int:
    """Budget in bytes, or a refusal that says the minimum (checked before loading): the one
    minimum of engine/layout/budget_minimum.py, in the whole MiB the advice gives."""
    budget = int(budget_mb * MIB)
    minimum = dense_minimum(plan, depth)
    if budget < minimum.bytes and budget < plan.host_bytes:
        raise KnobRefusal(  # the CLI names --budget-mb, the window the Memory budget slider
            f"budget {budget_mb:g} MiB is below the minimum for {Path(plan.model_path).name} with prefetch depth "
            f"{depth}; the minimum is {minimum.mb} MiB ({minimum.parts()})", "budget_mb", minimum.mb)
    return budget


def read_spans(plan: ShardPlan) -> list[list[tuple[int, int]]]:
    """Per shard, its ranges merged across the small gaps between them, for reading.

    A shard's ranges skip the layer's small tensors (resident with the globals), so
    reading range by range drains the disk's queue at every norm. The gap bytes are
    resident already — unless the gap holds another shard's bytes (or GPU-offloaded
    ones), which must not come in unaccounted: then the ranges stay apart.
    """
    starts = sorted([start for shard in plan.shards for start, _ in shard.ranges]
                    + [start for start, _ in plan.offloaded_ranges])
    spans: list[list[tuple[int, int]]] = []
    for shard in plan.shards:
        merged: list[tuple[int, int]] = []
        for start, end in sorted(shard.ranges):
            if merged and start - merged[-1][1] <= MAX_READ_GAP:
                first = bisect.bisect_left(starts, merged[-1][1])
                if first >= len(starts) or starts[first] >= start:
                    merged[-1] = (merged[-1][0], end)
                    continue
            merged.append((start, end))
        spans.append(merged)
    return spans


def choose_pinned(plan: ShardPlan, budget_bytes: int, depth: int, policy: str) -> frozenset:
    """Shards that never leave: all of them when the model fits, a prefix under ``pinned``."""
    if plan.host_bytes <= budget_bytes:
        return frozenset(range(len(plan.shards)))  # everything fits: nothing streams
    if policy != "pinned" or not plan.shards:
        return frozenset()
    biggest_layer = max(plan.layer_bytes(i) for i in range(len(plan.layers)))
    room = budget_bytes - plan.globals_bytes - biggest_layer - depth * plan.max_shard_bytes
    pinned, used = [], 0
    for shard in plan.shards:
        if used + shard.n_bytes > room:
            break
        pinned.append(shard.index)
        used += shard.n_bytes
    return frozenset(pinned)


def wanted(plan: ShardPlan, current: int | None, depth: int, pinned: frozenset) -> tuple[list[int], list[int]]:
    """(current layer's shards + the prefetch window, most urgent first; the other pinned shards)."""
    # Before the first layer runs, the window starts at shard 0 (cold start prefetch).
    now = plan.layer_shards[current] if current is not None else ()
    order: list[int] = list(now)
    n = len(plan.shards)
    if n and depth > 0:
        start = (now[-1] + 1) if now else 0
        # While a pinned layer computes, the room kept for the current layer is unused:
        # lend it to the window, or the disk idles through the pinned layers.
        window = depth + sum(1 for i in now if i in pinned)
        taken = 0
        for step in range(n):
            index = (start + step) % n
            if index in now:
                break
            if index in pinned:
                continue  # prefetch counts streamed shards: pinned ones need no load
            order.append(index)
            taken += 1
            if taken >= window:
                break
    front = list(dict.fromkeys(order))
    return front, [i for i in sorted(pinned) if i not in front]


@dataclass
class ResidencyCounters:
    cache_hits: int = 0  # no disk read for this access: resident since the last use
    cache_misses: int = 0  # read from the disk for this access, prefetched or not
    on_time: int = 0  # resident when compute arrived
    stalls: int = 0  # compute waited for the shard
    needed_bytes: int = 0  # bytes the accessing layers needed of their shards
    hit_bytes: int = 0  # of those, resident with no read since that layer's last use
    on_time_bytes: int = 0  # of those, resident when compute arrived
    loads: int = 0
    loaded_bytes: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
    wait_s: float = 0.0
    load_s: float = 0.0
    evict_s: float = 0.0
    layer_calls: int = 0

    def copy(self) -> "ResidencyCounters":
        return ResidencyCounters(**self.__dict__)

    def plus(self, other: "ResidencyCounters") -> "ResidencyCounters":
        """Two streamers' counters as one (the trunk's shards and the experts under one budget)."""
        return ResidencyCounters(**{k: v + getattr(other, k) for k, v in self.__dict__.items()})

    def since(self, old: "ResidencyCounters") -> "ResidencyCounters":
        """What was counted after ``old`` was read (a round's share of the running totals)."""
        return ResidencyCounters(**{k: v - getattr(old, k) for k, v in self.__dict__.items()})


class ResidencyBook:
    """Shard states and the bytes they hold, as the controller's threads move them.

    ``accounted`` is globals + shards loading or resident; ``evict_pending`` is what
    was given up but not yet dropped by the evictor. What the kernel holds is at most
    their sum, which ``next_step`` keeps ≤ budget: a load waits for the evictor.
    """

    def __init__(self, plan: ShardPlan, budget_bytes: int, depth: int, policy: str):
        self.plan = plan
        self.budget_bytes = budget_bytes
        self.depth = depth
        self.policy = policy
        self.pinned = choose_pinned(plan, budget_bytes, depth, policy)
        n = len(plan.shards)
        self.state = [RESIDENT] * n  # until ``cold_start`` says what is really resident
        self.last_use = [0] * n
        self.reads = [0] * n  # disk reads started per shard
        # Per (layer position, shard): the reads that layer's accesses have accounted for.
        self.reads_used: dict[tuple[int, int], int] = {}
        self.tick = 0
        self.current: int | None = None
        self.accounted = plan.host_bytes
        self.leaving: set[int] = set()  # given up, not yet dropped by the evictor
        self.counters = ResidencyCounters()
        self._kernel_resident: list[bool] | None = None

    # ------------------------------------------------------------- knobs
    def set_knobs(self, budget_bytes: int | None = None, depth: int | None = None,
                  policy: str | None = None) -> None:
        if budget_bytes is not None:
            self.budget_bytes = budget_bytes
        if depth is not None:
            self.depth = depth
        if policy is not None:
            self.policy = policy
        self.pinned = choose_pinned(self.plan, self.budget_bytes, self.depth, self.policy)

    # ------------------------------------------------------------ start
    def cold_start(self, resident: Sequence[bool] | None = None) -> list[int]:
        """Shards to evict now: every unpinned one, and pinned ones not really resident.

        ``resident`` is what mincore found after llama.cpp's load (None: assume its
        load read everything in). A pinned shard found missing is evicted too, so the
        loader reads it and counts that read, instead of compute faulting it in unseen.
        """
        victims = [i for i in range(len(self.state))
                   if i not in self.pinned or (resident is not None and not resident[i])]
        for index in victims:
            self._mark_evicted(index)
        self._kernel_resident = list(resident) if resident is not None else None
        return victims

    # ------------------------------------------------------------ decode side
    def access(self, layer_pos: int) -> list[int]:
        """Compute is about to run layer ``layer_pos``: count it; return shards not yet resident."""
        needed = self.plan.layer_shards[layer_pos]
        c = self.counters
        c.layer_calls += 1
        self.current = layer_pos
        self.tick += 1
        missing = []
        layer = self.plan.layers[layer_pos]
        for index in needed:
            self.last_use[index] = self.tick
            n_bytes = self.plan.shards[index].bytes_of_layer(layer)
            resident = self.state[index] == RESIDENT
            # EVICTED now: the read that will bring it in is this access's.
            pending = 1 if self.state[index] == EVICTED else 0
            key = (layer_pos, index)
            c.needed_bytes += n_bytes
            if resident and self.reads[index] == self.reads_used.get(key, 0):
                c.cache_hits += 1
                c.hit_bytes += n_bytes
            else:
                c.cache_misses += 1
            self.reads_used[key] = self.reads[index] + pending
            if resident:
                c.on_time += 1
                c.on_time_bytes += n_bytes
            else:
                c.stalls += 1
                missing.append(index)
        return missing

    def behind(self, layer_pos: int) -> list[int]:
        """Pinned policy: the streamed shards of the layer that just finished, to evict now.

        They are not needed again until the next token, so giving them up at once makes
        room before the loader asks for it. ``lru`` evicts only when room is needed.
        """
        if self.policy != "pinned":
            return []
        previous = self.plan.layer_shards[(layer_pos - 1) % len(self.plan.layer_shards)]
        front, _ = self.wanted()
        victims = [i for i in previous
                   if self.state[i] == RESIDENT and i not in self.pinned and i not in front]
        for index in victims:
            self._mark_evicted(index)
        self.leaving.update(victims)
        return victims

    def resident_pass(self, resident: Sequence[bool] | None) -> None:
        """A token computed with no layer hook (the model fits): count it from mincore.

        ``resident`` is each shard's residency now, measured; a shard resident now and
        at the previous check was not read for this token (a hit, on time); otherwise
        compute faulted it in from the disk (a miss, a stall). None: nothing measured,
        nothing counted — the rates then read "n/a" rather than an assumed 100 %.
        """
        if resident is None:
            return
        before = self._kernel_resident or [False] * len(resident)
        c = self.counters
        for layer, needed in zip(self.plan.layers, self.plan.layer_shards):
            c.layer_calls += 1
            for index in needed:
                kept = resident[index] and before[index]
                n_bytes = self.plan.shards[index].bytes_of_layer(layer)
                c.needed_bytes += n_bytes
                c.hit_bytes += n_bytes * kept
                c.on_time_bytes += n_bytes * kept
                c.cache_hits += kept
                c.cache_misses += not kept
                c.on_time += kept
                c.stalls += not kept
        self._kernel_resident = list(resident)

    # ------------------------------------------------------------ loader side
    def wanted(self) -> tuple[list[int], list[int]]:
        return wanted(self.plan, self.current, self.depth, self.pinned)

    def _victim(self, protected: set[int]) -> int | None:
        candidates = [i for i, st in enumerate(self.state)
                      if st == RESIDENT and i not in protected and i not in self.pinned]
        if not candidates:
            return None
        return min(candidates, key=lambda i: self.last_use[i])

    def _mark_evicted(self, index: int) -> None:
        if self.state[index] != EVICTED:
            self.state[index] = EVICTED
            self.accounted -= self.plan.shards[index].n_bytes
            self.counters.evictions += 1
            self.counters.evicted_bytes += self.plan.shards[index].n_bytes

    def next_step(self) -> tuple[list[int], int | None]:
        """(shards to evict, shard to load next or None): evictions always come first.

        A load starts only when it fits the budget next to what is accounted, and when
        the kernel — accounted + still waiting to leave — stays ≤ budget with it.
        """
        budget = self.budget_bytes
        front, pins = self.wanted()
        protected = set(front)
        victims: list[int] = []
        while self.accounted > budget:  # budget shrank: evict down first
            victim = self._victim(protected)
            if victim is None:
                break
            self._mark_evicted(victim)
            victims.append(victim)
        # A shard still waiting to leave is not loaded again: the evictor would drop it after.
        target = next((i for i in front + pins if self.state[i] == EVICTED and i not in self.leaving), None)
        if target is not None:
            need = self.plan.shards[target].n_bytes
            while self.accounted + need > budget:
                victim = self._victim(protected | {target})
                if victim is None:
                    break
                self._mark_evicted(victim)
                victims.append(victim)
        self.leaving.update(victims)
        if target is None:
            return victims, None
        urgent = self.current is not None and target in self.plan.layer_shards[self.current]
        if self.accounted + need > budget and not urgent:
            return victims, None  # no room yet: wait for compute to move on
        # Let the evictor catch up first: a load beside shards still leaving put the kernel up to
        # a shard over the budget, and a trunk shares its budget with the expert cache, which
        # has no shard of slack to lend (docs/decisions.md).
        pending = self.evict_pending
        if pending and self.accounted + need + pending > budget:
            return victims, None
        self.state[target] = LOADING
        self.accounted += need
        self.reads[target] += 1
        return victims, target

    def loaded(self, index: int) -> None:
        """The shard's bytes are in llama.cpp's mapping: compute may use it."""
        self.state[index] = RESIDENT

    def evicted(self, index: int) -> None:
        """The evictor dropped the shard: its bytes no longer wait to leave."""
        self.leaving.discard(index)

    @property
    def evict_pending(self) -> int:
        return sum(self.plan.shards[i].n_bytes for i in self.leaving)

    def states(self) -> tuple[int, ...]:
        """Shard states for display: resident pinned shards read PINNED."""
        return tuple(PINNED if (i in self.pinned and st == RESIDENT) else st
                     for i, st in enumerate(self.state))
