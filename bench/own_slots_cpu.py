"""Kernel CPU of the two ways to stream weights, on one file, cold: own slots (O_DIRECT into
recycled anonymous pages, mremap in, file mapped back out) vs the page cache (FADV_WILLNEED +
MADV_POPULATE_READ in, MADV_DONTNEED + FADV_DONTNEED out). 1.2 MiB ranges, a window of 40 resident.
Prints system CPU-seconds per GB for each (getrusage), and that the bytes match the file."""
import sys, os, time, resource
sys.path.insert(0,'/work/main')
from bench.moe_streaming import moe_model
from bench.cold_cache import drop_from_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.stream.direct_slots import DirectSlots, _libc, PROT_READ, MAP_SHARED
path = sys.argv[1] if len(sys.argv) > 1 else moe_model(640, 0.0)
size = os.path.getsize(path)
fd = os.open(path, os.O_RDONLY)
addr = _libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
m = memory_calls.FileMapping(os.path.realpath(path), addr, addr + size, 0)
CH = 1216*1024
def cpu(): return resource.getrusage(resource.RUSAGE_SELF).ru_stime
ds = DirectSlots(path, m)
import ctypes
def page_cache_round():
    drop_from_cache(path)
    c0 = cpu(); n = 0; off = 0; window = []
    while off + CH < size:
        lo, hi = memory_calls.page_outward(off, off + CH)
        os.posix_fadvise(fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
        memory_calls.populate(m.address(lo), m.address(hi)); window.append((lo, hi)); n += hi - lo; off += CH
        if len(window) > 40:
            a, b = window.pop(0); memory_calls.evict(m.address(a), m.address(b), fd, a)
    for a, b in window: memory_calls.evict(m.address(a), m.address(b), fd, a)
    return (cpu() - c0) / (n / 1e9)
for rnd in range(3):
    print(f"round {rnd}: page cache load+evict {page_cache_round():.3f} s/GB sys", flush=True)
    drop_from_cache(path)
    c0, t0 = cpu(), time.time(); n = 0; off = 0; window = []
    while off + CH < size:
        lo, hi = memory_calls.page_outward(off, off+CH)
        ds.load(lo, hi); window.append((lo, hi)); n += hi-lo; off += CH
        if len(window) > 40:
            ds.drop(*window.pop(0))
    for w in window: ds.drop(*w)
    c1, t1 = cpu(), time.time()
    # correctness: compare a slice read via mapping after load
    lo, hi = memory_calls.page_outward(5*CH, 6*CH); ds.load(lo, hi)
    data = ctypes.string_at(m.address(lo), hi-lo)
    os.lseek(fd, lo, 0); ref = os.read(fd, hi-lo); ds.drop(lo, hi)
    print(f"round {rnd}: own slots  load+drop {(c1-c0)/(n/1e9):.3f} s/GB sys, {n/1e6/(t1-t0):.0f} MB/s, same bytes {data==ref}, pooled {ds._pooled>>20} MiB, resident now {memory_calls.resident_bytes(m.start, m.end)>>20} MiB", flush=True)
