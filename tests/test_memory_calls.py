"""Eviction is real at any alignment: what evict() drops is gone from the page cache.

The page cache holds large folios (2 MB on this machine's ext4) that straddle a
shard's edges; FADV_DONTNEED cannot drop those, so evict() must catch them.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from shardscope.engine.base import memory_calls

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux eviction calls")
MIB = 1024 * 1024


def test_evict_drops_a_range_with_unaligned_edges_and_keeps_its_neighbours(tmp_path):
    path = tmp_path / "weights.bin"
    with open(path, "wb") as out:
        out.write(np.random.default_rng(0).integers(0, 255, 24 * MIB, dtype=np.uint8).tobytes())
        out.flush()
        os.fsync(out.fileno())  # dirty pages cannot be dropped; the model file is never dirty
    fd = os.open(path, os.O_RDONLY)
    view = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        base = view.ctypes.data
        memory_calls.evict(base, base + view.size, fd, 0)
        assert memory_calls.resident_pages(base, base + view.size) == 0
        memory_calls.populate(base, base + view.size)  # readahead: large folios
        # a range starting and ending mid-folio, like a shard between two tensors
        lo, hi = 3 * MIB + 5 * memory_calls.PAGE, 17 * MIB + 3 * memory_calls.PAGE
        memory_calls.evict(base + lo, base + hi, fd, lo)
        assert memory_calls.resident_pages(base + lo, base + hi) == 0
        assert memory_calls.resident_pages(base, base + lo) == lo // memory_calls.PAGE
        assert memory_calls.resident_pages(base + hi, base + view.size) == (view.size - hi) // memory_calls.PAGE
        # and the evicted bytes come back from the disk, intact
        before = _read_bytes()
        assert bytes(view[lo:hi]) == path.read_bytes()[lo:hi]
        assert _read_bytes() - before >= (hi - lo) * 0.9
    finally:
        del view
        os.close(fd)


def _read_bytes() -> int:
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("no read_bytes in /proc/self/io")
