"""The residency controller: keep weights under a budget by streaming shards.

Compute calls ``on_layer`` (from llama.cpp's eval callback) just before a layer's
matrices run. If the layer's shards are resident that is a *hit*; otherwise it is a
*miss* and the decode thread waits while the loader thread brings them in. No disk
work happens on the decode thread (measured here, prefetch issued from it makes
decoding slower): the loader reads shards into the page cache with its own descriptor, a
mapper thread maps them into llama.cpp's mapping, an evictor thread drops what is behind.

Resident weight bytes (globals + shards marked loading/resident) never exceed the
budget: the loader only starts a load when there is room, and makes room by evicting
shards that neither the current layer nor the prefetch window needs.

Policies differ only in what may be evicted. ``lru`` lets every shard compete, which
thrashes on cyclic layer access once the model exceeds the budget (every shard is
evicted just before it is needed again). ``pinned`` keeps a fixed prefix of shards
resident and streams the rest through the prefetch window, so the pinned fraction
are hits on every token.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine import memory_calls
from engine.errors import ShardscopeError
from engine.shard_plan import MIB, ShardPlan

EVICTED, LOADING, RESIDENT, PINNED = 0, 1, 2, 3
CHUNK_BYTES = 2 * MIB  # populate granularity: fine enough for the SSD rate limiter


def require_budget(plan: ShardPlan, budget_mb: float, depth: int) -> int:
    """Budget in bytes, or a refusal that says the minimum (checked before loading)."""
    budget = int(budget_mb * MIB)
    minimum = plan.min_budget_bytes(depth)
    if budget < minimum and budget < plan.host_bytes:
        raise ShardscopeError(
            f"budget {budget_mb:g} MB is below the minimum of {minimum / MIB:.0f} MB for "
            f"{Path(plan.model_path).name} with prefetch depth {depth} (globals "
            f"{plan.globals_bytes / MIB:.0f} MB + largest layer + {depth} prefetched shard(s) "
            f"of up to {plan.max_shard_bytes / MIB:.0f} MB)"
        )
    return budget


MAX_READ_GAP = 1 * MIB
CACHE_LOAD = "sendfile to /dev/null, then MADV_POPULATE_READ"
GUARD_POLL_S = 0.02  # the file guard's promise: checked ≤ 50 ms apart


def read_spans(plan: ShardPlan) -> list[list[tuple[int, int]]]:
    """Per shard, its ranges merged across the small gaps between them, for reading.

    A shard's ranges skip the layer's small tensors (norms stay resident with the
    globals), so reading range by range drains the disk's queue at every norm: reads
    of 2-5 MB ran at 1.3 GB/s here, of 5+ MB at 2.1 GB/s. The gap bytes are resident
    already, so reading across them costs no I/O — unless the gap holds another
    shard's bytes (or GPU-offloaded ones), which must not come in unaccounted: then
    the ranges stay apart.
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


@dataclass
class ResidencyCounters:
    hits: int = 0
    misses: int = 0
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


@dataclass(frozen=True)
class ResidencySnapshot:
    states: tuple[int, ...]
    counters: ResidencyCounters
    resident_bytes: int  # the controller's own accounting (globals + shards)
    budget_bytes: int
    current_layer_pos: int | None
    load_mechanism: str
    evict_mechanism: str


@dataclass
class _Knobs:
    budget_bytes: int
    prefetch_depth: int
    policy: str
    ssd_mb_s: float
    pinned: frozenset = field(default_factory=frozenset)


class ResidencyController:
    def __init__(self, plan: ShardPlan, mapping: memory_calls.FileMapping | None, fd: int | None,
                 budget_mb: float, prefetch_depth: int, policy: str, ssd_mb_s: float = 0.0,
                 guard=None):
        self.plan = plan
        self.mapping = mapping
        self.fd = fd
        self.guard = guard  # ModelFileGuard: polled by the loader, ≤ 50 ms apart
        self._cond = threading.Condition()
        self._state = [RESIDENT] * len(plan.shards)  # llama.cpp's load read everything in
        self._last_use = [0] * len(plan.shards)
        self._tick = 0
        self._current: int | None = None
        self._counters = ResidencyCounters()
        self._stop = False
        self._error: str | None = None
        self._rate_free_at = 0.0
        self.load_mechanism = CACHE_LOAD if mapping else "none (no file mapping found)"
        self.evict_mechanism = "MADV_DONTNEED+FADV_DONTNEED" if mapping else "none (no file mapping found)"
        self._knobs = _Knobs(self._check_budget(budget_mb, prefetch_depth), prefetch_depth, policy, ssd_mb_s)
        self._knobs.pinned = self._choose_pinned(self._knobs)
        self._resident = plan.host_bytes
        self._thread = threading.Thread(target=self._loader, name="shardscope-loader", daemon=True)
        # Eviction on its own thread overlaps the next load instead of idling the disk.
        # The loader counts shards still waiting to leave, so what the kernel holds
        # stays ≤ budget + one shard (see _plan_step).
        self._evictor = threading.Thread(target=self._evict_loop, name="shardscope-evictor", daemon=True)
        self._mapper = threading.Thread(target=self._map_loop, name="shardscope-mapper", daemon=True)
        self._evict_queue: list[int] = []
        self._map_queue: list[int] = []
        self._evict_pending_bytes = 0
        self._reader = self._open_reader(mapping, fd)
        self._read_spans = read_spans(plan)

    # ----------------------------------------------------------------- set-up
    @staticmethod
    def _open_reader(mapping, fd) -> memory_calls.CacheReader | None:
        """The loader's own way to the disk; without one, it reads through llama.cpp's mapping."""
        if mapping is None or fd is None or not memory_calls.IS_LINUX:
            return None
        try:
            return memory_calls.CacheReader(fd)
        except OSError:
            return None

    def _check_budget(self, budget_mb: float, depth: int) -> int:
        return require_budget(self.plan, budget_mb, depth)

    def _choose_pinned(self, knobs: _Knobs) -> frozenset:
        plan = self.plan
        if plan.host_bytes <= knobs.budget_bytes:
            return frozenset(range(len(plan.shards)))  # everything fits: nothing streams
        if knobs.policy != "pinned":
            return frozenset()
        biggest_layer = max(plan.layer_bytes(i) for i in range(len(plan.layers)))
        room = knobs.budget_bytes - plan.globals_bytes - biggest_layer - knobs.prefetch_depth * plan.max_shard_bytes
        pinned, used = [], 0
        for shard in plan.shards:
            if used + shard.n_bytes > room:
                break
            pinned.append(shard.index)
            used += shard.n_bytes
        return frozenset(pinned)

    def start(self) -> None:
        """Cold start: evict every shard that is not pinned, then start the loader."""
        with self._cond:
            victims = [s.index for s in self.plan.shards if s.index not in self._knobs.pinned]
            for index in victims:
                self._mark_evicted(index)
        self._evict_now(victims)
        self._evict_ranges(self.plan.offloaded_ranges)  # in GPU memory: the host copy can go
        self._thread.start()
        self._evictor.start()
        if self._reader is not None:
            self._mapper.start()

    def close_waits(self) -> None:
        """Release a decode thread blocked on a load (Stop pressed mid-layer)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in (self._thread, self._evictor, self._mapper):
            if thread.is_alive():
                thread.join(timeout=5)
        if self._reader is not None and not any(t.is_alive() for t in (self._thread, self._evictor, self._mapper)):
            self._reader.close()
            self._reader = None

    # ----------------------------------------------------------- live knobs
    def set_budget(self, budget_mb: float) -> None:
        with self._cond:
            self._knobs.budget_bytes = self._check_budget(budget_mb, self._knobs.prefetch_depth)
            self._repin()

    def set_prefetch_depth(self, depth: int) -> None:
        with self._cond:
            self._check_budget(self._knobs.budget_bytes / MIB, depth)
            self._knobs.prefetch_depth = depth
            self._repin()

    def set_policy(self, policy: str) -> None:
        with self._cond:
            self._knobs.policy = policy
            self._repin()

    def set_ssd_mb_s(self, ssd_mb_s: float) -> None:
        with self._cond:
            self._knobs.ssd_mb_s = max(0.0, float(ssd_mb_s))

    def _repin(self) -> None:
        self._knobs.pinned = self._choose_pinned(self._knobs)
        self._cond.notify_all()

    @property
    def budget_bytes(self) -> int:
        return self._knobs.budget_bytes

    @property
    def prefetch_depth(self) -> int:
        return self._knobs.prefetch_depth

    @property
    def policy(self) -> str:
        return self._knobs.policy

    @property
    def ssd_mb_s(self) -> float:
        return self._knobs.ssd_mb_s

    @property
    def pinned(self) -> frozenset:
        return self._knobs.pinned

    @property
    def error(self) -> str | None:
        return self._error

    # ---------------------------------------------------------- decode side
    def on_layer(self, layer_pos: int) -> bool:
        """Called on the decode thread just before layer ``layer_pos`` computes.

        Returns False if streaming failed (the caller aborts the graph).
        """
        needed = self.plan.layer_shards[layer_pos]
        with self._cond:
            if self._error is not None or self._stop:
                return False  # abort the graph: file changed, load failed, or Stop pressed
            self._counters.layer_calls += 1
            self._current = layer_pos
            self._tick += 1
            for index in needed:
                self._last_use[index] = self._tick
            if self._knobs.policy == "pinned":
                self._evict_behind(layer_pos)
            missing = [i for i in needed if self._state[i] != RESIDENT]
            self._counters.hits += len(needed) - len(missing)
            self._counters.misses += len(missing)
            self._cond.notify_all()
            if not missing:
                return True
            start = time.perf_counter()
            while not self._stop and self._error is None and any(self._state[i] != RESIDENT for i in needed):
                self._cond.wait(0.05)
            self._counters.wait_s += time.perf_counter() - start
            return self._error is None

    def _evict_behind(self, layer_pos: int) -> None:
        """Pinned policy: the streamed shards of the layer that just finished go now.

        They are not needed again until the next token, so queueing their eviction at
        once (under the lock, the evictor does the work) makes room before the loader
        asks for it — the disk never idles waiting for eviction. LRU keeps its meaning:
        it evicts only when room is needed.
        """
        n_layers = len(self.plan.layer_shards)
        previous = self.plan.layer_shards[(layer_pos - 1) % n_layers]
        front, _ = self._wanted()
        victims = [i for i in previous if self._state[i] == RESIDENT and i not in self._knobs.pinned
                   and i not in front]
        for index in victims:
            self._mark_evicted(index)
        if victims:
            self._evict_queue.extend(victims)
            self._evict_pending_bytes += sum(self.plan.shards[i].n_bytes for i in victims)

    def count_resident_pass(self) -> None:
        """A token computed with no layer hook installed (the model fits the budget).

        Every shard is pinned and resident then, so each layer access of that token
        is a hit; counting them keeps the hit-rate chart honest instead of blank.
        """
        with self._cond:
            n = sum(len(shards) for shards in self.plan.layer_shards)
            self._counters.hits += n
            self._counters.layer_calls += len(self.plan.layer_shards)

    # ---------------------------------------------------------- loader side
    def _wanted(self) -> tuple[list[int], list[int]]:
        """(current layer + prefetch window, most urgent first; pinned shards)."""
        plan, knobs = self.plan, self._knobs
        # Before the first layer runs, the window starts at shard 0 (cold start prefetch).
        current = plan.layer_shards[self._current] if self._current is not None else ()
        order: list[int] = list(current)
        n = len(plan.shards)
        if n and knobs.prefetch_depth > 0:
            start = (current[-1] + 1) if current else 0
            # While a pinned layer computes, the room the budget keeps for the current
            # layer is unused: lend it to the window, or the disk idles through the
            # pinned layers once `depth` shards are in (measured: ~5 % of a token).
            depth = knobs.prefetch_depth + sum(1 for i in current if i in knobs.pinned)
            taken = 0
            for step in range(n):
                index = (start + step) % n
                if index in current:
                    break
                if index in knobs.pinned:
                    continue  # prefetch counts streamed shards: pinned ones need no load
                order.append(index)
                taken += 1
                if taken >= depth:
                    break
        front = list(dict.fromkeys(order))
        return front, [i for i in sorted(knobs.pinned) if i not in front]

    def _victim(self, protected: set[int]) -> int | None:
        candidates = [i for i, st in enumerate(self._state)
                      if st == RESIDENT and i not in protected and i not in self._knobs.pinned]
        if not candidates:
            return None
        return min(candidates, key=lambda i: self._last_use[i])

    def _mark_evicted(self, index: int) -> None:
        if self._state[index] != EVICTED:
            self._state[index] = EVICTED
            self._resident -= self.plan.shards[index].n_bytes
            self._counters.evictions += 1
            self._counters.evicted_bytes += self.plan.shards[index].n_bytes

    def _plan_step(self) -> tuple[list[int], int | None]:
        """Under the lock: pick what to evict and what to load next."""
        knobs = self._knobs
        front, pins = self._wanted()
        desired = front + pins
        protected = set(front)
        victims: list[int] = []
        while self._resident > knobs.budget_bytes:  # budget shrank: evict down first
            victim = self._victim(protected)
            if victim is None:
                break
            self._mark_evicted(victim)
            victims.append(victim)
        target = next((i for i in desired if self._state[i] == EVICTED), None)
        if target is None:
            return victims, None
        need = self.plan.shards[target].n_bytes
        while self._resident + need > knobs.budget_bytes:
            victim = self._victim(protected | {target})
            if victim is None:
                break
            self._mark_evicted(victim)
            victims.append(victim)
        urgent = self._current is not None and target in self.plan.layer_shards[self._current]
        if self._resident + need > knobs.budget_bytes and not urgent:
            return victims, None  # no room yet: wait for compute to move on
        # What the kernel holds is the accounting plus shards still waiting to leave;
        # that may exceed the budget by at most one shard.
        pending = self._evict_pending_bytes + sum(self.plan.shards[i].n_bytes for i in victims)
        if self._resident + need + pending > knobs.budget_bytes + self.plan.max_shard_bytes:
            return victims, None  # let the evictor catch up first
        self._state[target] = LOADING
        self._resident += need
        return victims, target

    def _fail(self, exc: OSError) -> None:
        with self._cond:
            self._error = f"{self.plan.model_path}: streaming failed ({exc.strerror or exc})"
            self._cond.notify_all()

    def _loader(self) -> None:
        checked = 0.0
        while True:
            # Every 20 ms, not every shard: each check is two syscalls, and getting the
            # GIL back after them cost the loader ~13 ms per token (3 % of the disk).
            problem = None
            if self.guard and time.perf_counter() - checked >= GUARD_POLL_S:
                problem, checked = self.guard.problem(), time.perf_counter()
            with self._cond:
                if problem and not self._error:
                    self._error = problem
                    self._cond.notify_all()
                if self._stop or self._error:
                    return
                victims, target = self._plan_step()
                if victims:
                    self._evict_queue.extend(victims)
                    self._evict_pending_bytes += sum(self.plan.shards[i].n_bytes for i in victims)
                    self._cond.notify_all()
                if target is None:
                    if not victims:
                        self._cond.wait(0.05)
                    continue
            try:
                self._load_now(target)
            except OSError as exc:
                self._fail(exc)
                return
            with self._cond:
                if self._reader is not None:
                    self._map_queue.append(target)  # the mapper maps it: the next read starts now
                else:
                    self._state[target] = RESIDENT
                self._cond.notify_all()

    def _evict_loop(self) -> None:
        """Evict one shard at a time; each one's bytes count as gone as soon as it is."""
        self._work_loop(self._evict_queue, self._evict_one)

    def _map_loop(self) -> None:
        """Map freshly read shards into llama.cpp's mapping while the loader reads on.

        Mapping on the loader thread took ~7 % of its time; on the evictor it queued
        behind evictions while compute waited for the mapped shard.
        """
        self._work_loop(self._map_queue, self._map_one)

    def _work_loop(self, queue: list[int], work) -> None:
        while True:
            with self._cond:
                while not queue and not self._stop:
                    self._cond.wait(0.1)
                if self._stop:
                    return
                index = queue.pop(0)
            try:
                work(index)
            except OSError as exc:
                self._fail(exc)
                return

    def _evict_one(self, index: int) -> None:
        self._evict_now([index])
        with self._cond:
            self._evict_pending_bytes -= self.plan.shards[index].n_bytes
            self._cond.notify_all()

    def _map_one(self, index: int) -> None:
        self._map_now(index)
        with self._cond:
            self._state[index] = RESIDENT
            self._cond.notify_all()

    def _evict_now(self, victims: list[int]) -> None:
        if not self.mapping or not victims:
            return
        started = time.perf_counter()
        for index in victims:
            self._evict_ranges(self.plan.shards[index].ranges)
        with self._cond:
            self._counters.evict_s += time.perf_counter() - started

    def _evict_ranges(self, ranges) -> None:
        if not self.mapping:
            return
        for start, end in ranges:
            span = self.mapping.clip(start, end)
            if span:
                self.evict_mechanism = memory_calls.evict(span[0], span[1], self.fd, start)

    def _load_now(self, index: int) -> None:
        shard = self.plan.shards[index]
        started = time.perf_counter()
        if self.mapping:
            # Emulating a disk: exact ranges, so the rate limiter charges shard bytes only.
            ranges = shard.ranges if self._knobs.ssd_mb_s > 0 else self._read_spans[index]
            for start, end in ranges:
                span = self.mapping.clip(start, end)
                if not span:
                    continue
                # Whole ranges when not emulating: fewer, larger reads run at full disk speed.
                chunk = CHUNK_BYTES if self._knobs.ssd_mb_s > 0 else span[1] - span[0]
                for lo in range(span[0], span[1], chunk):
                    hi = min(lo + chunk, span[1])
                    self._throttle(hi - lo)
                    self.load_mechanism = self._read_in(lo, hi)
        with self._cond:
            self._counters.loads += 1
            self._counters.loaded_bytes += shard.n_bytes
            self._counters.load_s += time.perf_counter() - started

    def _read_in(self, lo: int, hi: int) -> str:
        """Disk → page cache with the loader's own reader; without one, fault it in."""
        if self._reader is None:
            return memory_calls.populate(lo, hi)
        self._reader.read(lo - self.mapping.base, hi - self.mapping.base)
        return CACHE_LOAD

    def _map_now(self, index: int) -> None:
        """Map a read shard into llama.cpp's mapping: page cache hits, no disk I/O."""
        for start, end in self._read_spans[index]:
            span = self.mapping.clip(start, end)
            if span:
                memory_calls.populate(span[0], span[1])

    def _throttle(self, n_bytes: int) -> None:
        """Emulate a slower SSD: no chunk starts before the emulated disk is free.

        Idle time is never banked (a real disk cannot read ahead of its requests), so
        after a pause the next load starts at the emulated rate, not in a burst. The
        price: a late wake-up on a busy CPU is lost, a few % below the set rate.
        """
        rate = self._knobs.ssd_mb_s
        if rate <= 0:
            return
        now = time.perf_counter()
        begin = max(now, self._rate_free_at)
        self._rate_free_at = begin + n_bytes / (rate * 1e6)
        delay = begin - now
        if delay > 0:
            time.sleep(delay)

    # -------------------------------------------------------------- readout
    def snapshot(self) -> ResidencySnapshot:
        with self._cond:
            pinned = self._knobs.pinned
            states = tuple(PINNED if (i in pinned and st == RESIDENT) else st
                           for i, st in enumerate(self._state))
            return ResidencySnapshot(states, self._counters.copy(), self._resident,
                                     self._knobs.budget_bytes, self._current,
                                     self.load_mechanism, self.evict_mechanism)
