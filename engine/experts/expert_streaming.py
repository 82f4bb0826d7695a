"""Routing-driven expert loads: read only the experts each layer's router picks.

llama.cpp's eval callback stops at every ``ffn_moe_topk-N`` node; its ask=False call
carries the picked expert ids *before* the layer's expert matmuls are even scheduled,
so the decode thread blocks there (``on_topk``) until the picks are resident. The
ExpertCache decides hits, misses and victims; this class decides when to load and evict:

- load (loader threads, all of a layer's misses in flight at once) and evict (decode thread,
  between layers) are engine/experts/expert_io.py's kernel work: O_DIRECT into our own pages
  swapped into the mapping where the file allows it, else the page cache.
- cold start: one eviction of the whole file right after load (the load's large folios
  straddle expert slices, so per-expert eviction would leave pieces), then the dense
  bytes (attention, norms, router, shared experts, embeddings) are read back and stay.
- speculation (optional): while layer N's experts load, layer N+1's likely experts are
  admitted and loaded too, never evicting one the current layer needs; its accuracy and
  the misses it hid are counted. The guess is layer N+1's router applied to this
  token's router input at layer N (the residual stream changes little from one layer
  to the next; a deepseek2 router's sigmoid + per-expert bias applied as llama.cpp
  does) where the router is F32/F16 and that input was captured, else the
  experts the previous token picked at layer N+1.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shardscope.engine.base import memory_calls
from shardscope.engine.experts.expert_cache import ExpertCache, Unit, hot_reserve_bytes
from shardscope.engine.experts.expert_io import ExpertIO, edge_bytes
from shardscope.engine.experts.routing_trace import TraceRecord
from shardscope.engine.layout.moe_layout import MoeLayout
from shardscope.engine.stream.direct_slots import DirectSlots
from shardscope.engine.stream.residency import ResidencyCounters, ResidencySnapshot
from shardscope.engine.stream.ssd_rate_limiter import SsdRateLimiter

HEAT_WINDOW = 64  # decoded tokens the expert view's heat counts over
# Routing records kept in memory: the window's "this session" cacheability replays the last of
# them (a --trace file keeps them all, on disk). 500,000 grew a 10-minute window session's RSS by
# 60 MiB (15 %) on a 5-layer model at 110 tok/s; 30,000 slotted records are ~6 MiB, the routing of
# the last ~600 tokens of a 48-layer model (docs/decisions.md, issue 32).
MAX_RECORDS = 30_000


@dataclass
class ExpertCounters:
    hits: int = 0  # picked experts already resident (loaded) when their router picked them
    misses: int = 0  # picked experts the decode waited for
    loads: int = 0
    loaded_bytes: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
    residue_bytes: int = 0  # bytes mincore still saw after an eviction (then paged out)
    wait_s: float = 0.0
    spec_issued: int = 0  # experts loaded ahead on a guess
    spec_correct: int = 0  # of those, picked by the layer they were guessed for
    spec_hidden: int = 0  # of those, fully loaded by the time they were picked (a miss avoided)
    dense_loaded_bytes: int = 0
    # By bytes (the hit rates divide these): picked experts' bytes, of those resident with no
    # read for this pick (a guess loaded in time was a read), and resident when picked.
    needed_bytes: int = 0
    hit_bytes: int = 0
    on_time_bytes: int = 0

    def copy(self) -> "ExpertCounters":
        return ExpertCounters(**self.__dict__)


class ExpertStreamer:
    def __init__(self, moe: MoeLayout, mapping: memory_calls.FileMapping, fd: int, *, budget_bytes: int,
                 cache_bytes: int, policy: str, speculation: bool = False, n_loaders: int = 16, trace=None,
                 ssd_mb_s: float = 0.0, slots: DirectSlots | None = None, trunk=None):
        self.moe = moe
        # The trunk's layer streamer (a ResidencyController over its shards, shared=True) where the
        # budget cannot hold the trunk: this streamer drops the file and reads the globals at start,
        # then starts it; its counters add to the weights' (snapshot), its loads are dense loads.
        self.trunk = trunk
        self.mapping = mapping
        self.fd = fd
        self.budget_bytes = budget_bytes
        self.speculation = speculation
        self.trace = trace  # a routing_trace.TraceWriter, or None
        self.unit_bytes = {layer: moe.unit_bytes(layer) for layer in moe.layers}
        # The cache books a unit with the pages its slices may share with neighbours (read with it,
        # see _edge_pages), so what mincore finds resident stays within the budget.
        edge = {layer: edge_bytes(moe, layer) if slots else 0 for layer in moe.layers}
        self.cache = ExpertCache(policy, cache_bytes, {layer: b + edge[layer] for layer, b in self.unit_bytes.items()},
                                 moe.n_expert_used)  # as replay does: decay reads a prompt pass as shares of its tokens
        self.counters = ExpertCounters()
        self._unchecked: set[Unit] = set()  # victims dropped since the last residue check
        self._check_layer = moe.layers[0]  # the residue check runs once a token, at this layer
        # O_DIRECT into our own pages where the file allows it (direct_slots.py says why), else the page cache.
        self.limiter = trunk.limiter if trunk is not None else SsdRateLimiter(ssd_mb_s)  # one emulated disk
        # trunk_ranges: the trunk's shards, streamed beside the experts by self.trunk (engine/stream/residency.py)
        trunk_ranges = [r for shard in trunk.plan.shards for r in shard.ranges] if trunk is not None else ()
        self.io = ExpertIO(moe, mapping, fd, slots, self.limiter, trunk_ranges)
        self.slots = slots  # their books are the sampler's resident-weights reading
        self._dense_resident = sum(hi - lo for lo, hi in self.io.resident_pages)  # fixed for the run
        self.token = 0
        self.in_prompt = True
        self._next_layer = {a: b for a, b in zip(moe.layers, moe.layers[1:])}
        self._lock = threading.Lock()
        self._loads: dict[Unit, Future] = {}
        self._previous: dict[int, tuple[int, ...]] = {}  # layer → last decoded token's picks
        self._guessed: dict[int, set[int]] = {}
        self._routers: dict[int, np.ndarray] = {}
        self._biases: dict[int, np.ndarray] = {}
        self._hidden: tuple[int, np.ndarray] | None = None
        self._error: str | None = None
        self._stopped = False
        self._pool = ThreadPoolExecutor(max(1, n_loaders), thread_name_prefix="shardscope-expert-loader")
        # The window reads the cache from its own thread: cache and load books change under this lock.
        self._state_lock = threading.RLock()
        self.records: deque[TraceRecord] = deque(maxlen=MAX_RECORDS)
        self._row = {layer: i for i, layer in enumerate(moe.layers)}
        self.heat = np.zeros((len(moe.layers), moe.n_expert), dtype=np.int64)
        # The window's map, kept as units come and go: a view copies arrays instead of walking every
        # resident unit (22k at Kimi's shape, ~10 ms of the decode thread's GIL per view; issue #24).
        self._resident_grid = np.zeros(self.heat.shape, dtype=np.uint8)
        self._pinned_grid = np.zeros(self.heat.shape, dtype=np.uint8)
        self._pinned_seen: frozenset = frozenset()
        self._in_flight: set[Unit] = set()
        self._heat_tokens: deque[list[tuple[int, tuple[int, ...]]]] = deque()
        self._picks_token = -1
        self._heat_prompt = True
        self._picks: list[tuple[int, tuple[int, ...]]] = []
        self.current_layer: int | None = None

    @property
    def ssd_mb_s(self) -> float:
        return self.limiter.mb_s

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Cold start: drop the whole file, read the dense bytes back, stream experts from here."""
        self.counters.dense_loaded_bytes += self.io.start()
        if self.trunk is not None:
            self.trunk.start()  # after the file's drop: its cold start finds every shard out and loads its own
        if self.speculation:
            self._routers = self._router_views()

    def _router_views(self) -> dict[int, np.ndarray]:
        """Each layer's router as an array over llama.cpp's mapping (dense: resident, no copy)."""
        views = {}
        for layer, (offset, ggml_type, n_embd) in self.moe.routers.items():
            dtype = {0: np.float32, 1: np.float16}.get(ggml_type)
            n_bytes = self.moe.n_expert * n_embd * (4 if ggml_type == 0 else 2)
            span = self.mapping.clip(offset, offset + n_bytes)
            if dtype is None or span is None or span[1] - span[0] != n_bytes:
                continue
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * n_bytes).from_address(span[0]))
            views[layer] = raw.view(dtype).reshape(self.moe.n_expert, n_embd)
        # deepseek2 picks by sigmoid(logits) + a per-expert bias: a guess must add it too
        self._biases = {}
        for layer, offset in self.moe.router_biases.items():
            span = self.mapping.clip(offset, offset + 4 * self.moe.n_expert)
            if span is not None and span[1] - span[0] == 4 * self.moe.n_expert:
                raw = np.ctypeslib.as_array((ctypes.c_uint8 * (4 * self.moe.n_expert)).from_address(span[0]))
                self._biases[layer] = raw.view(np.float32)
        return views

    def stop(self) -> None:
        """Release a decode thread blocked on loads (Stop pressed)."""
        self._stopped = True
        if self.trunk is not None:
            self.trunk.close_waits()

    def close(self) -> None:
        """Stop the loader threads: a populate after the model is freed fails (ENOMEM)."""
        self._stopped = True
        if self.trunk is not None:
            self.trunk.close()  # its loaders first: the slots they read into close below
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.io.close()

    # ------------------------------------------------------------ live changes (decode thread, between tokens)
    def set_cache_bytes(self, cache_bytes: int, budget_bytes: int) -> None:
        """Grow or shrink the expert cache; a shrink evicts (really) what no longer fits."""
        with self._state_lock:
            self.budget_bytes = budget_bytes
            self.cache.capacity_bytes = int(cache_bytes)
            self._repin()
            self._evict_units(self.cache.make_room(0, protected=set()))

    def set_policy(self, policy: str) -> None:
        with self._state_lock:
            self.cache.policy = policy
            self._repin()

    def set_speculation(self, on: bool) -> None:
        """Guesses use the router input where the run captured it (speculation on at load),
        else the experts the previous token picked at the next layer."""
        with self._state_lock:
            if on and not self._routers:
                self._routers = self._router_views()
            self.speculation = on
            self._guessed.clear()

    def _repin(self) -> None:
        """``hot`` pins by the counts so far (within the current size); other policies pin nothing."""
        self.cache.pinned = frozenset()
        if self.cache.policy == "hot" and not self.in_prompt:
            self.cache.set_hot(dict(self.cache.counts), hot_reserve_bytes(self.unit_bytes, self.moe.n_expert_used))

    def begin_prompt(self) -> None:
        """A new round restarts from the prompt: its pass loads the union of its tokens' picks again."""
        self.in_prompt = True

    # ------------------------------------------------------------ the window's view
    def routing_records(self) -> tuple[TraceRecord, ...]:
        with self._state_lock:
            return tuple(self.records)

    def routing_tail(self, n_tokens: int) -> tuple[tuple[TraceRecord, ...], bool]:
        """The decoded records of the last ``n_tokens`` tokens, in order, and whether earlier
        tokens were left out: what a round's advice
        replays. Walked from the end: copying every record at each round's end (the advice took
        all of them, then kept its last 64 tokens) grew with the session and held the lock the
        decode thread's callbacks wait for."""
        tail: list[TraceRecord] = []
        seen: set[int] = set()
        more = False
        with self._state_lock:
            for record in reversed(self.records):
                if record.prompt:
                    continue
                if record.token not in seen:
                    if len(seen) == n_tokens:
                        more = True
                        break
                    seen.add(record.token)
                tail.append(record)
        tail.reverse()
        return tuple(tail), more

    def view_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int | None]:
        """(states, picked, heat, current row) copied under the lock; codes as widgets/shard_map.py."""
        picked = np.zeros(self.heat.shape, dtype=bool)
        with self._state_lock:
            pinned = self.cache.pinned
            if pinned is not self._pinned_seen:  # pins change at a prompt's end or a policy switch only
                self._pinned_grid[:] = 0
                for layer, expert in pinned:
                    if layer in self._row:
                        self._pinned_grid[self._row[layer], expert] = 1
                self._pinned_seen = pinned
            states = self._resident_grid * (2 + self._pinned_grid)
            with self._lock:
                loading = list(self._in_flight)
            for layer, expert in loading:
                if states[self._row[layer], expert]:
                    states[self._row[layer], expert] = 1
            for layer, experts in self._picks:
                picked[self._row[layer], list(experts)] = True
            heat = self.heat.copy()
            current = self.current_layer
        return states, picked, heat, (self._row[current] if current is not None else None)

    def _note_picks(self, layer: int, picks: tuple[int, ...], prompt: bool) -> None:
        """The current token's picks and the heat over the last HEAT_WINDOW decoded tokens."""
        self.current_layer = layer
        if self.token != self._picks_token:
            if self._picks and self._picks_token >= 0 and not self._heat_prompt:
                self._heat_tokens.append(self._picks)
                while len(self._heat_tokens) > HEAT_WINDOW:
                    for old_layer, old in self._heat_tokens.popleft():
                        row = self.heat[self._row[old_layer]]
                        for expert in old:  # 8 scalar steps: cheaper than building a fancy index
                            row[expert] -= 1
            self._picks, self._picks_token, self._heat_prompt = [], self.token, prompt
        self._picks.append((layer, picks))
        if not prompt:
            row = self.heat[self._row[layer]]
            for expert in picks:
                row[expert] += 1

    @property
    def error(self) -> str | None:
        return self._error or (self.trunk.error if self.trunk is not None else None)

    @property
    def dense_bytes(self) -> int:
        return self.moe.dense_bytes

    # ------------------------------------------------------------ decode side
    def end_prompt(self) -> None:
        """The prompt pass is over: ``hot`` pins what it picked most (replay does the same)."""
        self.in_prompt = False
        self.cache.set_hot(dict(self.cache.counts), hot_reserve_bytes(self.unit_bytes, self.moe.n_expert_used))

    def on_norm(self, layer: int, row: np.ndarray) -> None:
        """This token's router input at ``layer`` (decode thread, before the layer's router)."""
        self._hidden = (layer, row)

    def _guess(self, layer: int, nxt: int) -> tuple[int, ...] | None:
        router = self._routers.get(nxt)
        hidden = self._hidden
        if router is None or hidden is None or hidden[0] != layer or hidden[1].shape[0] != router.shape[1]:
            return self._previous.get(nxt)
        scores = router.astype(np.float32, copy=False) @ hidden[1]
        if self.moe.gating == "sigmoid":  # softmax and a bare sigmoid keep the logits' order
            bias = self._biases.get(nxt)
            if bias is not None:
                scores = 1.0 / (1.0 + np.exp(-scores)) + bias
        k = self.moe.n_expert_used
        return tuple(int(e) for e in np.argsort(-scores)[:k])

    def on_topk(self, layer: int, ids) -> bool:
        """Layer ``layer``'s router picked ``ids`` (n_tokens × k): return once they are resident."""
        if self._error is not None or self._stopped:
            return False
        if layer not in self.unit_bytes:
            return True
        prompt = self.in_prompt
        flat = ids.ravel().tolist()
        picks = tuple(dict.fromkeys(flat))
        weights = Counter(flat) if prompt else None
        started = time.perf_counter()
        with self._state_lock:
            try:
                access = self.cache.access(layer, picks, weights)
            except ValueError as exc:  # the cache minimum is checked up front; this is a bug guard
                self._error = f"{self.moe.path}: expert cache too small ({exc})"
                return False
            guessed = self._guessed.pop(layer, set())
            with self._lock:  # a hit whose load (a guess) is still in flight: waited for below
                late_units = [u for u in access.hits if u in self._in_flight]
            pending = [self._loads[u] for u in late_units if u in self._loads]
            late = len(pending)
            hidden = len(({(layer, e) for e in guessed} & set(access.hits)) - set(late_units))
            # The victims are dropped before the reads go out: reads first put RAM over the
            # budget by one layer's misses while the drops ran (12-71 MiB over 2,048 on a
            # 28.9 GB MoE, outside watch, both I/O paths: docs/benchmarks.md). All of them in
            # one pass: a unit's drops one call at a time were 0.2-0.47 ms a unit on the decode
            # thread, most of an 8 KiB-slice layer's wait (docs/decisions.md).
            self._evict_units(access.evicted, check=False)
            # All the misses' reads in one call where the slots take batches, else one pool job a
            # unit; either way the bookkeeping below runs while the disk works
            batch = self._send(access.misses)
            futures = [self._submit(unit) for unit in access.misses] if batch is None else []
            self.cache.settle()  # auto's shadow directories take the access while the reads run
            if layer == self._check_layer:
                self._check_residue()  # while the reads run
            if self.speculation and not prompt:
                self._speculate(layer, picks)
            self._note_picks(layer, picks, prompt)
        try:
            if batch is not None:
                self._land(batch, access.misses)
            for future in futures + pending:
                future.result()
        except OSError as exc:
            self._error = f"{self.moe.path}: loading experts failed ({exc.strerror or exc})"
            return False
        waited = time.perf_counter() - started
        with self._lock:
            c = self.counters
            c.hits += len(access.hits) - late
            c.misses += len(access.misses) + late
            c.spec_correct += len(guessed & set(picks))
            c.spec_hidden += hidden
            c.wait_s += waited
            unit = self.unit_bytes[layer]
            c.needed_bytes += len(picks) * unit
            c.on_time_bytes += (len(access.hits) - late) * unit
            c.hit_bytes += (len(access.hits) - late - hidden) * unit
        counts = tuple(weights[e] for e in picks) if prompt else ()
        record = TraceRecord(self.token, layer, picks, counts, prompt)
        with self._state_lock:
            self.records.append(record)
        if self.trace is not None:
            self.trace.write(record)
        if not prompt:
            self._previous[layer] = picks
        return not self._stopped

    def _speculate(self, layer: int, picks: tuple[int, ...]) -> None:
        """Load the next layer's likely experts now, while this layer's load and compute run."""
        nxt = self._next_layer.get(layer)
        guess = self._guess(layer, nxt) if nxt is not None else None
        if not guess:
            return
        protected = {(layer, e) for e in picks}
        guessed = set()
        for expert in guess:
            unit = (nxt, expert)
            if unit in self.cache:
                continue
            evicted = self.cache.admit(unit, protected | {(nxt, e) for e in guessed})
            if evicted is None:
                break
            self._evict_units(evicted, check=False)
            self._submit(unit)
            guessed.add(expert)
        self._guessed[nxt] = guessed
        with self._lock:
            self.counters.spec_issued += len(guessed)

    # ------------------------------------------------------------ kernel work
    def _submit(self, unit: Unit) -> Future:
        self._resident_grid[self._row[unit[0]], unit[1]] = 1
        with self._lock:
            self._in_flight.add(unit)
        future = self._pool.submit(self._load_unit, unit)
        self._loads[unit] = future
        return future

    def _send(self, units: list[Unit]):
        """Send the units' reads together (expert_io.py send_units): the batch, or None where the
        slots take none (or the kernel refused it): the pool loads them one by one."""
        batch = self.io.send_units(units)
        if batch is not None:
            with self._lock:
                self._in_flight.update(units)
            for unit in units:
                self._resident_grid[self._row[unit[0]], unit[1]] = 1
        return batch

    def _land(self, batch, units: list[Unit]) -> None:
        try:
            read = batch.wait()
        finally:
            with self._lock:
                self._in_flight.difference_update(units)
        with self._lock:
            self.counters.loads += len(units)
            self.counters.loaded_bytes += read

    def _load_unit(self, unit: Unit) -> None:
        try:
            read = self.io.load_unit(*unit)  # whole pages: what the kernel counts, edge pages included
        finally:
            with self._lock:
                self._in_flight.discard(unit)
        with self._lock:
            self.counters.loads += 1
            self.counters.loaded_bytes += read

    def _evict_units(self, units, check: bool = True) -> None:
        """Drop these units together (one pass of kernel calls, expert_io.py evict_units); ``check``
        False leaves mincore's residue check to the next token's (``_check_residue``)."""
        if not units:
            return
        for unit in units:
            future = self._loads.pop(unit, None)
            if future is not None and not future.done():
                try:
                    future.result()  # a guess still loading: let it land before dropping it
                except OSError:
                    pass
            self._resident_grid[self._row[unit[0]], unit[1]] = 0
        self.io.evict_units(units)
        self._unchecked.update(units)
        with self._lock:
            self.counters.evictions += len(units)
            self.counters.evicted_bytes += sum(self.unit_bytes[u[0]] for u in units)
        if check:
            self._check_residue()

    def _check_residue(self) -> None:
        """mincore over the own pages of the units dropped since the last check and still out (not
        re-admitted, no read of theirs in flight): what it still finds counts as residue. Once a
        token, not once a layer: each call takes the mapping's lock that every read's page pins and
        the trunk's slot swaps take too, and a layer's victims cost as much as a token's."""
        with self._lock:
            units = [u for u in self._unchecked if u not in self.cache.resident and u not in self._in_flight]
        self._unchecked.clear()
        residue = self.io.units_resident_bytes(units) if units else 0
        with self._lock:
            self.counters.residue_bytes += residue

    # ------------------------------------------------------------ readout
    def resident_units(self) -> set[Unit]:
        return set(self.cache.resident)

    def unit_resident_bytes(self, unit: Unit) -> int:
        """mincore over the unit's page-inward ranges: the independent check."""
        return self.io.unit_resident_bytes(*unit)

    def snapshot(self) -> ResidencySnapshot:
        """The residency controller's snapshot shape, so the metrics sampler charts experts too."""
        with self._lock:
            c = self.counters
            # A guess that hid a miss still read the disk for this access: on time, not a cache hit.
            counters = ResidencyCounters(cache_hits=c.hits - c.spec_hidden, cache_misses=c.misses + c.spec_hidden,
                                         on_time=c.hits, stalls=c.misses, needed_bytes=c.needed_bytes,
                                         hit_bytes=c.hit_bytes, on_time_bytes=c.on_time_bytes,
                                         loads=c.loads, loaded_bytes=c.loaded_bytes,
                                         evictions=c.evictions, evicted_bytes=c.evicted_bytes, wait_s=c.wait_s)
        if self.trunk is None:
            return ResidencySnapshot((), counters, self._dense_resident + self.cache.used_bytes, self.budget_bytes,
                                     None, self.io.load_mechanism, self.io.evict_mechanism)
        trunk = self.trunk.snapshot()  # the weights' figures count the trunk's shards beside the experts
        return ResidencySnapshot(trunk.states, counters.plus(trunk.counters),
                                 self._dense_resident + self.cache.used_bytes + self.trunk_resident_bytes(trunk),
                                 self.budget_bytes, trunk.current_layer_pos,
                                 f"{self.io.load_mechanism}; trunk: {trunk.load_mechanism}",
                                 f"{self.io.evict_mechanism}; trunk: {trunk.evict_mechanism}")

    def trunk_resident_bytes(self, trunk_snapshot=None) -> int:
        """The trunk's shard bytes in the books now (loading or resident; 0 when the trunk does not
        stream: then it is all in the dense pages)."""
        if self.trunk is None:
            return 0
        snap = trunk_snapshot or self.trunk.snapshot()
        return snap.resident_bytes - self.trunk.plan.globals_bytes

    def resident_split(self) -> tuple[int, int]:
        """(trunk shard bytes held, expert cache bytes) in the books: the memory chart draws the two
        apart, so a user sees where the budget above the globals went."""
        with self._lock:
            cache = self.cache.used_bytes
        return self.trunk_resident_bytes(), cache

    def snapshot_counters(self) -> ExpertCounters:
        """The expert counters; dense_loaded_bytes includes the trunk's shard loads where it streams."""
        with self._lock:
            counters = self.counters.copy()
        if self.trunk is not None:
            counters.dense_loaded_bytes += self.trunk.snapshot().counters.loaded_bytes
        return counters


__all__ = ["ExpertStreamer", "ExpertCounters"]
