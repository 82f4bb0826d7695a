"""The few calls that differ between Linux and macOS, in one room: every one has a Linux twin
and a macOS twin with the same signature, and the exported name is the twin of this system.

| interface | Linux | macOS (Apple silicon) |
|---|---|---|
| ``open_uncached(path)`` | ``open(O_DIRECT)`` | ``open`` + ``fcntl(F_NOCACHE, 1)`` |
| ``process_read_bytes(pid)`` | ``/proc/<pid>/io`` ``read_bytes`` | ``proc_pid_rusage(V2)`` ``ri_diskio_bytesread`` |
| ``footprint_bytes()`` | ``/proc/self/smaps_rollup`` Anonymous + Swap | ``task_info(TASK_VM_INFO)`` footprint |
| ``peak_rss_bytes()`` / ``reset_peak_rss()`` | ``VmHWM`` / ``clear_refs`` | ``resident_size_peak`` / cannot reset |
| ``cached_file_bytes(fd, off, len)`` | ``cachestat(2)`` | None: residency by ``mincore`` only |
| ``find_mapping(path)`` | ``/proc/self/maps`` | ``mach_vm_region`` + ``proc_regionfilename`` |
| ``mapping_rss_bytes(m)`` | ``/proc/self/smaps`` Rss | ``mincore`` over the range |
| ``anonymous_spans(m)`` | ``/proc/self/maps`` | None (the slots' own books say it) |
| ``reopen(fd, path)`` | ``/proc/self/fd/N`` | ``open(path)`` |
| ``max_map_count()`` | ``/proc/sys/vm/max_map_count`` | no such limit: the Linux default |
| ``has_mremap()`` | ``mremap`` in libc | no ``mremap``: the portable I/O path |
| ``advise_huge(addr, len)`` | ``madvise(MADV_HUGEPAGE)`` | no-op |

macOS signatures are typed from Apple's headers (<sys/resource.h>, <libproc.h>,
<mach/task_info.h>, <mach/vm_region.h>, <sys/fcntl.h>); they are loaded lazily, so this module
imports everywhere. docs/macos.md lists what ran here (Linux twins, each used by a test) and
what could not (the macOS twins).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import sys
from typing import Callable

from shardscope.engine.base.file_mapping import FileMapping

IS_LINUX = sys.platform.startswith("linux")
IS_MACOS = sys.platform == "darwin"
PAGE = mmap.PAGESIZE
LINUX_MAX_MAP_COUNT = 65530

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _mapping_type():
    return FileMapping


# --------------------------------------------------------------- uncached reads
def linux_open_uncached(path: str) -> int:
    """A read-only descriptor whose reads bypass the page cache (O_DIRECT: buffer, offset and
    length aligned to the block size)."""
    if not hasattr(os, "O_DIRECT"):
        raise OSError(errno.EOPNOTSUPP, "no O_DIRECT on this system")
    return os.open(path, os.O_RDONLY | os.O_DIRECT)


F_NOCACHE = 48  # <sys/fcntl.h>


def macos_open_uncached(path: str) -> int:
    """macOS: a plain descriptor with ``fcntl(F_NOCACHE, 1)`` (reads do not stay in the unified
    buffer cache; alignment is advised, not required)."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, F_NOCACHE, 1)
    except OSError:
        os.close(fd)
        raise
    return fd


# --------------------------------------------------------------- process disk bytes
def linux_process_read_bytes(pid: int | None = None) -> int | None:
    """Bytes the kernel read from storage for the process (``/proc/<pid>/io`` read_bytes)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class _RusageInfoV2(ctypes.Structure):  # <sys/resource.h> struct rusage_info_v2
    _fields_ = [("ri_uuid", ctypes.c_uint8 * 16)] + [(name, ctypes.c_uint64) for name in (
        "ri_user_time", "ri_system_time", "ri_pkg_idle_wkups", "ri_interrupt_wkups", "ri_pageins",
        "ri_wired_size", "ri_resident_size", "ri_phys_footprint", "ri_proc_start_abstime",
        "ri_proc_exit_abstime", "ri_child_user_time", "ri_child_system_time", "ri_child_pkg_idle_wkups",
        "ri_child_interrupt_wkups", "ri_child_pageins", "ri_child_elapsed_abstime", "ri_diskio_bytesread",
        "ri_diskio_byteswritten")]


RUSAGE_INFO_V2 = 2
_libproc = None


def _proc_lib():
    global _libproc
    if _libproc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("proc") or "/usr/lib/libproc.dylib", use_errno=True)
        lib.proc_pid_rusage.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        lib.proc_pid_rusage.restype = ctypes.c_int
        lib.proc_regionfilename.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint32]
        lib.proc_regionfilename.restype = ctypes.c_int
        _libproc = lib
    return _libproc


def macos_process_read_bytes(pid: int | None = None) -> int | None:
    """macOS: ``proc_pid_rusage(pid, RUSAGE_INFO_V2)`` → ``ri_diskio_bytesread``."""
    info = _RusageInfoV2()
    try:
        if _proc_lib().proc_pid_rusage(pid or os.getpid(), RUSAGE_INFO_V2, ctypes.byref(info)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return int(info.ri_diskio_bytesread)


# --------------------------------------------------------------- memory footprint and peak
def _smaps_rollup() -> dict[str, int]:
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            words = line.split()
            if len(words) >= 3 and words[0].endswith(":") and words[2] == "kB":
                out[words[0][:-1]] = int(words[1]) * 1024
    return out


def linux_footprint_bytes() -> int | None:
    """The process's own memory (what macOS's phys_footprint counts, and iOS's per-app limit):
    anonymous pages plus swapped ones, from ``/proc/self/smaps_rollup``. File pages (the model's
    page cache) are not in it; the streamer's own slots are anonymous and are."""
    try:
        rollup = _smaps_rollup()
    except OSError:
        return None
    return rollup.get("Anonymous", 0) + rollup.get("Swap", 0)


TASK_VM_INFO = 22  # <mach/task_info.h>
_PHYS_FOOTPRINT_AT = 144  # struct task_vm_info: byte offset of phys_footprint (mach_vm_size_t)
_RESIDENT_PEAK_AT = 24  # ... of resident_size_peak


def _task_vm_info() -> bytes | None:
    try:
        task = ctypes.c_uint.in_dll(_libc, "mach_task_self_").value  # mach_task_self() is this global
        buf = (ctypes.c_uint8 * 512)()
        count = ctypes.c_uint(len(buf) // 4)  # in natural_t units
        _libc.task_info.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)]
        _libc.task_info.restype = ctypes.c_int
        if _libc.task_info(task, TASK_VM_INFO, buf, ctypes.byref(count)) != 0:
            return None
        return bytes(buf)
    except (ValueError, AttributeError, OSError):
        return None


def macos_footprint_bytes() -> int | None:
    """macOS: ``task_info(mach_task_self(), TASK_VM_INFO)`` → ``phys_footprint``."""
    raw = _task_vm_info()
    return None if raw is None else int.from_bytes(raw[_PHYS_FOOTPRINT_AT:_PHYS_FOOTPRINT_AT + 8], "little")


def linux_peak_rss_bytes() -> int | None:
    """The resident set's high-water mark since the last reset (``VmHWM``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def macos_peak_rss_bytes() -> int | None:
    """macOS: ``task_vm_info.resident_size_peak`` (since the process started: it cannot be reset)."""
    raw = _task_vm_info()
    return None if raw is None else int.from_bytes(raw[_RESIDENT_PEAK_AT:_RESIDENT_PEAK_AT + 8], "little")


def linux_reset_peak_rss() -> str | None:
    """Start a new high-water mark (``/proc/self/clear_refs`` 5); None when done, else why not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError as exc:
        return f"/proc/self/clear_refs: {exc.strerror}"
    return None


def macos_reset_peak_rss() -> str | None:
    return "macOS has no /proc/self/clear_refs: the peak RSS is the process's since it started"


# --------------------------------------------------------------- the file's page cache
class _CacheRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _CacheStat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


_SYS_CACHESTAT = 451  # Linux ≥ 6.5, the same number on every architecture


def linux_cached_file_bytes(fd: int, offset: int, length: int) -> int | None:
    """Page-cache bytes of a file range (cachestat(2)), None where the call does not exist.
    It walks only the cached pages, so a 30 GB file costs microseconds, where mincore over a
    mapping of it looks each of its 7 million pages up (57 ms and more)."""
    stat, rng = _CacheStat(), _CacheRange(offset, length)
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(stat), 0) != 0:
        return None
    return stat.cache * PAGE


def macos_cached_file_bytes(fd: int, offset: int, length: int) -> int | None:
    """macOS has no cachestat: None, and the callers read residency by mincore over the mapping."""
    return None


# --------------------------------------------------------------- where the model is mapped
def linux_find_mapping(path: str):
    """The largest mapping of ``path`` in this process (``/proc/self/maps``), a FileMapping or None."""
    FileMapping = _mapping_type()
    real = os.path.realpath(path)
    best = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) < 6 or parts[5].strip() != real:
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if best is None or hi - lo > best.end - best.start:
                best = FileMapping(real, lo, hi, int(parts[2], 16))
    return best


VM_REGION_BASIC_INFO_64 = 9  # <mach/vm_region.h>; the struct is #pragma pack(4), 9 natural_t
_REGION_OFFSET_AT = 20  # vm_region_basic_info_64: protection, max_protection, inheritance, shared, reserved, offset


def _macos_regions():
    """(start, end, file offset, path or "") of every region of this task, in address order."""
    task = ctypes.c_uint.in_dll(_libc, "mach_task_self_").value
    fn = _libc.mach_vm_region
    fn.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), ctypes.c_int,
                   ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]
    fn.restype = ctypes.c_int
    address, size = ctypes.c_uint64(0), ctypes.c_uint64(0)
    info = (ctypes.c_uint8 * 64)()
    name = ctypes.c_uint(0)
    buf = ctypes.create_string_buffer(4096)
    while True:
        count = ctypes.c_uint(9)
        if fn(task, ctypes.byref(address), ctypes.byref(size), VM_REGION_BASIC_INFO_64, info,
              ctypes.byref(count), ctypes.byref(name)) != 0:
            return
        n = _proc_lib().proc_regionfilename(os.getpid(), address.value, buf, len(buf))
        path = buf.raw[:n].decode(errors="replace") if n > 0 else ""
        offset = int.from_bytes(bytes(info)[_REGION_OFFSET_AT:_REGION_OFFSET_AT + 8], "little")
        yield address.value, address.value + size.value, offset, path
        address.value += size.value


def macos_find_mapping(path: str):
    """macOS: the task's regions (``mach_vm_region``) named by ``proc_regionfilename``; adjacent
    regions of the same file at consecutive offsets are one mapping (the VM splits them)."""
    FileMapping = _mapping_type()
    real = os.path.realpath(path)
    best, current = None, None
    try:
        for lo, hi, offset, name in _macos_regions():
            if name != real:
                current = None
                continue
            if current and current.end == lo and current.file_offset + (lo - current.start) == offset:
                current = FileMapping(real, current.start, hi, current.file_offset)
            else:
                current = FileMapping(real, lo, hi, offset)
            if best is None or current.end - current.start > best.end - best.start:
                best = current
    except (ValueError, AttributeError, OSError):
        return None
    return best


def linux_mapping_rss_bytes(mapping) -> int | None:
    """Rss of the mapping's address range as the kernel accounts it (smaps): resident weight bytes,
    summed over every VMA inside it (the expert streamer swaps anonymous pages into the range)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                lo, hi = (int(x, 16) for x in first.split("-"))
                inside = mapping.start <= lo and hi <= mapping.end
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


def macos_mapping_rss_bytes(mapping) -> int | None:
    """macOS has no smaps: mincore over the range (own anonymous pages and cached file pages alike)."""
    n_pages = -(-(mapping.end - mapping.start) // PAGE)
    vec = (ctypes.c_ubyte * n_pages)()
    _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    if _libc.mincore(ctypes.c_void_p(mapping.start), mapping.end - mapping.start, vec) != 0:
        return None
    return sum(b & 1 for b in bytes(vec)) * PAGE


def linux_anonymous_spans(mapping) -> list[tuple[int, int]] | None:
    """The anonymous VMAs inside the mapping's range (``/proc/self/maps``): own slots swapped in."""
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo >= mapping.start and hi <= mapping.end and (len(parts) < 6 or not parts[5].strip()):
                spans.append((lo, hi))
    return spans


def macos_anonymous_spans(mapping) -> list[tuple[int, int]] | None:
    """macOS: not read (the slots' own books hold the exact pieces); None."""
    return None


# --------------------------------------------------------------- descriptors and limits
def linux_reopen(fd: int, path: str) -> int:
    """A new open file description of the same file (its own readahead mode): ``/proc/self/fd/N``
    opens exactly the file ``fd`` holds, even if ``path`` was replaced since."""
    return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)


def macos_reopen(fd: int, path: str) -> int:
    """macOS: ``path`` again (the file guard notices a replaced file)."""
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def linux_max_map_count(default: int = LINUX_MAX_MAP_COUNT) -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return default


def macos_max_map_count(default: int = LINUX_MAX_MAP_COUNT) -> int:
    """macOS has no vm.max_map_count; the Linux default keeps the same bound on held ranges."""
    return default


def linux_has_mremap() -> bool:
    return hasattr(_libc, "mremap")


def macos_has_mremap() -> bool:
    return False


HUGE = 2 * 1024 * 1024
MADV_HUGEPAGE = 14  # Linux <asm-generic/mman-common.h>


def linux_advise_huge(address: int, length: int) -> bool:
    """Ask for transparent huge pages on fresh anonymous memory before it is faulted in (THP in
    "madvise" mode here): an O_DIRECT read into it then faults once per 2 MiB, not per 4 KiB.
    True when the range holds a whole aligned 2 MiB block and the kernel took the advice."""
    if -(-address // HUGE) * HUGE + HUGE > address + length:
        return False
    _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return _libc.madvise(ctypes.c_void_p(address), length, MADV_HUGEPAGE) == 0


def macos_advise_huge(address: int, length: int) -> bool:
    """macOS: no such advice (the VM picks its page size): False."""
    return False


# --------------------------------------------------------------- this system's twins
EXPORTED = ("open_uncached", "process_read_bytes", "footprint_bytes", "peak_rss_bytes", "reset_peak_rss",
            "cached_file_bytes", "find_mapping", "mapping_rss_bytes", "anonymous_spans", "reopen",
            "max_map_count", "has_mremap", "advise_huge")


def twin(name: str, system: str) -> Callable:
    """The ``system`` ("linux" or "macos") implementation of exported ``name``."""
    return globals()[f"{system}_{name}"]


SYSTEM = "macos" if IS_MACOS else "linux"
open_uncached = twin("open_uncached", SYSTEM)
process_read_bytes = twin("process_read_bytes", SYSTEM)
footprint_bytes = twin("footprint_bytes", SYSTEM)
peak_rss_bytes = twin("peak_rss_bytes", SYSTEM)
reset_peak_rss = twin("reset_peak_rss", SYSTEM)
cached_file_bytes = twin("cached_file_bytes", SYSTEM)
find_mapping = twin("find_mapping", SYSTEM)
mapping_rss_bytes = twin("mapping_rss_bytes", SYSTEM)
anonymous_spans = twin("anonymous_spans", SYSTEM)
reopen = twin("reopen", SYSTEM)
max_map_count = twin("max_map_count", SYSTEM)
has_mremap = twin("has_mremap", SYSTEM)
advise_huge = twin("advise_huge", SYSTEM)

# llama.cpp adds MAP_POPULATE to its model mapping only on Linux (src/llama-mmap.cpp, __linux__):
# elsewhere the mapping is lazy already and needs no rewritten GOT (engine/stream/lazy_mapping.py).
LOAD_POPULATES = IS_LINUX
# Linux-only comparisons and counters that are skipped elsewhere, each with its one-line reason.
LINUX_ONLY = {
    "cgroup": "plain-mmap comparison under a memory cgroup needs Linux cgroups",
    "clear_refs": "/proc/self/clear_refs (peak RSS reset) is Linux-only",
    "outside_watch": "the outside watch reads /proc/<pid> of the run: Linux-only",
}


def linux_only(what: str) -> str | None:
    """None on Linux, else the one-line reason ``what`` is skipped here."""
    return None if IS_LINUX else f"skipped on {sys.platform}: {LINUX_ONLY[what]}"


__all__ = [*EXPORTED, "IS_LINUX", "IS_MACOS", "SYSTEM", "LOAD_POPULATES", "twin", "linux_only", "F_NOCACHE"]
