"""Kernel CPU of the two ways to stream weights, on one file, cold: own slots (O_DIRECT into
recycled anonymous pages, mremap in, file mapped back out) vs the page cache (FADV_WILLNEED +
MADV_POPULATE_READ in, MADV_DONTNEED + FADV_DONTNEED out). 1.2 MiB ranges, a window of 40 resident.
Prints system CPU-seconds per GB for each (getrusage), and that the bytes match the file.

    python -m bench.studies.own_slots_cpu [MODEL.gguf]   (default: bench.goals.moe_streaming's 640 MB MoE)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
import time

from bench.goals.moe_streaming import moe_model
from bench.lib.cold_cache import drop_from_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.stream.direct_slots import MAP_SHARED, PROT_READ, DirectSlots

CH = 1216 * 1024  # one range: 1.2 MiB
WINDOW = 40  # ranges resident at once

# The study maps the file itself, as llama.cpp would (a read-only shared mapping), with its own libc handle.
libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
libc.mmap.restype = ctypes.c_void_p


def cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def page_cache_round(path: str, fd: int, m, size: int) -> float:
    drop_from_cache(path)
    c0 = cpu()
    n = off = 0
    window = []
    while off + CH < size:
        lo, hi = memory_calls.page_outward(off, off + CH)
        os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
        memory_calls.populate(m.address(lo), m.address(hi))
        window.append((lo, hi))
        n += hi - lo
        off += CH
        if len(window) > WINDOW:
            a, b = window.pop(0)
            memory_calls.evict(m.address(a), m.address(b), fd, a)
    for a, b in window:
        memory_calls.evict(m.address(a), m.address(b), fd, a)
    return (cpu() - c0) / (n / 1e9)


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else moe_model(640, 0.0)
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    m = memory_calls.FileMapping(os.path.realpath(path), addr, addr + size, 0)
    ds = DirectSlots(path, m)
    for rnd in range(3):
        print(f"round {rnd}: page cache load+evict {page_cache_round(path, fd, m, size):.3f} s/GB sys", flush=True)
        drop_from_cache(path)
        c0, t0 = cpu(), time.time()
        n = off = 0
        window = []
        while off + CH < size:
            lo, hi = memory_calls.page_outward(off, off + CH)
            ds.load(lo, hi)
            window.append((lo, hi))
            n += hi - lo
            off += CH
            if len(window) > WINDOW:
                ds.drop(*window.pop(0))
        for w in window:
            ds.drop(*w)
        c1, t1 = cpu(), time.time()
        # correctness: a slice read through the mapping after a load is the file's bytes
        lo, hi = memory_calls.page_outward(5 * CH, 6 * CH)
        ds.load(lo, hi)
        data = ctypes.string_at(m.address(lo), hi - lo)
        os.lseek(fd, lo, 0)
        ref = os.read(fd, hi - lo)
        ds.drop(lo, hi)
        resident = memory_calls.resident_bytes(m.start, m.end) >> 20
        print(f"round {rnd}: own slots  load+drop {(c1 - c0) / (n / 1e9):.3f} s/GB sys, "
              f"{n / 1e6 / (t1 - t0):.0f} MB/s, same bytes {data == ref}, resident now {resident} MiB", flush=True)


if __name__ == "__main__":
    main()
