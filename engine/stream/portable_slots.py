"""The portable I/O path: own slots with POSIX calls only (macOS, and Linux with SHARDSCOPE_IO=portable).

Same surface as the mremap slots (engine/stream/direct_slots.py: load, drop, adopt, own_bytes,
held_ranges, refused, close), so dense shards and experts use it unchanged:

- load: ``mmap(MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS)`` places fresh anonymous memory over the
  range of llama.cpp's mapping, and ``pread`` (``preadv``) on an uncached descriptor fills it
  (``O_DIRECT`` on Linux, ``F_NOCACHE`` on macOS: engine/base/platform_calls.py): no page-cache
  insert, no readahead. Pages of the range that already hold our bytes (an edge page two slices
  share, read with the neighbour) are left as they are, so a page someone may be reading never
  becomes a fresh zero page under them; two loads of overlapping ranges wait for each other's
  pieces rather than replacing them;
- evict: the file range is mapped back over it (``MAP_FIXED | MAP_SHARED``, read-only), which
  frees the anonymous pages at once: the range is lazily file-backed again and holds no RAM.

What it costs against mremap: no recycling (``mremap`` is what moves filled pages without a copy
or a fresh fault), so every load faults in and zeroes new anonymous memory — bench/goals/io_paths.py
prints the kernel CPU-seconds per GB of both paths on the same model.
"""

from __future__ import annotations

import bisect
import errno
import mmap
import threading

from shardscope.engine.base import platform_calls
from shardscope.engine.base.memory_calls import FileMapping
from shardscope.engine.stream.direct_slots import (
    MAP_FIXED,
    PROT_READ,
    PROT_WRITE,
    DirectSlots,
    SlotsFull,
    check_mapped,
    libc,
    max_map_count,
)

MECHANISM = ("portable: pread (uncached: O_DIRECT / F_NOCACHE) into anonymous memory placed with "
             "mmap(MAP_FIXED) over llama.cpp's mapping")
DROP = "file mapped back over the range (MAP_FIXED, read-only): its anonymous pages freed"
_ANON = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED


class PortableSlots(DirectSlots):
    io_path = "portable"
    mechanism = MECHANISM
    recycles = False
    # its load places fresh memory over each range; and macOS's MADV_DONTNEED need not free pages at once
    supports_regions = False
    takes_batches = False  # its loads wait for overlapping ones piece by piece (load)

    def __init__(self, path: str, mapping: FileMapping, pool_bytes: int = 0, max_ranges: int | None = None):
        super().__init__(path, mapping, pool_bytes=0, max_ranges=max_ranges)
        self._can_keep = False  # no pool: nothing moves pages out without mremap
        self._filling: list[tuple[int, int]] = []  # address pieces being read now (not yet our bytes)
        self._filled = threading.Condition(self._pool_lock)

    @staticmethod
    def _open_direct(path: str) -> int:
        return platform_calls.open_uncached(path)

    def _missing(self, address: int, end: int) -> list[tuple[int, int]]:
        """Under the lock: the pieces of [address, end) that hold neither our bytes nor a read in flight."""
        starts = self._own._starts
        i = max(0, bisect.bisect_right(starts, address) - 1)
        busy = [p for p in self._filling if p[0] < end and p[1] > address]
        while i < len(starts) and starts[i] < end:
            busy.append((starts[i], self._own.ends[starts[i]]))
            i += 1
        busy.sort()
        pieces, at = [], address
        for lo, hi in busy:
            if hi <= at or lo >= end:
                continue
            if lo > at:
                pieces.append((at, lo))
            at = max(at, hi)
            if at >= end:
                break
        if at < end:
            pieces.append((at, end))
        return pieces

    def load(self, file_lo: int, file_hi: int) -> int:
        """Read [file_lo, file_hi) (page-aligned) into anonymous memory placed over the mapping;
        returns the bytes read (pieces already ours are not read again)."""
        address, end = self._span(file_lo, file_hi)
        with self._filled:
            if len(self._own) >= self.max_ranges and self._own.ends.get(address) != end:
                self.refused += 1
                raise SlotsFull(errno.ENOMEM, f"{self.max_ranges} ranges held (vm.max_map_count {max_map_count()})")
            pieces = self._missing(address, end)
            self._filling.extend(pieces)
        done = 0
        try:
            for lo, hi in pieces:
                done += self._fill(lo, hi)
                with self._filled:
                    self._own.add(lo, hi)
                    self._filling.remove((lo, hi))
                    self._filled.notify_all()
        except BaseException:
            with self._filled:
                for piece in pieces:
                    if piece in self._filling:
                        self._filling.remove(piece)
                        # the file back over a half-read piece: its bytes are the file's again
                        libc.mmap(piece[0], piece[1] - piece[0], PROT_READ, mmap.MAP_SHARED | MAP_FIXED,
                                   self._plain, piece[0] - self.mapping.base)
                self._filled.notify_all()
            raise
        with self._filled:  # pieces another load is reading: ours only once they are
            while any(lo < end and hi > address for lo, hi in self._filling):
                self._filled.wait(0.05)
        return done

    def books(self) -> tuple[int, int]:
        """As the mremap slots' (direct_slots.py): every piece being read lands in the mapping."""
        with self._filled:
            return self._own.bytes + self._in_place.bytes, sum(hi - lo for lo, hi in self._filling)

    def _fill(self, address: int, end: int) -> int:
        length = end - address
        offset = address - self.mapping.base
        check_mapped(libc.mmap(address, length, PROT_READ | PROT_WRITE, _ANON, -1, 0), "mmap of anonymous memory")
        platform_calls.advise_huge(address, length)  # Linux: 2 MiB faults where a whole block fits
        return self._read_into(address, length, offset)

    def _keep_pages(self, address: int, length: int) -> None:
        return  # nothing is recycled: mapping the file back frees the pages


__all__ = ["PortableSlots", "MECHANISM", "DROP"]
