"""The platform room: every exported call has a Linux twin and a macOS twin of one signature, and
each Linux twin is checked here against a source it does not compute (another mapping's mincore,
psutil, bytes written by the test, /proc read by the test itself)."""

from __future__ import annotations

import ctypes
import inspect
import mmap
import os
import subprocess
import sys

import numpy as np
import psutil
import pytest

from conftest import drop_from_page_cache
from shardscope.engine.base import platform_calls as pc

MIB = 1024 * 1024
linux = pytest.mark.skipif(not pc.IS_LINUX, reason="the Linux twins run on Linux")


def test_the_module_imports_and_every_export_has_two_twins_of_one_signature():
    # a fresh interpreter: importing the room alone must not fail (its macOS calls load lazily)
    subprocess.run([sys.executable, "-c", "import shardscope.engine.base.platform_calls"], check=True)
    for name in pc.EXPORTED:
        ours, mac = pc.twin(name, "linux"), pc.twin(name, "macos")
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(mac).parameters), name
        assert getattr(pc, name) is pc.twin(name, pc.SYSTEM), name
    assert set(pc.EXPORTED) <= set(pc.__all__)


def _file(tmp_path, size=8 * MIB):
    path = tmp_path / "blob.bin"
    data = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    drop_from_page_cache(str(path))
    return path, data


def _map(path, prot=mmap.PROT_READ, flags=mmap.MAP_SHARED) -> tuple[int, int]:
    """(address, size) of a mapping of ``path`` made by the test itself with libc's mmap."""
    from shardscope.engine.stream.direct_slots import libc

    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, prot, flags, fd, 0)
    finally:
        os.close(fd)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    return addr, size


def _unmap(addr: int, size: int) -> None:
    from shardscope.engine.stream.direct_slots import libc

    libc.munmap(addr, size)


def _cached_pages(path) -> int:
    """mincore over a mapping of our own (never touched): the file's pages in the page cache."""
    from shardscope.engine.base.memory_calls import resident_pages

    addr, size = _map(path)
    try:
        return resident_pages(addr, addr + size)
    finally:
        _unmap(addr, size)


@linux
def test_uncached_reads_bypass_the_page_cache_and_count_as_disk_reads(tmp_path):
    path, data = _file(tmp_path)
    try:
        fd = pc.linux_open_uncached(str(path))
    except OSError as exc:
        pytest.skip(f"no O_DIRECT here ({exc.strerror})")
    buf = mmap.mmap(-1, 4 * MIB)
    try:
        read0 = pc.linux_process_read_bytes()
        io0 = psutil.Process().io_counters().read_bytes
        assert os.preadv(fd, [buf], 2 * MIB) == 4 * MIB
        assert bytes(buf) == data[2 * MIB:6 * MIB]
        assert pc.linux_process_read_bytes() - read0 >= 4 * MIB  # counted as read from the disk
        assert psutil.Process().io_counters().read_bytes - io0 >= 4 * MIB  # and psutil agrees
        assert _cached_pages(path) < 4 * MIB // pc.PAGE // 10  # nothing of it stayed in the page cache
        assert pc.linux_cached_file_bytes(fd, 0, len(data)) < 4 * MIB // 10
    finally:
        buf.close()
        os.close(fd)


@linux
def test_cachestat_agrees_with_mincore(tmp_path):
    path, data = _file(tmp_path)
    with open(path, "rb") as f:
        f.seek(3 * MIB)
        f.read(2 * MIB)  # through the page cache
        got = pc.linux_cached_file_bytes(f.fileno(), 0, len(data))
    if got is None:
        pytest.skip("no cachestat on this kernel (< 6.5)")
    assert got == _cached_pages(path) * pc.PAGE and got >= 2 * MIB
    assert pc.macos_cached_file_bytes(0, 0, 1) is None  # macOS: residency by mincore only


@linux
def test_footprint_and_peak_follow_memory_the_test_touches():
    foot0, rss0 = pc.linux_footprint_bytes(), psutil.Process().memory_info().rss
    assert pc.linux_reset_peak_rss() is None
    assert abs(pc.linux_peak_rss_bytes() - psutil.Process().memory_info().rss) < 16 * MIB  # reset to now
    block = mmap.mmap(-1, 64 * MIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # like own slots
    block.write(b"\1" * (64 * MIB))  # touched: 64 MiB of anonymous memory
    try:
        assert pc.linux_footprint_bytes() - foot0 >= 60 * MIB
        assert psutil.Process().memory_info().rss - rss0 >= 60 * MIB  # psutil sees the same memory
    finally:
        block.close()
    assert pc.linux_peak_rss_bytes() >= rss0 + 60 * MIB  # the high-water mark kept it
    assert pc.macos_reset_peak_rss()  # macOS cannot reset: a one-line reason, never an exception


@linux
def test_find_mapping_rss_and_anonymous_spans_see_a_mapping_the_test_made(tmp_path):
    from shardscope.engine.stream.direct_slots import MAP_ANONYMOUS, MAP_FIXED, MAP_PRIVATE, PROT_WRITE, libc

    path, data = _file(tmp_path)
    addr, size = _map(path, mmap.PROT_READ | PROT_WRITE, MAP_PRIVATE)
    try:
        found = pc.linux_find_mapping(str(path))
        assert (found.start, found.end, found.file_offset) == (addr, addr + len(data), 0)
        assert pc.linux_mapping_rss_bytes(found) == 0  # nothing touched yet
        ctypes.memmove(addr + MIB, data[MIB:3 * MIB], 2 * MIB)  # touch 2 MiB (private copies)
        assert pc.linux_mapping_rss_bytes(found) >= 2 * MIB
        # mincore is POSIX, so the macOS twin runs here too: it also counts the file's cached pages
        # (the copy's read pulled the file in), so it reads at least what smaps maps
        assert pc.linux_mapping_rss_bytes(found) <= pc.macos_mapping_rss_bytes(found) <= len(data)
        own = libc.mmap(addr + 4 * MIB, MIB, mmap.PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                         0)
        assert own == addr + 4 * MIB
        assert pc.linux_anonymous_spans(found) == [(addr + 4 * MIB, addr + 5 * MIB)]
        assert pc.macos_anonymous_spans(found) is None
    finally:
        _unmap(addr, size)


@linux
def test_reopen_gives_a_descriptor_of_its_own_on_the_same_file(tmp_path):
    path, data = _file(tmp_path, MIB)
    fd = os.open(path, os.O_RDONLY)
    other = pc.linux_reopen(fd, str(path))
    try:
        os.lseek(fd, 1000, os.SEEK_SET)
        assert os.lseek(other, 0, os.SEEK_CUR) == 0  # an open file description of its own
        assert os.pread(other, 64, 4096) == data[4096:4160]
        assert os.fstat(other).st_ino == os.fstat(fd).st_ino
    finally:
        os.close(other)
        os.close(fd)


@linux
def test_limits_and_mremap_on_linux():
    with open("/proc/sys/vm/max_map_count") as f:
        assert pc.linux_max_map_count() == int(f.read())
    assert pc.macos_max_map_count() == pc.LINUX_MAX_MAP_COUNT
    libc = ctypes.CDLL(None)
    assert pc.linux_has_mremap() is hasattr(libc, "mremap") is True
    assert pc.macos_has_mremap() is False
    assert pc.linux_only("clear_refs") is None


def test_linux_only_things_say_why_elsewhere(monkeypatch):
    monkeypatch.setattr(pc, "IS_LINUX", False)
    for what in pc.LINUX_ONLY:
        reason = pc.linux_only(what)
        assert reason.startswith("skipped on ") and "\n" not in reason


@linux
def test_huge_page_advice_lands_where_a_whole_block_fits():
    from shardscope.engine.stream.direct_slots import MAP_ANONYMOUS, MAP_PRIVATE, PROT_WRITE, libc

    size = 8 * MIB
    addr = libc.mmap(None, size, mmap.PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    try:
        start = -(-addr // pc.HUGE) * pc.HUGE
        assert not pc.linux_advise_huge(start + pc.PAGE, pc.HUGE)  # no whole aligned block inside
        assert pc.linux_advise_huge(start, 2 * pc.HUGE)
        with open("/proc/self/smaps") as f:  # the kernel marked that VMA for huge pages ("hg")
            text = f.read()
        block = text[text.index(f"{start:x}-"):]
        flags = next(line for line in block.splitlines() if line.startswith("VmFlags:"))
        assert " hg" in flags, flags
        assert pc.macos_advise_huge(start, 2 * pc.HUGE) is False
    finally:
        libc.munmap(addr, size)
