"""Load a model without reading it: llama.cpp's mapping of the model file, minus MAP_POPULATE.

llama.cpp (src/llama-mmap.cpp) maps the model with ``MAP_POPULATE`` and then
``posix_madvise(WILLNEED)`` over the whole file whenever prefetch is on, and it is on for
every mmap load; no parameter or environment variable turns it off. For a model larger
than RAM that reads the whole file before the first token (27 GB, ~45 s here; ~26 min for
1.56 TB over a 1 GB/s SSD), only for the streamer to drop it again.

The fix needs no rebuilt llama.cpp: libllama calls ``mmap`` and ``posix_madvise`` through
its global offset table, so rewriting those two GOT slots (once, in this process) with
small wrappers lets us drop the populate and the WILLNEED for the model file while
every other call goes straight through to libc. The slot addresses come from the ELF
relocation tables of the library file itself (.rela.plt / .rela.dyn), the load base from
/proc/self/maps. Where any of this is unavailable (not Linux/ELF x86-64 or aarch64, a
symbol not imported) :func:`install` returns the reason and the load reads the model as
before — the run says so; nothing else changes. On macOS llama.cpp maps without MAP_POPULATE
(that branch is ``__linux__``), so the mapping is lazy with nothing rewritten; its
``posix_madvise(WILLNEED)`` over the file stays there (a Mach-O rewrite is not done: docs/macos.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import struct
import sys
import threading

from shardscope.engine.base import platform_calls

MAP_POPULATE = 0x8000
POSIX_MADV_WILLNEED = 3
_R_JUMP_SLOT = {62: 7, 183: 1026}  # e_machine → R_X86_64_JUMP_SLOT / R_AARCH64_JUMP_SLOT
_R_GLOB_DAT = {62: 6, 183: 1025}
_PAGE = mmap.PAGESIZE
_PROT_READ, _PROT_WRITE = 1, 2

_MMAP = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                         ctypes.c_int, ctypes.c_int64)
_MADVISE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_real_mmap = _MMAP(("mmap", _libc))
_real_posix_madvise = _MADVISE(("posix_madvise", _libc))
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_lock = threading.Lock()
_state: dict = {"installed": None, "reason": None, "lazy_files": set(), "lazy_ranges": [], "skipped": 0}


def _is_lazy_file(fd: int) -> bool:
    try:
        st = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in _state["lazy_files"]


@_MMAP
def _mmap_hook(addr, length, prot, flags, fd, offset):
    if flags & MAP_POPULATE and fd >= 0 and _is_lazy_file(fd):
        flags &= ~MAP_POPULATE
        result = _real_mmap(addr, length, prot, flags, fd, offset)
        if result not in (None, ctypes.c_void_p(-1).value):
            _state["lazy_ranges"].append((result, result + length))
            _state["skipped"] += 1
        return result
    result = _real_mmap(addr, length, prot, flags, fd, offset)
    if result not in (None, ctypes.c_void_p(-1).value) and _state["lazy_ranges"]:
        # Addresses of an unmapped lazy model may be reused by an eager one: forget them.
        _state["lazy_ranges"] = [(lo, hi) for lo, hi in _state["lazy_ranges"]
                                 if hi <= result or lo >= result + length]
    return result


@_MADVISE
def _posix_madvise_hook(addr, length, advice):
    if advice == POSIX_MADV_WILLNEED and addr is not None:
        if any(lo <= addr < hi for lo, hi in _state["lazy_ranges"]):
            return 0  # the readahead of the whole file that MAP_POPULATE's removal would otherwise become
    return _real_posix_madvise(addr, length, advice)


def _elf_got_slots(path: str, names: set[str]) -> tuple[dict[str, list[int]], int]:
    """{symbol: [GOT slot offsets]} from the library file's relocations, and e_machine."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise OSError(f"{path}: not a 64-bit little-endian ELF")
    e_machine = struct.unpack_from("<H", data, 18)[0]
    if e_machine not in _R_JUMP_SLOT:
        raise OSError(f"{path}: machine {e_machine} not supported")
    e_shoff, = struct.unpack_from("<Q", data, 40)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    slots: dict[str, list[int]] = {}
    wanted_types = {_R_JUMP_SLOT[e_machine], _R_GLOB_DAT[e_machine]}
    for sh in sections:
        if sh[1] != 4 or sh[9] != 24:  # SHT_RELA entries of 24 bytes
            continue
        symtab = sections[sh[6]]
        strtab = sections[symtab[6]]
        for i in range(sh[5] // 24):
            r_offset, r_info, _ = struct.unpack_from("<QQq", data, sh[4] + i * 24)
            if r_info & 0xFFFFFFFF not in wanted_types:
                continue
            st_name, = struct.unpack_from("<I", data, symtab[4] + (r_info >> 32) * symtab[9])
            end = data.index(b"\0", strtab[4] + st_name)
            name = data[strtab[4] + st_name:end].decode()
            if name in names:
                slots.setdefault(name, []).append(r_offset)
    return slots, e_machine


def _load_base(path: str) -> int:
    real = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and os.path.realpath(fields[5]) == real and int(fields[2], 16) == 0:
                return int(fields[0].split("-")[0], 16)
    raise OSError(f"{path} is not mapped in this process")


def _write_pointer(address: int, value: int) -> None:
    page = address // _PAGE * _PAGE
    if _libc.mprotect(page, _PAGE, _PROT_READ | _PROT_WRITE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect of the GOT failed")
    ctypes.c_void_p.from_address(address).value = value
    # RELRO pages go back to read-only; a plain .got.plt page was writable anyway and stays so.
    _libc.mprotect(page, _PAGE, _PROT_READ)


def _install(library_path: str) -> None:
    slots, _ = _elf_got_slots(library_path, {"mmap", "mmap64", "posix_madvise"})
    if not (slots.get("mmap") or slots.get("mmap64")):
        raise OSError(f"{os.path.basename(library_path)} does not import mmap")
    base = _load_base(library_path)
    hooks = {"mmap": _mmap_hook, "mmap64": _mmap_hook, "posix_madvise": _posix_madvise_hook}
    for name, offsets in slots.items():
        target = ctypes.cast(hooks[name], ctypes.c_void_p).value
        for offset in offsets:
            _write_pointer(base + offset, target)


def libllama_path() -> str:
    import llama_cpp  # deferred: loading llama.cpp is what this module prepares for

    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in ("libllama.so", "libllama.dylib"):
        if os.path.exists(os.path.join(lib_dir, name)):
            return os.path.join(lib_dir, name)
    return ""


def install() -> str | None:
    """Hook libllama's mmap/posix_madvise once; None when active, else why not (said once by the run)."""
    with _lock:
        if _state["installed"] is None:
            try:
                if not platform_calls.LOAD_POPULATES:  # macOS: llama.cpp maps without MAP_POPULATE there
                    _state["installed"] = True  # (its WILLNEED over the file stays: no GOT rewrite for Mach-O)
                    return None
                if not sys.platform.startswith("linux"):
                    raise OSError("not Linux (llama.cpp adds MAP_POPULATE only on Linux)")
                path = libllama_path()
                if not path.endswith(".so"):
                    raise OSError("libllama.so not found")
                _install(path)
                _state["installed"] = True
            except (OSError, ValueError, struct.error) as exc:
                _state["installed"], _state["reason"] = False, str(exc)
        return None if _state["installed"] else _state["reason"]


def load_lazily(path: str) -> str | None:
    """From now on llama.cpp maps ``path`` without reading it; None when active, else why not."""
    reason = install()
    if reason is None:
        st = os.stat(path)
        with _lock:
            _state["lazy_files"].add((st.st_dev, st.st_ino))
    return reason


def load_eagerly(path: str) -> None:
    """Back to llama.cpp's own load for ``path`` (its next load, e.g. once it fits the budget)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    with _lock:
        _state["lazy_files"].discard((st.st_dev, st.st_ino))


def populates_skipped() -> int:
    """How many model mappings were made without MAP_POPULATE (tests read it)."""
    return _state["skipped"]


__all__ = ["install", "load_lazily", "load_eagerly", "populates_skipped", "libllama_path"]
