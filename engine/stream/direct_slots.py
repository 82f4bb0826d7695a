"""Weights read with O_DIRECT into memory of our own, swapped into llama.cpp's mapping.

The page-cache path (``FADV_WILLNEED`` + ``MADV_POPULATE_READ`` to load, ``MADV_DONTNEED``
+ ``FADV_DONTNEED`` to evict, 4 KiB pages each way) cost about 2 kernel CPU-seconds per GB
streamed here: on 2 cores that is the compute's time (docs/decisions.md). This path:

- load: an anonymous slot of the range's size, filled by ``preadv`` on an ``O_DIRECT``
  descriptor (the disk DMAs into the slot: no page-cache insert, no readahead, no copy),
  then ``mremap(MREMAP_FIXED)`` moves the filled pages over the range of llama.cpp's
  mapping in one atomic step, so a reader sees the file's bytes before and after, never
  a hole or zeros;
- evict: the range's pages move out to a spare slot (``mremap(MREMAP_DONTUNMAP)``, so the
  range stays mapped) and the file is mapped back over it (``MAP_FIXED``); nothing is left in
  the page cache to account for — there never was any. The spare slot is kept for the next
  load of the same size: fresh anonymous memory costs ~0.45 kernel CPU-s per GB to fault in and
  zero, reused memory ~0.04-0.09 (docs/decisions.md), so slots are recycled, up to a bound.

Mappings: every range swapped in is an anonymous mapping (VMA) of its own inside the model's
mapping, and the kernel refuses new ones past ``vm.max_map_count`` (65,530 here) — a 61-layer
Kimi-shaped model has ~70k expert slices. So the ranges held are counted (exactly, as disjoint
pieces, which are also the books of own bytes the sampler reads) and a load past
``max_ranges`` (each piece costs at most itself and the file piece after it: half of what the
limit leaves after MAP_HEADROOM for the rest of the process) raises ``SlotsFull``; the caller reads that range through
the page cache instead, which adds no mapping. Dropped ranges are mapped back from the file with the same flags as
the mapping around them (``adopt``), so the kernel merges them with their neighbours again.

The ranges must be page-aligned (the loader passes page-outward ranges to load and
page-inward ones to evict, so a boundary page shared with a neighbour is never dropped
under it). Reads past the end of the file leave zeros, which nothing reads.
``mincore`` reports the anonymous pages as resident, so every residency check stays valid.

Regions (``make_region``): for small ranges the mapping calls are the cost, not the read — a slot
costs a load an mmap and an mremap and its drop an mmap and a madvise, each under the process's
mmap lock that every loader and every O_DIRECT page pin queue on (8 KiB slices read 0.35 of the
bare reads' rate, docs/decisions.md). A region is a page-aligned range turned into anonymous
memory of our own once, for the run: a load inside it is one ``preadv`` into place, a drop one
``MADV_DONTNEED`` (the pages freed at once: the next load reads the disk), no mapping call, and
the region is one mapping however many ranges it holds. Its pages read as zeros until loaded, so
only ranges nothing reads before it waits for their load may be regions (routed experts' own pages).
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import errno
import mmap
import os
import threading

from shardscope.engine.base import platform_calls
from shardscope.engine.base.batch_reads import BatchReader
from shardscope.engine.base.memory_calls import PAGE, FileMapping

PROT_NONE, PROT_READ, PROT_WRITE = 0, 1, 2
MAP_SHARED, MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x01, 0x02, 0x10, 0x20
MAP_NORESERVE = 0x4000
MREMAP_MAYMOVE, MREMAP_FIXED, MREMAP_DONTUNMAP = 1, 2, 4
HUGE = 2 * 1024 * 1024  # a transparent huge page
MADV_HUGEPAGE = 14
MIN_RECYCLED = 64 * 1024  # smaller ranges (edge pages) are simply mapped over
POOL_BYTES = 128 * 1024 * 1024  # spare slots kept for reuse (a layer's worth of evictions)
MADV_RANDOM = 1
MADV_NOHUGEPAGE = 15
MAP_FAILED = ctypes.c_void_p(-1).value
# Mappings left to the rest of the process (libraries, thread stacks, malloc arenas, Qt, spare slots):
# own slots hold at most (max_map_count - MAP_HEADROOM) // 2 ranges, each at most 2 mappings.
MAP_HEADROOM = 8192
MECHANISM = "O_DIRECT preadv into anonymous slots, mremap into llama.cpp's mapping"

libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
libc.mmap.restype = ctypes.c_void_p
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
libc.syscall.restype = ctypes.c_long
if platform_calls.has_mremap():  # Linux only: macOS takes the portable path (portable_slots.py)
    libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    libc.mremap.restype = ctypes.c_void_p


MADV_DONTNEED = 4
_SYS_PIDFD_OPEN, _SYS_PROCESS_MADVISE = 434, 440  # the generic syscall table: x86_64 and arm64 alike
IOV_MAX = 1024


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Vector:
    """process_madvise(2) on this process: many ranges advised in one call (recent kernels take
    MADV_DONTNEED there for the caller's own pidfd, 6.18 here does; older ones refuse it, and
    madvise goes range by range). The pidfd is this process's: opened again after a fork."""

    def __init__(self):
        self.pid = -1
        self.pidfd = -1
        self.works = True
        self.lock = threading.Lock()

    def advise(self, ranges: list[tuple[int, int]], advice: int) -> bool:
        """True when the kernel took every range in vector calls."""
        if not self.works:
            return False
        with self.lock:
            if self.pid != os.getpid():
                self.pid = os.getpid()
                self.pidfd = libc.syscall(_SYS_PIDFD_OPEN, self.pid, 0)
                if self.pidfd < 0:
                    self.works = False
                    return False
        for i in range(0, len(ranges), IOV_MAX):
            part = ranges[i:i + IOV_MAX]
            vec = (_Iovec * len(part))(*[_Iovec(lo, hi - lo) for lo, hi in part])
            done = libc.syscall(_SYS_PROCESS_MADVISE, self.pidfd, vec, len(part), advice, 0)
            if done != sum(hi - lo for lo, hi in part):
                self.works = False  # refused (an older kernel): range by range from now on
                return False
        return True


_VECTOR = _Vector()


def free_anonymous(ranges: list[tuple[int, int]]) -> None:
    """Free the pages of these private anonymous address ranges now (MADV_DONTNEED)."""
    if _VECTOR.advise(ranges, MADV_DONTNEED):
        return
    for lo, hi in ranges:  # again where a vector call stopped part way: freeing twice is harmless
        libc.madvise(lo, hi - lo, MADV_DONTNEED)


class SlotsFull(OSError):
    """Holding one more range would pass ``max_ranges`` mappings: read this one through the page cache."""


def max_map_count(default: int = 65530) -> int:
    return platform_calls.max_map_count(default)


class OwnRanges:
    """The disjoint address pieces that hold our pages, with their total: the exact books of what
    this object swapped in. Each piece is one anonymous mapping; a range loaded over part of a
    piece (an edge page two slices share) or dropped from its middle trims or splits it."""

    def __init__(self):
        self._starts: list[int] = []  # sorted
        self.ends: dict[int, int] = {}  # piece start → end
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._starts)

    def cut(self, lo: int, hi: int) -> None:
        """[lo, hi) no longer holds our pages."""
        i = max(0, bisect.bisect_right(self._starts, lo) - 1)
        while i < len(self._starts) and self._starts[i] < hi:
            start = self._starts[i]
            end = self.ends[start]
            if end <= lo:
                i += 1
                continue
            del self._starts[i], self.ends[start]
            self.bytes -= end - start
            for a, b in ((start, lo), (hi, end)):  # what is left of it on either side (the left one
                if b > a:                            # lands at i and is passed over next round)
                    self._insert(a, b)

    def overlaps(self, lo: int, hi: int) -> bool:
        i = bisect.bisect_right(self._starts, lo) - 1
        if i >= 0 and self.ends[self._starts[i]] > lo:
            return True
        return i + 1 < len(self._starts) and self._starts[i + 1] < hi

    def add(self, lo: int, hi: int) -> None:
        """[lo, hi) now holds one new piece of our pages (replacing whatever part of others it covers)."""
        self.cut(lo, hi)
        self._insert(lo, hi)

    def _insert(self, lo: int, hi: int) -> None:
        bisect.insort(self._starts, lo)
        self.ends[lo] = hi
        self.bytes += hi - lo


def check_mapped(result, what: str):
    if result is None or result == MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


class _Loading:
    """A batch of loads sent (DirectSlots.load_many): ``wait`` puts the slot pieces in place and books
    them, once all reads have landed (the region pieces were booked at the send)."""

    def __init__(self, slots: "DirectSlots", pending, slotted):
        self._slots, self._pending, self._slotted = slots, pending, slotted

    def wait(self) -> int:
        slots, placed = self._slots, 0
        try:
            done = self._pending.wait()
            for slot, (lo, hi) in self._slotted:
                check_mapped(libc.mremap(slot, hi - lo, hi - lo, MREMAP_MAYMOVE | MREMAP_FIXED, lo), "mremap")
                placed += 1
                with slots._pool_lock:  # in the mapping now: our pages, booked before the next swap
                    slots._own.add(lo, hi)
        except BaseException:
            for slot, (lo, hi) in self._slotted[placed:]:
                libc.munmap(slot, hi - lo)
            raise
        return done


class DirectSlots:
    """Loads and drops page-aligned file ranges of one model mapping (thread-safe: no shared state).

    The I/O path "mremap" (Linux's default); engine/stream/portable_slots.py is the other one."""

    io_path = "mremap"
    mechanism = MECHANISM
    recycles = True  # evicted pages go to the pool for the next load
    supports_regions = True  # make_region
    takes_batches = True  # load_many, where the kernel has batch reads (batch_reads.py)

    def __init__(self, path: str, mapping: FileMapping, pool_bytes: int = POOL_BYTES, max_ranges: int | None = None):
        self.path = path
        self.max_ranges = (max_map_count() - MAP_HEADROOM) // 2 if max_ranges is None else max_ranges
        self.refused = 0  # loads refused for want of mappings (read through the page cache instead)
        self._back_advice: int | None = None  # madvise given to every range mapped back (adopt)
        self.pool_bytes = pool_bytes
        self._pool: dict[int, list[int]] = {}  # length → spare slots holding pages (recycled)
        self._pooled = 0
        self._pool_lock = threading.Lock()
        self._can_keep = True  # MREMAP_DONTUNMAP (Linux ≥ 5.13 for file-backed ranges) available
        # Pieces this object swapped in and not out yet: only those hold our pages, so only a whole
        # one may move to the pool (a file-backed range there would be read into: never).
        self._own = OwnRanges()
        # Regions (make_region): sorted address ranges of anonymous memory of ours, and the pieces of
        # them holding the file's bytes now (the books: loaded, not yet dropped).
        self._regions: list[tuple[int, int]] = []
        self._in_place = OwnRanges()
        self._arriving = 0  # bytes being read in place now: their pages appear as the read lands
        self.mapping = mapping
        if mapping.start % PAGE or (mapping.file_offset % PAGE):
            raise OSError(errno.EINVAL, "the model mapping is not page-aligned")
        self._direct = self._open_direct(path)
        self._plain = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._plain).st_size
        self._batches = BatchReader.open(self._direct, path, self.size) if self.takes_batches else None

    @staticmethod
    def _open_direct(path: str) -> int:
        if not hasattr(os, "O_DIRECT"):
            raise OSError(errno.EOPNOTSUPP, "no O_DIRECT on this system")
        return os.open(path, os.O_RDONLY | os.O_DIRECT)

    @classmethod
    def probe(cls, path: str, mapping: FileMapping) -> "DirectSlots | str":
        """Slots of this kind, or why this file cannot use them (the caller falls back and says so)."""
        try:
            slots = cls(path, mapping)
            slots.read_direct_test()
            return slots
        except OSError as exc:
            return f"O_DIRECT unavailable for {os.path.basename(path)} ({exc.strerror or exc})"

    def read_direct_test(self) -> None:
        """One aligned page read: some filesystems (tmpfs) accept O_DIRECT at open, refuse at read."""
        buf = mmap.mmap(-1, PAGE)
        try:
            os.preadv(self._direct, [buf], 0)
        finally:
            buf.close()

    @property
    def own_bytes(self) -> int:
        """Bytes of the mapping now backed by our pages (every one of them read in: resident)."""
        return self._own.bytes + self._in_place.bytes

    def books(self) -> tuple[int, int]:
        """(own_bytes, bytes being read into the mapping in place now), read together: the kernel
        holds between the first and their sum (a read's pages appear as it lands, the books take
        them once it has)."""
        with self._pool_lock:
            return self._own.bytes + self._in_place.bytes, self._arriving

    @property
    def held_ranges(self) -> int:
        return len(self._own)

    def adopt(self, advice: int = MADV_RANDOM) -> None:
        """Map the whole model range again from our descriptor, with ``advice``: the pieces a drop
        maps back later are then the same file, flags and offsets as their neighbours, and the
        kernel merges them (llama.cpp's own mapping is another open file: nothing merges with it).
        Call before anything is loaded (the bytes are the file's either way)."""
        m = self.mapping
        with self._pool_lock:
            if len(self._own) or self._regions:
                raise ValueError("adopt() after a load or a region would map the file over them")
        check_mapped(libc.mmap(m.start, m.end - m.start, PROT_READ, MAP_SHARED | MAP_FIXED, self._plain, m.file_offset),
               "mmap of the model range")
        libc.madvise(m.start, m.end - m.start, advice)
        self._back_advice = advice

    def make_region(self, file_lo: int, file_hi: int) -> None:
        """Make [file_lo, file_hi) (page-aligned, holding nothing of ours yet) anonymous memory of our
        own for the rest of the run; its bytes read as zeros until a load puts the file's there."""
        address, end = self._span(file_lo, file_hi)
        with self._pool_lock:
            if self._own.overlaps(address, end) or any(lo < end and address < hi for lo, hi in self._regions):
                raise ValueError(f"range {file_lo}-{file_hi} already holds our pages")
        check_mapped(libc.mmap(address, end - address, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                               -1, 0), "mmap of a region")
        # 4 KiB pages: a huge page would fault 2 MiB in (and count it resident) for one small slice
        libc.madvise(address, end - address, MADV_NOHUGEPAGE)
        with self._pool_lock:
            bisect.insort(self._regions, (address, end))

    def _pieces(self, address: int, end: int) -> list[tuple[int, int, bool]]:
        """[address, end) cut where regions begin and end: (lo, hi, inside a region?) in order."""
        regions = self._regions
        if not regions:
            return [(address, end, False)]
        pieces, at = [], address
        i = max(0, bisect.bisect_right(regions, (address, end)) - 1)
        while at < end and i < len(regions):
            lo, hi = regions[i]
            if hi <= at:
                i += 1
                continue
            if lo >= end:
                break
            if lo > at:
                pieces.append((at, lo, False))
            pieces.append((max(at, lo), min(end, hi), True))
            at = min(end, hi)
            i += 1
        if at < end:
            pieces.append((at, end, False))
        return pieces

    def region_pieces(self, file_lo: int, file_hi: int) -> list[tuple[int, int, bool]]:
        """[file_lo, file_hi) (page-aligned) as file ranges cut at the regions' edges, each with
        whether it lies inside one (a region's piece is never refused and never goes through the page cache)."""
        address, end = self._span(file_lo, file_hi)
        base = self.mapping.base
        return [(lo - base, hi - base, inside) for lo, hi, inside in self._pieces(address, end)]

    def _span(self, file_lo: int, file_hi: int) -> tuple[int, int]:
        span = self.mapping.clip(file_lo, file_hi)
        if span is None or (span[0] - self.mapping.start) % PAGE or (span[1] - span[0]) % PAGE:
            raise ValueError(f"range {file_lo}-{file_hi} is not page-aligned inside the mapping")
        return span

    def load(self, file_lo: int, file_hi: int) -> int:
        """Read [file_lo, file_hi) (page-aligned) into the mapping — a region's pieces in place, the
        rest swapped in from a slot; returns bytes read."""
        address, end = self._span(file_lo, file_hi)
        done = 0
        # the slot pieces first: one refused (SlotsFull) leaves no region piece read for nothing
        for lo, hi, inside in sorted(self._pieces(address, end), key=lambda piece: piece[2]):
            done += self._fill_in_place(lo, hi) if inside else self._load_slot(lo, hi)
        return done

    @property
    def batched(self) -> bool:
        """Whether load_many works here (batch reads in this kernel, this path)."""
        return self._batches is not None

    def load_many(self, ranges) -> _Loading:
        """Start reading these page-aligned file ranges, every read sent in one call (batch_reads.py;
        only where ``batched``); ``wait`` on the answer for the bytes read, once they are in the
        mapping. Raises SlotsFull, before anything is read, when the slot pieces would pass ``max_ranges``."""
        in_place, slotted = [], []
        for file_lo, file_hi in ranges:
            address, end = self._span(file_lo, file_hi)
            for lo, hi, inside in self._pieces(address, end):
                (in_place if inside else slotted).append((lo, hi))
        if slotted:
            with self._pool_lock:
                held = len(self._own) + sum(self._own.ends.get(lo) != hi for lo, hi in slotted)
                if held > self.max_ranges:
                    self.refused += 1
                    raise SlotsFull(errno.ENOMEM, f"{self.max_ranges} ranges held (vm.max_map_count {max_map_count()})")
        slots: list[int] = []
        try:
            for lo, hi in slotted:
                slots.append(self._take_slot(hi - lo))
            base = self.mapping.base
            reads = [(lo, hi - lo, lo - base) for lo, hi in in_place]
            reads += [(slot, hi - lo, lo - base) for slot, (lo, hi) in zip(slots, slotted)]
            pending = self._batches.send(reads)
        except BaseException:  # nothing was sent: the slots taken so far go
            for slot, (lo, hi) in zip(slots, slotted):
                libc.munmap(slot, hi - lo)
            raise
        # A region piece's pages are in the mapping from the send on: O_DIRECT pins (faults in) a
        # read's pages when it is submitted. Booked now, so a reading taken while the decode thread
        # waits (when the sampler gets the GIL) counts what the kernel holds; a slot's pages enter
        # the mapping only at its mremap, after the wait.
        with self._pool_lock:
            for lo, hi in in_place:
                self._in_place.add(lo, hi)
        return _Loading(self, pending, list(zip(slots, slotted)))

    def _fill_in_place(self, address: int, end: int) -> int:
        """A region's piece: the file's bytes read straight into it (no mapping call)."""
        with self._pool_lock:
            self._arriving += end - address
        try:
            done = self._read_into(address, end - address, address - self.mapping.base)
        except BaseException:
            with self._pool_lock:
                self._arriving -= end - address
            raise
        with self._pool_lock:  # from landing to booked in one step: no reading between sees neither
            self._arriving -= end - address
            self._in_place.add(address, end)
        return done

    def _load_slot(self, address: int, end: int) -> int:
        """A piece outside the regions: read into a slot, swapped into the mapping."""
        length = end - address
        offset = address - self.mapping.base
        with self._pool_lock:
            if len(self._own) >= self.max_ranges and self._own.ends.get(address) != end:
                self.refused += 1
                raise SlotsFull(errno.ENOMEM, f"{self.max_ranges} ranges held (vm.max_map_count {max_map_count()})")
        slot = self._take_slot(length)
        try:
            done = self._read_into(slot, length, offset)
            check_mapped(libc.mremap(slot, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, address), "mremap")
        except BaseException:
            libc.munmap(slot, length)
            raise
        with self._pool_lock:
            self._own.add(address, end)
        return done

    def _read_into(self, address: int, length: int, offset: int) -> int:
        """Read ``length`` bytes of the file at ``offset`` into memory at ``address`` with the
        uncached descriptor, however many calls it takes; the bytes read (short only past EOF)."""
        view = memoryview((ctypes.c_char * length).from_address(address)).cast("B")
        done = 0
        try:
            while done < length:
                n = os.preadv(self._direct, [view[done:]], offset + done)
                if n <= 0:
                    if offset + done >= self.size:
                        break  # past the end of the file: zeros, which no tensor covers
                    raise OSError(errno.EIO, f"read stopped at byte {offset + done} of {self.path}")
                done += n
        finally:
            view.release()
        return done

    def _take_slot(self, length: int) -> int:
        """A slot of ``length`` bytes, made of a spare one's pages where there is one: the same size,
        else the smallest larger one cut down (mremap shrinks in place), else the largest smaller one
        grown (only the added tail is fresh memory); a new mapping only when nothing is spare."""
        with self._pool_lock:
            sizes = sorted(size for size, spares in self._pool.items() if spares)
            if not sizes:
                spare = size = None
            else:
                size = next((s for s in sizes if s >= length), sizes[-1])
                spare = self._pool[size].pop()
                self._pooled -= size
        if spare is None:
            return self._fresh_slot(length)
        if size == length:
            return spare
        moved = libc.mremap(spare, size, length, MREMAP_MAYMOVE if size < length else 0, None)
        if moved in (None, MAP_FAILED):
            libc.munmap(spare, size)
            return self._fresh_slot(length)
        return moved

    @staticmethod
    def _fresh_slot(length: int) -> int:
        """New anonymous memory, 2 MiB-aligned and asked for in huge pages where it is that big:
        faulting it in (the O_DIRECT read pins every page) then costs a fault per 2 MiB, not per
        4 KiB (the dense 30 GB row: 0.35 → 0.21 kernel CPU-s/GB, docs/decisions.md); mremap splits
        them where the target is not aligned."""
        if length < HUGE:
            return check_mapped(libc.mmap(None, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                          "mmap of a slot")
        raw = check_mapped(libc.mmap(None, length + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                     "mmap of a slot")
        slot = (raw + HUGE - 1) // HUGE * HUGE
        if slot > raw:
            libc.munmap(raw, slot - raw)
        tail = raw + length + HUGE - (slot + length)
        if tail > 0:
            libc.munmap(slot + length, tail)
        libc.madvise(slot, length, MADV_HUGEPAGE)
        return slot

    def _keep_pages(self, address: int, length: int) -> None:
        """Move the range's pages into a spare slot (the range stays mapped, empty), if there is room."""
        if not self._can_keep or length < MIN_RECYCLED:
            return
        with self._pool_lock:
            if self._own.ends.get(address) != address + length or self._pooled + length > self.pool_bytes:
                return
            self._pooled += length
        spare = check_mapped(libc.mmap(None, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
                       "mmap of a spare slot")
        moved = libc.mremap(address, length, length, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, spare)
        with self._pool_lock:
            if moved in (None, MAP_FAILED):
                self._can_keep = False  # an older kernel: free the pages instead, from now on
                self._pooled -= length
                libc.munmap(spare, length)
            else:
                self._pool.setdefault(length, []).append(moved)

    def drop(self, file_lo: int, file_hi: int) -> None:
        """Drop [file_lo, file_hi) (page-aligned): a region's pieces are freed in place; elsewhere the file
        is mapped back over it and its pages go to a spare slot or are freed."""
        self.drop_many([(file_lo, file_hi)])

    def drop_many(self, ranges) -> None:
        """Drop these page-aligned file ranges; their region pieces freed together, in one call
        where the kernel takes a vector of ranges (process_madvise), else one madvise each."""
        in_place = []
        for file_lo, file_hi in ranges:
            address, end = self._span(file_lo, file_hi)
            for lo, hi, inside in self._pieces(address, end):
                if inside:
                    in_place.append((lo, hi))
                else:
                    self._drop_slot(lo, hi)
        if in_place:
            free_anonymous(in_place)  # private anonymous pages: freed now
            with self._pool_lock:  # out of the books once freed: a reading meanwhile counts them still
                for lo, hi in in_place:
                    self._in_place.cut(lo, hi)

    def _drop_slot(self, address: int, end: int) -> None:
        offset = address - self.mapping.base
        self._keep_pages(address, end - address)
        check_mapped(libc.mmap(address, end - address, PROT_READ, MAP_SHARED | MAP_FIXED, self._plain, offset),
               "mmap of the file back")
        with self._pool_lock:  # out of the books once out of the mapping (the sampler reads them meanwhile)
            self._own.cut(address, end)
        if self._back_advice is not None:  # the flags its neighbours have: the kernel merges them
            libc.madvise(address, end - address, self._back_advice)

    def close(self) -> None:
        with self._pool_lock:
            for length, spares in self._pool.items():
                for spare in spares:
                    libc.munmap(spare, length)
            self._pool.clear()
            self._pooled = 0
        if self._batches is not None:
            self._batches.close()
        for fd in (self._direct, self._plain):
            try:
                os.close(fd)
            except OSError:
                pass
        self._direct = self._plain = -1


__all__ = ["DirectSlots", "MECHANISM", "OwnRanges", "SlotsFull", "max_map_count"]
