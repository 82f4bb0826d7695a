"""The own slots' books while a read lands in the mapping (engine/stream/direct_slots.py and
portable_slots.py ``books``): the bytes under way are reported beside the books, and --verify's
resident-weights bracket (engine/runs/verify.py) takes the span they make — checked against mincore
read from inside the read itself."""

from __future__ import annotations

import os

import pytest

from conftest import slots_over_blob
from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.runs.verify import _bracket_span
from shardscope.engine.stream.direct_slots import DirectSlots
from shardscope.engine.stream.portable_slots import PortableSlots

MIB = 1024 * 1024
PAGE = memory_calls.PAGE


@pytest.mark.parametrize("kind", ["mremap-region", "portable"])
def test_a_read_under_way_is_reported_beside_the_books(tmp_path, monkeypatch, kind):
    if kind == "mremap-region" and not platform_calls.has_mremap():
        pytest.skip("regions belong to the mremap slots")
    cls = DirectSlots if kind == "mremap-region" else PortableSlots
    for _path, data, mapping, slots in slots_over_blob(tmp_path, cls, 8 * MIB):
        slots.adopt()
        if kind == "mremap-region":
            slots.make_region(1 * MIB, 3 * MIB)
        lo, hi = 1 * MIB, 1 * MIB + 64 * PAGE
        seen = []
        real = os.preadv

        def preadv(fd, buffers, offset):  # halfway: the first half landed, the books not yet moved
            n = real(fd, [memoryview(buffers[0])[:(hi - lo) // 2]], offset)
            held = memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi))
            seen.append((slots.books(), held))
            return n + real(fd, [memoryview(buffers[0])[(hi - lo) // 2:]], offset + n)

        monkeypatch.setattr(os, "preadv", preadv)
        slots.load(lo, hi)
        monkeypatch.undo()
        (own, arriving), held = seen[0]
        assert own == 0 and arriving == hi - lo  # the books wait for the read; the span says so
        assert own <= held <= own + arriving and held > own  # the kernel holds pages inside the span
        assert slots.books() == (hi - lo, 0)


def test_the_bracket_takes_the_span_of_the_books_and_the_reads_landing():
    # books 4.1 MiB with 0.7 MiB landing, the outside readings 4.75 and 5.3: they meet
    assert _bracket_span(4.1, 0.7, 4.75, 5.3) == 0.0
    assert _bracket_span(4.1, 0.0, 4.75, 5.3) < -0.1  # the books alone sit below both
    assert _bracket_span(5.9, 0.7, 4.75, 5.3) > 0.1  # above both: landing bytes do not excuse that
