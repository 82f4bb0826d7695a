"""The residency controller: keep weights under a budget by streaming shards.

Compute calls ``on_layer`` (from llama.cpp's eval callback) just before a layer's
matrices run and waits there until the layer's shards are resident. No disk work
happens on the decode thread (measured here, prefetch issued from it makes decoding
slower): the loader reads shards into the page cache with its own descriptor, a
mapper thread maps them into llama.cpp's mapping, an evictor thread drops what is
given up. What to load, what to evict and what counts as a hit is decided by
``ResidencyBook`` (engine/stream/residency_decisions.py); this module only moves bytes.

Policies differ only in what may be evicted: ``lru`` lets every shard compete (it
thrashes on cyclic layer access once the model exceeds the budget), ``pinned`` keeps
a fixed prefix resident and streams the rest through the prefetch window.
"""

from __future__ import annotations

import bisect
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.shard_plan import ShardPlan
from shardscope.engine.measure.residency_reader import ExactReader
from shardscope.engine.stream.direct_slots import DirectSlots
from shardscope.engine.stream.portable_slots import DROP as PORTABLE_DROP
from shardscope.engine.stream.residency_decisions import (  # noqa: F401  (re-exported: the engine's one import)
    EVICTED,
    LOADING,
    PINNED,
    RESIDENT,
    ResidencyBook,
    ResidencyCounters,
    read_spans,
    require_budget,
)
from shardscope.engine.stream.ssd_rate_limiter import SsdRateLimiter

CHUNK_BYTES = 2 * MIB  # read granularity while emulating a disk: fine enough for the rate limiter
DIRECT_DROP = "file mapped back over the shard (MAP_FIXED), the pages recycled for the next load"
CACHE_LOAD = "FADV_WILLNEED+sendfile to /dev/null (no readahead), then MADV_POPULATE_READ"
READS_IN_FLIGHT = 2  # shards whose reads are queued at the disk at once (each in the books first)
# Own slots: a shard's ranges read side by side. One after another kept one request at the disk:
# an MoE trunk's 1 MiB shards of small tensors loaded in 7.6 ms (137 MB/s, device host), the
# trunk's wait then most of a token's once the experts read in place (docs/decisions.md).
RANGE_READERS = 8


@dataclass(frozen=True)
class ResidencySnapshot:
    states: tuple[int, ...]
    counters: ResidencyCounters
    resident_bytes: int  # the controller's own accounting (globals + shards)
    budget_bytes: int
    current_layer_pos: int | None
    load_mechanism: str
    evict_mechanism: str


class ResidencyController:
    def __init__(self, plan: ShardPlan, mapping: memory_calls.FileMapping | None, fd: int | None,
                 budget_mb: float, prefetch_depth: int, policy: str, ssd_mb_s: float = 0.0,
                 slots: DirectSlots | None = None, shared: bool = False):
        self.plan = plan
        # shared: the plan is an MoE file's trunk and the expert streamer shares file and slots; it
        # drops the file at start, reads what no shard holds and closes the slots (engine/experts/expert_streaming.py)
        self.shared = shared
        self.mapping = mapping
        self.fd = fd
        self._cond = threading.Condition()
        self._book = ResidencyBook(plan, require_budget(plan, budget_mb, prefetch_depth), prefetch_depth, policy)
        self._counters = self._book.counters
        self._stop = False
        self._error: str | None = None
        self._limiter = SsdRateLimiter(ssd_mb_s)
        self.load_mechanism = CACHE_LOAD if mapping else "none (no file mapping found)"
        self.evict_mechanism = "MADV_DONTNEED+FADV_DONTNEED" if mapping else "none (no file mapping found)"
        self._thread = threading.Thread(target=self._loader, name="shardscope-loader", daemon=True)
        # Eviction on its own thread overlaps the next load instead of idling the disk;
        # the book counts shards still waiting to leave, and a load that would pass the budget
        # beside them waits for their drops, so what the kernel holds stays ≤ budget.
        self._evictor = threading.Thread(target=self._evict_loop, name="shardscope-evictor", daemon=True)
        self._mapper = threading.Thread(target=self._map_loop, name="shardscope-mapper", daemon=True)
        self._evict_queue: list[int] = []
        self._map_queue: list[int] = []
        # Own slots (a model mapped lazily, O_DIRECT possible): shards are read into our own pages by
        # exact range, everything else once at start; no page cache, no mapper (direct_slots.py).
        self.slots = slots
        self._ranges = ThreadPoolExecutor(RANGE_READERS, thread_name_prefix="shardscope-range") if slots else None
        self._reader = None if slots else self._open_reader(mapping, fd)
        self._read_spans = read_spans(plan)
        if slots:  # mremap (direct_slots.py) or portable (portable_slots.py): the same surface
            self.load_mechanism = slots.mechanism
            self.evict_mechanism = DIRECT_DROP if slots.recycles else PORTABLE_DROP

    # ----------------------------------------------------------------- set-up
    @staticmethod
    def _open_reader(mapping, fd) -> ExactReader | None:
        """The loader's own way to the disk; without one, it reads through llama.cpp's mapping."""
        if mapping is None or fd is None:
            return None
        try:
            return ExactReader(fd, mapping.path)  # OSError where fadvise is missing (macOS)
        except OSError:
            return None

    def shard_residency(self) -> list[bool] | None:
        """Per shard, whether mincore finds every page of it in memory (None: no mapping).

        One mincore over the whole mapping, then each range looked up in its resident
        runs: this runs once per token on the decode thread while the model fits.
        """
        if not self.mapping:
            return None
        runs = memory_calls.resident_runs(self.mapping.start, self.mapping.end)
        run_starts = [lo for lo, _ in runs]

        def covered(lo: int, hi: int) -> bool:
            k = bisect.bisect_right(run_starts, lo) - 1
            return k >= 0 and runs[k][1] >= hi

        found = []
        for shard in self.plan.shards:
            spans = [self.mapping.clip(start, end) for start, end in shard.ranges]
            found.append(all(covered(*span) for span in spans if span))
        return found

    def start(self) -> None:
        """Cold start: measure what llama.cpp's load left resident, evict the rest, start the threads."""
        if self.slots and not self.shared:
            # The page cache may hold the file from an earlier run: drop it, or mincore counts it here.
            memory_calls.evict(self.mapping.start, self.mapping.end, self.fd, self.mapping.file_offset)
            self._read_always_resident()
        resident = self.shard_residency()
        with self._cond:
            victims = self._book.cold_start(resident)
        self._evict_now(victims)
        self._evict_ranges(self.plan.offloaded_ranges)  # in GPU memory: the host copy can go
        self._thread.start()
        self._evictor.start()
        if self._reader is not None:
            self._mapper.start()

    def _read_always_resident(self) -> None:
        """Own slots: the bytes no shard streams (globals, norms, the gaps between ranges) are read
        once, by O_DIRECT, and stay; a lazily mapped model would otherwise fault them in through
        the page cache, read-around and all."""
        m = self.mapping
        streamed = sorted([r for shard in self.plan.shards for r in shard.ranges] + list(self.plan.offloaded_ranges))
        position = m.file_offset
        file_end = m.file_offset + (m.end - m.start)
        for start, end in streamed + [(file_end, file_end)]:
            if start > position:
                lo, hi = memory_calls.page_outward(position, start)
                self.slots.load(lo, min(hi, file_end))
            position = max(position, end)

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
        if self._ranges is not None and not self._thread.is_alive():
            self._ranges.shutdown(wait=True)
        if self.slots is not None and not any(t.is_alive() for t in (self._thread, self._evictor)):
            if not self.shared:
                self.slots.close()
            self.slots = None

    # ----------------------------------------------------------- live knobs
    def set_budget(self, budget_mb: float) -> None:
        with self._cond:
            self._book.set_knobs(budget_bytes=require_budget(self.plan, budget_mb, self._book.depth))
            self._cond.notify_all()

    def set_prefetch_depth(self, depth: int) -> None:
        with self._cond:
            require_budget(self.plan, self._book.budget_bytes / MIB, depth)
            self._book.set_knobs(depth=depth)
            self._cond.notify_all()

    def set_policy(self, policy: str) -> None:
        with self._cond:
            self._book.set_knobs(policy=policy)
            self._cond.notify_all()

    def set_ssd_mb_s(self, ssd_mb_s: float) -> None:
        self._limiter.mb_s = ssd_mb_s

    @property
    def budget_bytes(self) -> int:
        return self._book.budget_bytes

    @property
    def prefetch_depth(self) -> int:
        return self._book.depth

    @property
    def moving_bytes(self) -> int:
        """The most shard bytes that can be arriving at once: the prefetch window and the layer computing."""
        return (self._book.depth + 1) * self.plan.max_shard_bytes

    @property
    def policy(self) -> str:
        return self._book.policy

    @property
    def ssd_mb_s(self) -> float:
        return self._limiter.mb_s

    @property
    def limiter(self) -> SsdRateLimiter:
        """The emulated disk; an expert streamer beside this one (shared) paces its reads on it too."""
        return self._limiter

    @property
    def pinned(self) -> frozenset:
        return self._book.pinned

    @property
    def error(self) -> str | None:
        return self._error

    # ---------------------------------------------------------- decode side
    def on_layer(self, layer_pos: int) -> bool:
        """Called on the decode thread just before layer ``layer_pos`` computes.

        Returns False if streaming failed (the caller aborts the graph).
        """
        book = self._book
        with self._cond:
            if self._error is not None or self._stop:
                return False  # abort the graph: file changed, load failed, or Stop pressed
            missing = book.access(layer_pos)
            self._queue_evictions(book.behind(layer_pos))
            self._cond.notify_all()
            if not missing:
                return True
            start = time.perf_counter()
            while not self._stop and self._error is None and any(book.state[i] != RESIDENT for i in missing):
                self._cond.wait(0.05)
            self._counters.wait_s += time.perf_counter() - start
            return self._error is None

    def count_resident_pass(self) -> None:
        """A token computed with no layer hook installed (the model fits the budget).

        Counted from mincore (what is resident now and was at the last check), not
        assumed; without a mapping nothing is counted and the rates read n/a.
        """
        resident = self.shard_residency()
        with self._cond:
            self._book.resident_pass(resident)

    # ---------------------------------------------------------- loader side
    def _queue_evictions(self, victims: list[int]) -> None:
        """Under the lock: hand shards the book gave up to the evictor."""
        if victims:
            self._evict_queue.extend(victims)
            self._cond.notify_all()

    def _fail(self, exc: OSError) -> None:
        with self._cond:
            self._error = f"{self.plan.model_path}: streaming failed ({exc.strerror or exc})"
            self._cond.notify_all()

    def _loader(self) -> None:
        # The model file's guard is polled by the run (engine/stream/run_skeleton.py), which
        # halts this loader through close_waits when the file changes.
        queued: list[int] = []  # shards in the books as LOADING, reads asked for, oldest first
        while True:
            with self._cond:
                if self._stop or self._error:
                    return
                # With readahead off, the next shard's reads queued while this one
                # completes are what keeps the disk busy between shards; both are in
                # the books (LOADING) before any byte is asked for. While emulating a
                # disk the rate limiter still paces when each shard counts as read.
                depth = 1 if self._reader is None else READS_IN_FLIGHT
                new: list[int] = []
                evicted_any = False
                while len(queued) < depth:
                    victims, target = self._book.next_step()
                    self._queue_evictions(victims)
                    evicted_any |= bool(victims)
                    if target is None:
                        break
                    queued.append(target)
                    new.append(target)
                if not queued:
                    if not evicted_any:
                        self._cond.wait(0.05)
                    continue
            target = queued.pop(0)
            try:
                for index in new:
                    self._ask(index)
                self._load_now(target)
            except OSError as exc:
                self._fail(exc)
                return
            with self._cond:
                if self._reader is not None:
                    self._map_queue.append(target)  # the mapper maps it: the next read starts now
                else:
                    self._book.loaded(target)
                self._cond.notify_all()

    def _evict_loop(self) -> None:
        """Evict one shard at a time; each one's bytes count as gone as soon as it is."""
        self._work_loop(self._evict_queue, self._evict_one)

    def _map_loop(self) -> None:
        """Map freshly read shards into llama.cpp's mapping while the loader reads on.

        On the loader thread mapping delayed the next read; on the evictor it queued
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
            self._book.evicted(index)
            self._cond.notify_all()

    def _map_one(self, index: int) -> None:
        self._map_now(index)
        with self._cond:
            self._book.loaded(index)
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
            if span and self.slots:
                self.slots.drop(start, end)
            elif span:
                self.evict_mechanism = memory_calls.evict(span[0], span[1], self.fd, start)

    def _ask(self, index: int) -> None:
        """Queue a shard's reads at the disk without waiting.

        Also while emulating a slower disk: the real read then hides behind the
        emulated one instead of adding its latency to every chunk.
        """
        if self._reader is not None:
            for start, end in self._read_spans[index]:
                self._reader.ask(start, end)

    def _load_now(self, index: int) -> None:
        """Wait for a shard's asked-for reads (paced by the rate limiter when emulating)."""
        shard = self.plan.shards[index]
        started = time.perf_counter()
        if self.mapping and self.slots and self.slots.batched:
            with self._limiter.pacing([hi - lo for lo, hi in shard.ranges]):  # the emulated SSD, as one burst
                self.slots.load_many(shard.ranges).wait()  # every range sent in one call (batch_reads.py)
        elif self.mapping and self.slots:
            def load(span: tuple[int, int]) -> None:
                with self._limiter.pacing([span[1] - span[0]]):  # done no sooner than the emulated SSD
                    self.slots.load(*span)
            # exact ranges (what a drop gives back is what a load took), side by side
            for _ in self._ranges.map(load, shard.ranges):
                pass
        elif self.mapping:
            emulating = self._limiter.mb_s > 0
            # Emulating a disk: exact ranges, so the rate limiter charges shard bytes only.
            ranges = shard.ranges if emulating else self._read_spans[index]
            for start, end in ranges:
                span = self.mapping.clip(start, end)
                if not span:
                    continue
                # Whole ranges when not emulating: fewer, larger reads run at full disk speed.
                chunk = CHUNK_BYTES if emulating else span[1] - span[0]
                for lo in range(span[0], span[1], chunk):
                    hi = min(lo + chunk, span[1])
                    with self._limiter.pacing([hi - lo]):  # done no sooner than the emulated SSD
                        self.load_mechanism = self._read_in(lo, hi)
        with self._cond:
            self._counters.loads += 1
            self._counters.loaded_bytes += shard.n_bytes
            self._counters.load_s += time.perf_counter() - started

    def _read_in(self, lo: int, hi: int) -> str:
        """Disk → page cache with the loader's own reader; without one, fault it in."""
        if self._reader is None:
            return memory_calls.populate(lo, hi)
        self._reader.read(lo - self.mapping.base, hi - self.mapping.base, asked=True)
        return CACHE_LOAD

    def _map_now(self, index: int) -> None:
        """Map a read shard into llama.cpp's mapping: page cache hits, no disk I/O."""
        for start, end in self._read_spans[index]:
            span = self.mapping.clip(start, end)
            if span:
                memory_calls.populate(span[0], span[1])

    # -------------------------------------------------------------- readout
    def snapshot(self) -> ResidencySnapshot:
        with self._cond:
            book = self._book
            return ResidencySnapshot(book.states(), self._counters.copy(), book.accounted,
                                     book.budget_bytes, book.current, self.load_mechanism,
                                     self.evict_mechanism)
