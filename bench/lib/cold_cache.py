"""Cold means cold: drop a file from the page cache, prove it with mincore, time a read.

Benches compare tok/s against the disk's own speed measured in the same run, so the
"SSD" is never the page cache at 7 GB/s by accident.
"""

from __future__ import annotations

import os
import time

import numpy as np

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MB_S, MIB


def cached_fraction(path: str) -> float:
    """Share of the file's pages in the page cache (mincore over a read-only mapping)."""
    view = np.memmap(path, dtype=np.uint8, mode="r")
    start = view.ctypes.data
    pages = memory_calls.resident_pages(start, start + view.size)
    total = (view.size + memory_calls.PAGE - 1) // memory_calls.PAGE
    del view
    return pages / total if total else 0.0


def drop_from_cache(path: str) -> float:
    """Evict the file from the page cache; returns the share still cached (≈ 0)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return cached_fraction(path)


def cold_read_mb_s(path: str, chunk: int = 8 * MIB) -> float:
    """Sequential read of the whole file from a cold cache, in 10^6 B/s."""
    left = drop_from_cache(path)
    if left > 0.02:
        raise RuntimeError(f"{path}: {left:.0%} still cached after eviction; cannot measure cold")
    fd = os.open(path, os.O_RDONLY)
    total = 0
    start = time.perf_counter()
    try:
        while data := os.read(fd, chunk):
            total += len(data)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    drop_from_cache(path)
    return total / MB_S / elapsed


def cold_populate_mb_s(path: str, chunk: int = 32 * MIB) -> float:
    """Cold read through a mapping with MADV_POPULATE_READ, in 10^6 B/s."""
    left = drop_from_cache(path)
    if left > 0.02:
        raise RuntimeError(f"{path}: {left:.0%} still cached after eviction; cannot measure cold")
    view = np.memmap(path, dtype=np.uint8, mode="r")
    start_addr = view.ctypes.data
    start = time.perf_counter()
    for lo in range(0, view.size, chunk):
        memory_calls.populate(start_addr + lo, start_addr + min(lo + chunk, view.size))
    elapsed = time.perf_counter() - start
    size = view.size
    del view
    drop_from_cache(path)
    return size / MB_S / elapsed


def disk_bound_mb_s(path: str) -> tuple[float, dict]:
    """The faster of two cold sequential reads (plain read(), mapped populate).

    Taking the faster one makes the bound stricter: efficiency is never flattered
    by a slow way of reading the disk.
    """
    reads = {"read()": cold_read_mb_s(path), "populate": cold_populate_mb_s(path)}
    return max(reads.values()), reads
