"""A second process that reads a run's counters from outside, on request.

Cross-checks are only worth something when the check does not share code or a
process with what it checks: this script is run as its own interpreter (stdlib
only, no engine import), reads /proc/<pid>/io, /proc/<pid>/status, /proc/<pid>/smaps
and /proc/diskstats (smaps: every VMA inside the model's address range, the streamer's
anonymous pages included), and asks the kernel for the model file's page-cache residency
through a mapping of its own (mincore never faults pages in, so that mapping holds
none and does not hinder eviction). One request line on stdin, one JSON line back:

    r                      -> {"t", "read_bytes", "vmrss", "disk_read_bytes", "cache_bytes"}
    s                      -> the same plus "smaps_rss" and "anon_rss" (walks the mapping: ~5 ms per GB)
    map START END OFFSET   -> the run's mapping (addresses) and its file offset
    ranges LO HI ...       -> {"resident_bytes"}: pages of these file ranges in the page cache
                              (mincore) or in the run's own anonymous pages there (pagemap)

Usage: python outside_watch.py PID MODEL_PATH
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import sys
import time


def _read_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise RuntimeError("no read_bytes in /proc/<pid>/io")


def _vmrss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/<pid>/status")


def _vmas(pid: int):
    """(start, end, anonymous?, Rss bytes) of every VMA of the process, from /proc/<pid>/smaps."""
    current = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            words = line.split()
            if words and "-" in words[0] and not words[0].endswith(":"):
                lo, hi = (int(x, 16) for x in words[0].split("-"))
                current = (lo, hi, len(words) < 6)
            elif current is not None and line.startswith("Rss:"):
                yield (*current, int(words[1]) * 1024)
                current = None


def _smaps_rss(pid: int, start: int, end: int) -> tuple[int, int]:
    """(Rss, Rss of the anonymous VMAs) of every VMA inside [start, end): the model's mapping is
    split where the streamer swapped its own (anonymous) pages in, and those pages are model bytes
    in RAM that no mapping of the file can see."""
    inside = [(anon, rss) for lo, hi, anon, rss in _vmas(pid) if start <= lo and hi <= end]
    return sum(rss for _, rss in inside), sum(rss for anon, rss in inside if anon)


# /proc/<pid>/pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst)
_PRESENT, _FILE_OR_SHARED = 1 << 63, 1 << 61


def _own_pages(pid: int, spans: list[tuple[int, int]]) -> list[bytes]:
    """Per page of each address span: 1 where the run holds a private anonymous page there (its own
    slot's page), 0 elsewhere; read page by page from /proc/<pid>/pagemap. (Rss of the anonymous
    VMAs inside a span is not enough: a slot's VMA covers the expert's pages outward, past the
    span's inward pages, and the kernel merges neighbouring slots into one VMA.)"""
    page = mmap.PAGESIZE
    out = []
    with open(f"/proc/{pid}/pagemap", "rb", buffering=0) as f:
        for lo, hi in spans:
            n = (hi - lo) // page
            f.seek(lo // page * 8)
            raw = f.read(8 * n)
            entries = memoryview(raw).cast("Q")
            out.append(bytes(1 if e & _PRESENT and not e & _FILE_OR_SHARED else 0 for e in entries))
    return out


def _disk_of(path: str) -> tuple[int, int] | None:
    """(major, minor) of the whole block device holding ``path``, if it has one."""
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    if major == 0:  # tmpfs, overlay: no block device to count
        return None
    sys_dir = f"/sys/dev/block/{major}:{minor}"
    if os.path.exists(os.path.join(sys_dir, "partition")):
        with open(os.path.join(os.path.realpath(sys_dir), "..", "dev")) as f:
            major, minor = (int(x) for x in f.read().split(":"))
    return major, minor


def _disk_read_bytes(disk: tuple[int, int] | None) -> int | None:
    if disk is None:
        return None
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                parts = line.split()
                if (int(parts[0]), int(parts[1])) == disk:
                    return int(parts[5]) * 512  # sectors read, always 512-byte units here
    except OSError:
        return None
    return None


class _PageCache:
    """mincore over our own read-only mapping of the model file (never touched)."""

    def __init__(self, path: str):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._libc = libc
        fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(fd).st_size
        addr = libc.mmap(None, self._size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        os.close(fd)  # the mapping keeps the file
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the model failed")
        self._addr = addr
        self.file_lo, self.file_hi = 0, self._size

    def resident_pages(self, file_lo: int, file_hi: int) -> bytes:
        """mincore's vector over page-aligned [file_lo, file_hi): one byte per page, bit 0 = cached."""
        page = mmap.PAGESIZE
        n_pages = (file_hi - file_lo) // page
        if n_pages <= 0:
            return b""
        vec = (ctypes.c_ubyte * n_pages)()
        if self._libc.mincore(self._addr + file_lo, file_hi - file_lo, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return bytes(v & 1 for v in vec)

    def resident(self, file_lo: int | None = None, file_hi: int | None = None) -> int:
        """Resident bytes of [file_lo, file_hi) (default: the engine's mapped range), whole pages."""
        page = mmap.PAGESIZE
        lo = (self.file_lo if file_lo is None else file_lo) // page * page
        hi = min(self._size, self.file_hi if file_hi is None else file_hi)
        n_pages = (hi - lo + page - 1) // page
        if n_pages <= 0:
            return 0
        vec = (ctypes.c_ubyte * n_pages)()
        if self._libc.mincore(self._addr + lo, hi - lo, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return (n_pages - bytes(vec).count(0)) * page


def main(argv: list[str]) -> int:
    pid, path = int(argv[1]), argv[2]
    disk = _disk_of(path)
    cache = _PageCache(path)
    map_start = map_end = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "map":
            map_start, map_end, offset = (int(w) for w in words[1:4])
            map_offset = offset
            cache.file_lo, cache.file_hi = offset, offset + (map_end - map_start)
            print("{}", flush=True)
            continue
        if words[0] == "ranges":  # page-aligned file ranges lo hi lo hi ...: e.g. the experts the engine holds
            numbers = [int(w) for w in words[1:]]
            spans = list(zip(numbers[::2], numbers[1::2]))
            cached = [cache.resident_pages(lo, hi) for lo, hi in spans]
            own = (_own_pages(pid, [(map_start + lo - map_offset, map_start + hi - map_offset) for lo, hi in spans])
                   if map_start is not None else [b"\0" * len(c) for c in cached])
            # A page is held when the page cache has it or the run's own slot does: counted once.
            held = sum(sum(a | b for a, b in zip(c, o)) for c, o in zip(cached, own)) * mmap.PAGESIZE
            print(json.dumps({"resident_bytes": held}), flush=True)
            continue
        reply = {
            "t": time.perf_counter(),
            "read_bytes": _read_bytes(pid),
            "vmrss": _vmrss(pid),
            "disk_read_bytes": _disk_read_bytes(disk),
            "cache_bytes": cache.resident(),
        }
        if words[0] == "s" and map_start is not None:
            reply["smaps_rss"], reply["anon_rss"] = _smaps_rss(pid, map_start, map_end)
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
