"""The kernel calls that make streaming real: find the mapping, load, evict, check.

Linux gives everything needed: ``MADV_POPULATE_READ`` faults a range in from a
background thread (ctypes drops the GIL, so it overlaps llama_decode);
``MADV_DONTNEED`` + ``POSIX_FADV_DONTNEED`` unmap the pages and drop them from the
page cache so the next access reads the disk (``MADV_DONTNEED`` alone only unmaps:
the bytes would stay cached and come back for free, faking the SSD), with
``MADV_PAGEOUT`` for what survives at folio edges; ``mincore`` reports what is
really cached, the independent check. Where a call is missing (macOS has no PAGEOUT/POPULATE_READ) the
``mechanism`` strings say what is active instead — the GUI shows them, never pretends.

What differs between Linux and macOS (finding the mapping, smaps, cachestat) lives in
engine/base/platform_calls.py; the names here are that room's twins for this system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os

import numpy as np

from shardscope.engine.base import platform_calls
from shardscope.engine.base.file_mapping import FileMapping  # noqa: F401 - re-exported: the engine's one import
from shardscope.engine.base.platform_calls import IS_LINUX  # noqa: F401 - re-exported

PAGE = mmap.PAGESIZE


def page_outward(start: int, end: int) -> tuple[int, int]:
    """[start, end) widened to whole pages: what a read must cover."""
    return start // PAGE * PAGE, -(-end // PAGE) * PAGE


def page_inward(start: int, end: int) -> tuple[int, int] | None:
    """[start, end) shrunk to whole pages (None if none): what may be dropped without touching a neighbour."""
    lo, hi = -(-start // PAGE) * PAGE, end // PAGE * PAGE
    return (lo, hi) if hi > lo else None


def merge_ranges(ranges) -> list[tuple[int, int]]:
    """Ranges sorted, the ones that overlap or touch joined into one."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return [(lo, hi) for lo, hi in merged]


MADV_WILLNEED = 3
MADV_DONTNEED = 4
MADV_PAGEOUT = 21
MADV_POPULATE_READ = 22
POSIX_FADV_DONTNEED = 4

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.restype = ctypes.c_int
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.mincore.restype = ctypes.c_int
_libc.syscall.restype = ctypes.c_long
_HAS_FADVISE = hasattr(os, "posix_fadvise")


def find_mapping(path: str) -> FileMapping | None:
    """The largest mapping of ``path`` in this process (platform_calls: /proc/self/maps on Linux)."""
    return platform_calls.find_mapping(path)


def mapping_rss_bytes(mapping: FileMapping) -> int | None:
    """Rss of the mapping's address range as the kernel accounts it (smaps on Linux; mincore on macOS)."""
    return platform_calls.mapping_rss_bytes(mapping)


class CacheReader:
    """Reads file ranges into the page cache with sendfile(2) to /dev/null.

    Why: the loader only needs the bytes in the page cache; llama.cpp's mapping is
    then populated from there (no disk I/O). sendfile reads through the page cache
    with this descriptor's default readahead (llama.cpp opened its own with
    POSIX_FADV_SEQUENTIAL, which measured 15-20 % slower) and neither copies the
    bytes to user space nor maps them, so there is no second set of page tables to
    build and tear down per shard.
    """

    def __init__(self, fd: int):
        self.fd = fd
        self._null = os.open(os.devnull, os.O_WRONLY)

    def read(self, file_start: int, file_end: int) -> None:
        """Bring [file_start, file_end) into the page cache (blocking)."""
        offset = file_start
        while offset < file_end:
            n = os.sendfile(self._null, self.fd, offset, file_end - offset)
            if n <= 0:
                raise OSError(errno.EIO, f"read stopped at byte {offset}: the file is shorter than its layout")
            offset += n

    def close(self) -> None:
        if self._null >= 0:
            os.close(self._null)
            self._null = -1


def madvise(start: int, end: int, advice: int) -> int:
    """0 on success, else errno."""
    lo = start // PAGE * PAGE
    if _libc.madvise(ctypes.c_void_p(lo), end - lo, advice) != 0:
        return ctypes.get_errno()
    return 0


def populate(start: int, end: int) -> str:
    """Fault a range in (blocking; call from an I/O thread). Returns the mechanism used."""
    err = madvise(start, end, MADV_POPULATE_READ)
    if err == 0:
        return "MADV_POPULATE_READ"
    if err in (errno.EINVAL, errno.ENOSYS):
        # Older kernels/macOS: ask for readahead, then touch one byte a page.
        madvise(start, end, MADV_WILLNEED)
        buf = (ctypes.c_char * (end - start)).from_address(start)
        for off in range(0, end - start, PAGE):
            _ = buf[off]
        return "MADV_WILLNEED+touch"
    raise OSError(err, f"madvise(POPULATE_READ) failed: {os.strerror(err)}")


def evict(start: int, end: int, fd: int | None, file_start: int) -> str:
    """Drop a range from memory *and* the page cache, so re-access reads the disk.

    Unmap first (``MADV_DONTNEED``), then drop the file
    range from the page cache (``FADV_DONTNEED``). Why not ``MADV_PAGEOUT`` for all
    of it: measured, it took 5-10 ms per 16 MB shard while llama.cpp's threads ran
    (0.3 ms in a quiet process), and compute slowed while it ran; unmap + drop
    takes ~1 ms. But DONTNEED alone leaves the bytes cached (they would
    come back for free and fake the SSD), and FADV_DONTNEED cannot drop a large
    folio that straddles the range's edge (the page cache holds 2 MB folios here).
    So mincore checks what survived, and only those pages are mapped again (from
    the cache: no disk read) and reclaimed with ``MADV_PAGEOUT``, which splits the
    folio — a few MB at a shard's edges instead of all of it.
    """
    if fd is None or not _HAS_FADVISE:
        if madvise(start, end, MADV_PAGEOUT):
            madvise(start, end, MADV_DONTNEED)
            return "MADV_DONTNEED (pages stay in the page cache)"
        return "MADV_PAGEOUT"
    madvise(start, end, MADV_DONTNEED)
    os.posix_fadvise(fd, file_start, end - start, POSIX_FADV_DONTNEED)
    mechanism = "MADV_DONTNEED+FADV_DONTNEED"
    for lo, hi in resident_runs(start, end):
        populate(lo, hi)
        madvise(lo, hi, MADV_PAGEOUT)
        os.posix_fadvise(fd, file_start + (lo - start), hi - lo, POSIX_FADV_DONTNEED)
        mechanism = "MADV_DONTNEED+FADV_DONTNEED, MADV_PAGEOUT at folio edges"
    return mechanism


def _mincore_vector(start: int, end: int) -> tuple[int, np.ndarray]:
    """(page-aligned start, one byte per page: 1 = in the page cache)."""
    lo = start // PAGE * PAGE
    length = end - lo
    n_pages = (length + PAGE - 1) // PAGE
    if n_pages <= 0:
        return lo, np.zeros(0, dtype=np.uint8)
    vec = (ctypes.c_ubyte * n_pages)()
    if _libc.mincore(ctypes.c_void_p(lo), length, vec) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mincore failed: {os.strerror(err)}")
    return lo, np.frombuffer(vec, dtype=np.uint8) & 1


def resident_runs(start: int, end: int) -> list[tuple[int, int]]:
    """Address runs of [start, end) still in the page cache (clipped to the range)."""
    lo, bits = _mincore_vector(start, end)
    if not bits.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], bits, [0])).astype(np.int8)))
    return [(max(start, lo + int(a) * PAGE), min(end, lo + int(b) * PAGE))
            for a, b in zip(edges[::2], edges[1::2])]


def resident_pages(start: int, end: int) -> int:
    """Pages of [start, end) in the page cache, per mincore (the independent check)."""
    return int(_mincore_vector(start, end)[1].sum())


def resident_bytes(start: int, end: int) -> int:
    return resident_pages(start, end) * PAGE


HULL_BYTES = 64 * 1024 * 1024  # spans this close share one mincore call (a 16 KiB vector)


def spans_resident_bytes(spans) -> int:
    """resident_bytes summed over many page-aligned address spans, with one mincore over each group
    of spans that lie within HULL_BYTES of each other (a layer's victims: dozens of small slices of
    a few tensors) instead of one call a span."""
    total = 0
    ordered = sorted(spans)
    i = 0
    while i < len(ordered):
        j = i + 1
        while j < len(ordered) and ordered[j][1] - ordered[i][0] <= HULL_BYTES:
            j += 1
        group = ordered[i:j]
        try:
            base, bits = _mincore_vector(group[0][0], max(hi for _, hi in group))
            total += sum(int(bits[(lo - base) // PAGE:(hi - base) // PAGE].sum()) for lo, hi in group) * PAGE
        except OSError:  # a hole between them (not one mapping): span by span
            total += sum(resident_bytes(lo, hi) for lo, hi in group)
        i = j
    return total


def cached_file_bytes(fd: int, offset: int, length: int) -> int | None:
    """Page-cache bytes of a file range (cachestat on Linux), None where the call does not exist
    (macOS: residency by mincore only)."""
    return platform_calls.cached_file_bytes(fd, offset, length)


def anonymous_spans(mapping: FileMapping) -> list[tuple[int, int]] | None:
    """The anonymous VMAs inside the mapping's range: own slots swapped in (None where unreadable)."""
    return platform_calls.anonymous_spans(mapping)


def model_bytes_in_ram(mapping: FileMapping, fd: int) -> int | None:
    """The model's bytes in RAM, read from the kernel two ways that scale with what is resident,
    not with the file: the file's page cache over the mapped range (cachestat) plus mincore over
    the anonymous pages swapped into the range. None where cachestat is missing, or nothing is
    swapped in (a page-cache run): then mincore over the mapping."""
    own = anonymous_spans(mapping)
    if not own:  # a page-cache run (or spans unreadable, macOS): mincore over the mapping is the reading
        return None  # the checks were built on
    cached = cached_file_bytes(fd, mapping.file_offset, mapping.end - mapping.start)
    if cached is None:
        return None
    return cached + sum(resident_bytes(lo, hi) for lo, hi in own)
