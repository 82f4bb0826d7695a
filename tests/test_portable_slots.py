"""The portable I/O path (engine/stream/portable_slots.py) on a file mapped the way llama.cpp maps
a model: what it loads is the file's bytes in anonymous pages of our own (checked with plain
reads, mincore, /proc/self/maps), nothing goes through the page cache, a drop leaves a
file-backed range holding no RAM, and shared edge pages are never replaced under a reader.
Also which path a run takes (engine/stream/io_path.py) and how a bad SHARDSCOPE_IO is refused."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest

from conftest import slots_over_blob
from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.stream import io_path
from shardscope.engine.stream.direct_slots import DirectSlots
from shardscope.engine.stream.portable_slots import PortableSlots

MIB = 1024 * 1024
PAGE = memory_calls.PAGE


def _anon_spans() -> list[tuple[int, int]]:
    """Anonymous VMAs of this process, read from /proc/self/maps by the test itself."""
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].strip():
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                spans.append((lo, hi))
    return spans


@pytest.fixture()
def mapped(tmp_path):
    yield from slots_over_blob(tmp_path, PortableSlots, 16 * MIB)


@pytest.mark.skipif(not platform_calls.IS_LINUX, reason="reads /proc/self/maps")
def test_a_load_is_anonymous_memory_with_the_files_bytes_and_a_drop_frees_it(mapped):
    path, data, mapping, slots = mapped
    lo, hi = 2 * MIB, 6 * MIB
    with open(path, "rb") as f:
        cached0 = platform_calls.linux_cached_file_bytes(f.fileno(), 0, len(data))
        assert slots.load(lo, hi) == hi - lo
        assert ctypes.string_at(mapping.address(lo), hi - lo) == data[lo:hi]
        assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi)) == hi - lo
        inside = [s for s in _anon_spans() if mapping.start <= s[0] and s[1] <= mapping.end]
        assert inside == [(mapping.address(lo), mapping.address(hi))]  # one anonymous mapping, exactly there
        assert slots.own_bytes == hi - lo and slots.held_ranges == 1
        if cached0 is not None:  # the uncached read left nothing in the page cache
            assert platform_calls.linux_cached_file_bytes(f.fileno(), 0, len(data)) - cached0 < MIB // 4
    slots.drop(lo, hi)
    assert not [s for s in _anon_spans() if mapping.start <= s[0] and s[1] <= mapping.end]
    assert memory_calls.resident_bytes(mapping.start, mapping.end) == 0  # file-backed again, no RAM
    assert slots.own_bytes == 0
    assert ctypes.string_at(mapping.address(lo), 4096) == data[lo:lo + 4096]  # and still the file's bytes


def test_pages_already_ours_are_not_read_again_nor_replaced(mapped):
    """Two slices sharing an edge page: the second load leaves the page the first one holds (a reader
    of the first slice may be computing on it) and reads only the rest."""
    path, data, mapping, slots = mapped
    slots.load(0, 3 * PAGE)
    first_page = ctypes.c_char.from_address(mapping.address(2 * PAGE))
    marker = ctypes.c_char.from_address(mapping.address(2 * PAGE) + 7)
    marker.value = b"\xaa"  # our page, not re-read: a replacement (fresh page, file bytes) would lose this
    assert slots.load(2 * PAGE, 6 * PAGE) == 3 * PAGE
    assert marker.value == b"\xaa" and first_page is not None
    marker.value = data[2 * PAGE + 7:2 * PAGE + 8]
    assert ctypes.string_at(mapping.address(0), 6 * PAGE) == data[:6 * PAGE]
    assert slots.own_bytes == 6 * PAGE


def test_concurrent_loads_of_overlapping_ranges_all_see_the_files_bytes(mapped):
    path, data, mapping, slots = mapped
    errors = []

    def load(lo, hi):
        try:
            slots.load(lo, hi)
            assert ctypes.string_at(mapping.address(lo), hi - lo) == data[lo:hi]  # never a zero page
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load, args=(i * MIB, i * MIB + 2 * MIB + PAGE)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert slots.own_bytes == 9 * MIB + PAGE


def test_a_failed_read_leaves_the_file_mapped(mapped, monkeypatch):
    path, data, mapping, slots = mapped

    def failing(*_a):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "preadv", failing)
    with pytest.raises(OSError):
        slots.load(MIB, 2 * MIB)
    monkeypatch.undo()
    assert ctypes.string_at(mapping.address(MIB), 64) == data[MIB:MIB + 64]
    assert slots.own_bytes == 0


def test_the_path_is_chosen_from_the_environment(mapped, monkeypatch):
    path, data, mapping, _ = mapped
    monkeypatch.setenv(io_path.ENV, "portable")
    chosen = io_path.open_slots(path, mapping)
    assert isinstance(chosen, PortableSlots) and io_path.path_of(chosen) == "portable"
    chosen.close()
    monkeypatch.delenv(io_path.ENV)
    default = io_path.open_slots(path, mapping)
    expected = "mremap" if platform_calls.has_mremap() else "portable"
    assert io_path.path_of(default) == expected and (type(default) is DirectSlots) == (expected == "mremap")
    default.close()
    assert io_path.path_of(None) == "page cache"
    monkeypatch.setenv(io_path.ENV, "zerocopy")
    with pytest.raises(ShardscopeError, match="SHARDSCOPE_IO='zerocopy': not an I/O path"):
        io_path.wanted()


def test_a_bad_io_path_is_one_line_and_exit_2(synthetic_model):
    env = dict(os.environ, SHARDSCOPE_IO="fast")
    out = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", synthetic_model,
                          "--budget-mb", "200", "--tokens", "2"], capture_output=True, text=True, env=env)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "SHARDSCOPE_IO" in lines[0] and "Traceback" not in out.stderr, out.stderr
