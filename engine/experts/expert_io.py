"""How an expert's bytes get into llama.cpp's mapping and out again: the kernel work of expert
streaming, apart from the decisions (engine/experts/expert_streaming.py decides what and when).

Two paths, one surface:

- own slots (default where the file allows uncached reads): each page-outward range is read with
  ``O_DIRECT`` into anonymous memory and swapped into the mapping; eviction maps the file back
  (engine/stream/direct_slots.py by mremap, or engine/stream/portable_slots.py by pread into
  anonymous memory placed with MAP_FIXED: engine/stream/io_path.py chooses). No page cache, no
  readahead, a fraction of the kernel CPU.
- page cache (fallback, e.g. tmpfs): ``POSIX_FADV_WILLNEED`` on the exact file ranges in
  ≤ 8 MiB calls (one call reads no more), then ``MADV_POPULATE_READ``; the mapping is
  ``MADV_RANDOM`` so neither a populate nor a stray fault reads around into neighbours.
  Eviction: ``MADV_DONTNEED`` + ``POSIX_FADV_DONTNEED``, mincore-checked.

Own slots are bounded in number (each holds a mapping of its own, direct_slots.py): once they
are full, an expert is read through the page cache instead and evicted that way too.

A page an expert's slice shares with a neighbour (slices not page-aligned) is read with the
slice and dropped only when no resident range covers it any more.

Small slices (under REGION_SLICE) go in regions of the mremap slots (direct_slots.py): an expert
tensor's own pages become anonymous memory of ours at start, and a slice is then read in place
and dropped by one madvise, with no mapping call. Their bytes are zeros until loaded, which is
safe because llama.cpp reads a routed expert only after its layer's topk, where the decode waits
for the load (expert_streaming.py).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from typing import NamedTuple

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.budget_minimum import (  # noqa: F401
    dense_pages,
    edge_bytes,
    pages_without,
    resident_dense_bytes,  # one definition, re-exported
)
from shardscope.engine.layout.moe_layout import MoeLayout
from shardscope.engine.stream.direct_slots import DirectSlots, SlotsFull
from shardscope.engine.stream.portable_slots import DROP as PORTABLE_DROP
from shardscope.engine.stream.ssd_rate_limiter import SsdRateLimiter

WILLNEED_CHUNK = 8 * MIB  # max(read_ahead_kb, max_sectors_kb) here: one call reads no more
MADV_RANDOM = 1
POSIX_FADV_WILLNEED = 3
PAGE_CACHE_MECHANISM = "FADV_WILLNEED (≤ 8 MiB calls) + MADV_POPULATE_READ, MADV_RANDOM mapping"
DROP_MECHANISM = "file mapped back over the range (MAP_FIXED), the pages recycled for the next load"
# Slices under this size are read into regions (one preadv, one madvise to drop); larger ones keep
# recycled slots, whose pages come back without a fresh fault. 16 threads loading and dropping
# random slices (.dev-style micro-bench, 2-core VM): regions 1.8-2.5x the slots' rate up to 128 KiB,
# equal within the noise from 512 KiB (docs/decisions.md).
REGION_SLICE = 512 * 1024


def _edge_pages(start: int, end: int) -> list[int]:
    """The pages of [start, end)'s page-outward range that its page-inward range leaves out."""
    lo, hi = memory_calls.page_outward(start, end)
    inner = memory_calls.page_inward(start, end)
    if inner is None:
        return list(range(lo, hi, memory_calls.PAGE))
    return [p for p in (lo, hi - memory_calls.PAGE) if p < inner[0] or p >= inner[1]]


def expert_regions(moe: MoeLayout, mapped: tuple[int, int]) -> list[tuple[int, int]]:
    """The file ranges made regions at start: each expert tensor of slices under REGION_SLICE, its
    whole pages only (a page it shares with a dense tensor stays the file's: read at start or
    streamed with the trunk), within the mapped part of the file."""
    regions = []
    for layer in moe.layers:
        for offset, per in moe.expert_tensors[layer]:
            inner = memory_calls.page_inward(max(offset, mapped[0]), min(offset + moe.n_expert * per, mapped[1]))
            if per < REGION_SLICE and inner:
                regions.append(inner)
    return regions


def _with_edges(inner: tuple[int, int] | None, freed: list[int]) -> list[tuple[int, int]]:
    """A slice's page-inward range and its freed edge pages as few ranges as they make (an edge
    page lies just before or just after the inner range: one drop call covers all three)."""
    if not freed:  # most drops: a neighbour still holds the edge pages
        return [inner] if inner else []
    pages = [(p, p + memory_calls.PAGE) for p in freed]
    return memory_calls.merge_ranges(pages + [inner] if inner else pages)


class _Slice(NamedTuple):
    """One slice of an expert's tensors, its fixed geometry."""

    start: int
    end: int
    inner: tuple[int, int] | None  # page-inward file range (None: it holds no whole page)
    span: tuple[int, int] | None  # the inner range's addresses in the mapping (None: not mapped)
    outward: tuple[int, int]  # page-outward file range: what a load reads
    edges: tuple[int, ...]  # pages it may share with a neighbour


class _UnitsLoading:
    """Experts' reads sent together (ExpertIO.send_units)."""

    def __init__(self, loading, pacing):
        self._loading, self._pacing = loading, pacing

    def wait(self) -> int:
        try:
            return self._loading.wait()
        finally:
            self._pacing.__exit__(None, None, None)  # done no sooner than the emulated SSD


class ExpertIO:
    def __init__(self, moe: MoeLayout, mapping: memory_calls.FileMapping, fd: int, slots: DirectSlots | None,
                 limiter: SsdRateLimiter, trunk_ranges=()):
        self.moe = moe
        # The trunk's shards where the trunk streams too (engine/stream/residency.py loads them): not read here.
        self.resident_pages = pages_without(dense_pages(moe), trunk_ranges)
        self.mapping = mapping
        self.fd = fd
        self.slots = slots
        self.limiter = limiter
        self.load_mechanism = slots.mechanism if slots else PAGE_CACHE_MECHANISM
        self.evict_mechanism = (DROP_MECHANISM if slots.recycles else PORTABLE_DROP) if slots else \
            "MADV_DONTNEED+FADV_DONTNEED"
        self._holders: Counter = Counter()  # edge page → resident ranges covering it
        # (layer, expert) → its slices, worked out at its first use: a layer's victims are dropped
        # on the decode thread before its reads go out, so none of it is redone there
        self._slices: dict[tuple[int, int], tuple[_Slice, ...]] = {}
        self._cached: set[tuple[int, int]] = set()  # units read through the page cache (slots full)
        self._lock = threading.Lock()

    def start(self) -> int:
        """Cold start: drop whatever the load left of the file, read the dense bytes (less the trunk's
        streamed shards); returns them."""
        m = self.mapping
        memory_calls.madvise(m.start, m.end, MADV_RANDOM)
        evicted = memory_calls.evict(m.start, m.end, self.fd, m.file_offset)
        if not self.slots:
            self.evict_mechanism = evicted
        else:  # ranges mapped back merge with their neighbours again (direct_slots.py: mappings)
            self.slots.adopt(MADV_RANDOM)
            if self.slots.supports_regions:
                for lo, hi in expert_regions(self.moe, (m.file_offset, m.file_offset + (m.end - m.start))):
                    self.slots.make_region(lo, hi)
        total = 0
        mapped_lo, mapped_hi = m.file_offset, m.file_offset + (m.end - m.start)
        for lo, hi in self.resident_pages:
            # With GPU layers llama.cpp unmaps the ends of the file that hold GPU tensors only
            # (llama-model-loader's unmap_fragment; issue #35): there is no host copy to read there.
            lo, hi = max(lo, mapped_lo), min(hi, mapped_hi)
            if hi <= lo:
                continue
            self.limiter.throttle(hi - lo)
            self._read_in([(lo, hi)])
            for page in (lo, hi - memory_calls.PAGE):  # a dense edge page may be an expert's edge too: it stays
                self._holders[page] += 1
            total += hi - lo
        return total

    def _ask_disk(self, file_lo: int, file_hi: int) -> None:
        """Start reading exactly [file_lo, file_hi) into the page cache (returns at once)."""
        for lo in range(file_lo, file_hi, WILLNEED_CHUNK):
            os.posix_fadvise(self.fd, lo, min(WILLNEED_CHUNK, file_hi - lo), POSIX_FADV_WILLNEED)

    def _read_in(self, ranges: list[tuple[int, int]]) -> tuple[int, bool]:
        """Exactly these (page-outward) file ranges into llama.cpp's mapping: (bytes asked of the disk
        — whole pages, what the kernel counts as read —, False where they went through the page cache:
        no slots, or the slots hold as many ranges as they may). Page-cache path: all reads are queued
        at the disk before waiting on any, so one expert's slices overlap."""
        if self.slots:
            done = loaded = 0
            try:
                for lo, hi in ranges:
                    done += self.slots.load(lo, hi)
                    loaded += 1
                return done, True
            except SlotsFull:
                pass
            # The ranges already in stay there. Of the rest, a region's pieces are read in place (never
            # refused; the refused range's were not read yet, slots.load takes its slot pieces first)
            # and only the others go through the page cache.
            rest = []
            for lo, hi in ranges[loaded:]:
                for a, b, inside in self.slots.region_pieces(lo, hi):
                    if inside:
                        done += self.slots.load(a, b)
                    else:
                        rest.append((a, b))
            return done + self._read_through_cache(rest), False
        return self._read_through_cache(ranges), False

    def _read_through_cache(self, ranges: list[tuple[int, int]]) -> int:
        for lo, hi in ranges:
            self._ask_disk(lo, hi)
        for lo, hi in ranges:
            span = self.mapping.clip(lo, hi)
            if span:
                memory_calls.populate(span[0], span[1])
        return sum(hi - lo for lo, hi in ranges)  # whole pages: what the kernel counts as read

    def load_unit(self, layer: int, expert: int) -> int:
        """Read one expert in; returns the bytes read: its slices widened to whole pages, so a model
        whose slices are not page-aligned (Kimi-shaped) counts the edge pages the disk really read."""
        slices = self._unit_slices(layer, expert)
        self._claim_edges(slices)
        # the emulated SSD (bandwidth, latency, queue depth; one request a slice): done no sooner than it
        with self.limiter.pacing(piece.end - piece.start for piece in slices):
            read, own = self._read_in([piece.outward for piece in slices])
        if self.slots and not own:
            with self._lock:
                self._cached.add((layer, expert))
        return read

    def send_units(self, units) -> "_UnitsLoading | None":
        """Start reading these experts in, all their slices sent to the disk in one call (direct_slots.py
        load_many); the answer's ``wait`` returns the bytes read (load_unit's count) once they are in.
        None where the slots take no batches or hold as many ranges as they may: load them one by one
        (load_unit), which reads through the page cache what the slots refuse."""
        if not (self.slots and self.slots.batched and units):
            return None
        slices = [piece for unit in units for piece in self._unit_slices(*unit)]
        self._claim_edges(slices)
        pacing = self.limiter.pacing(piece.end - piece.start for piece in slices)  # the emulated SSD, as one burst
        pacing.__enter__()
        try:
            loading = self.slots.load_many([piece.outward for piece in slices])
        except OSError:  # SlotsFull, or the kernel refused the batch: nothing was sent
            loading = None
        if loading is None:  # nothing was read: the claims go back (a page no range holds was never in)
            pacing.__exit__(None, None, None)
            with self._lock:
                for piece in slices:
                    self._release_edges(piece.edges)
            return None
        return _UnitsLoading(loading, pacing)

    def _claim_edges(self, slices) -> None:
        """Claimed before the read, on both paths: a neighbour evicted meanwhile must not drop a
        shared page, and a shared page goes only when no resident range covers it."""
        with self._lock:
            for piece in slices:
                for page in piece.edges:
                    self._holders[page] += 1

    def _release_edges(self, edges) -> list[int]:
        """Of a slice's ``edges``, the pages no resident range holds any more after it goes: the caller
        drops them."""
        freed = []
        for page in edges:
            if self._holders[page] > 0:
                self._holders[page] -= 1
                if self._holders[page] == 0:
                    del self._holders[page]
                    freed.append(page)
        return freed

    def _unit_slices(self, layer: int, expert: int) -> tuple[_Slice, ...]:
        """The unit's slices, worked out once a unit."""
        slices = self._slices.get((layer, expert))
        if slices is None:
            pieces = []
            for start, end in self.moe.unit_ranges(layer, expert):
                inner = memory_calls.page_inward(start, end)
                pieces.append(_Slice(start, end, inner, self.mapping.clip(*inner) if inner else None,
                                     memory_calls.page_outward(start, end), tuple(_edge_pages(start, end))))
            slices = self._slices[(layer, expert)] = tuple(pieces)
        return slices

    def evict_unit(self, layer: int, expert: int) -> int:
        """Drop the expert's pages; returns the bytes mincore still sees resident afterwards."""
        self.evict_units([(layer, expert)])
        return self.unit_resident_bytes(layer, expert)

    def evict_units(self, units) -> None:
        """Drop these experts' pages (an access's victims) in one pass: their region pieces go in one
        call (direct_slots.py drop_many), since one call each was most of a layer's wait on 8 KiB slices."""
        drops: list[tuple[int, int]] = []
        cached_drops: list[tuple[int, int]] = []
        with self._lock:
            for layer, expert in units:
                cached = (layer, expert) in self._cached
                self._cached.discard((layer, expert))
                for piece in self._unit_slices(layer, expert):
                    freed = self._release_edges(piece.edges)
                    (cached_drops if cached else drops).extend(_with_edges(piece.inner, freed))
            # Dropped under the lock a load claims its edge pages under: a neighbour that claimed a
            # shared page first kept it from being freed, one that claims it after reads it again. A
            # page dropped after the neighbour's read would be gone under it (in a region: zeros).
            self._drop_all(drops, cached_drops)

    def _drop_all(self, drops, cached_drops) -> None:
        if not self.slots:
            for lo, hi in drops + cached_drops:
                span = self.mapping.clip(lo, hi)
                if span:
                    self.evict_mechanism = memory_calls.evict(span[0], span[1], self.fd, lo)
            return
        # ranges llama.cpp unmapped (GPU layers' ends, issue #35) hold nothing to drop
        self.slots.drop_many([(lo, hi) for lo, hi in drops + cached_drops if self.mapping.clip(lo, hi)])
        for lo, hi in cached_drops:  # read through the page cache (slots full): those pages go too
            span = self.mapping.clip(lo, hi)
            if span:
                memory_calls.evict(span[0], span[1], self.fd, lo)

    def unit_resident_bytes(self, layer: int, expert: int) -> int:
        """mincore over the unit's page-inward ranges: the independent check."""
        return self.units_resident_bytes([(layer, expert)])

    def units_resident_bytes(self, units) -> int:
        """mincore over these units' page-inward ranges (a layer's victims: a few calls, not one a slice)."""
        return memory_calls.spans_resident_bytes(
            [piece.span for layer, expert in units for piece in self._unit_slices(layer, expert) if piece.span])

    def close(self) -> None:
        if self.slots:
            self.slots.close()


__all__ = ["ExpertIO", "edge_bytes", "dense_pages", "resident_dense_bytes"]
