"""Regions of the mremap slots (engine/stream/direct_slots.py make_region): a range made anonymous
memory of our own once, where a load is one read into place and a drop frees the pages — checked
with plain reads of the file, mincore and /proc/self/maps (one mapping however many loads), and
which ranges an expert run makes regions (engine/experts/expert_io.py expert_regions)."""

from __future__ import annotations

import ctypes

import pytest

from conftest import slots_over_blob
from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.experts.expert_io import REGION_SLICE, expert_regions
from shardscope.engine.layout.budget_minimum import dense_pages
from shardscope.engine.layout.moe_layout import MoeLayout
from shardscope.engine.stream.direct_slots import DirectSlots

MIB = 1024 * 1024
PAGE = memory_calls.PAGE
pytestmark = pytest.mark.skipif(not platform_calls.has_mremap(), reason="regions belong to the mremap slots")


def _vmas_inside(lo: int, hi: int) -> list[tuple[int, int, bool]]:
    """(start, end, anonymous?) of this process's VMAs inside [lo, hi), from /proc/self/maps."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if lo <= a and b <= hi:
                out.append((a, b, len(parts) < 6 or not parts[5].strip()))
    return out


@pytest.fixture()
def mapped(tmp_path):
    for _path, data, mapping, slots in slots_over_blob(tmp_path, DirectSlots, 8 * MIB):
        slots.adopt()
        yield data, mapping, slots


def test_loads_in_a_region_are_the_files_bytes_with_no_mapping_of_their_own(mapped):
    data, mapping, slots = mapped
    lo, hi = 1 * MIB, 5 * MIB
    slots.make_region(lo, hi)
    before = _vmas_inside(mapping.start, mapping.end)
    slices = [(lo + i * 3 * PAGE, lo + i * 3 * PAGE + 2 * PAGE) for i in range(200)]  # none adjacent
    for a, b in slices:
        assert slots.load(a, b) == b - a
    assert _vmas_inside(mapping.start, mapping.end) == before  # 200 loads, not one mapping more
    assert slots.held_ranges == 0 and slots.own_bytes == 200 * 2 * PAGE
    assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi)) == slots.own_bytes
    for a, b in slices[::37]:
        assert ctypes.string_at(mapping.address(a), b - a) == data[a:b]
    for a, b in slices:
        slots.drop(a, b)
    assert slots.own_bytes == 0
    assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi)) == 0  # freed at once
    assert _vmas_inside(mapping.start, mapping.end) == before
    a, b = slices[5]
    assert slots.load(a, b) == b - a and ctypes.string_at(mapping.address(a), b - a) == data[a:b]  # read again


def test_a_range_across_a_regions_edge_is_read_in_place_and_swapped_in(mapped):
    data, mapping, slots = mapped
    slots.make_region(2 * MIB, 3 * MIB)
    lo, hi = 2 * MIB - 2 * PAGE, 2 * MIB + 2 * PAGE  # half outside, half inside
    assert slots.region_pieces(lo, hi) == [(lo, 2 * MIB, False), (2 * MIB, hi, True)]
    assert slots.load(lo, hi) == hi - lo
    assert ctypes.string_at(mapping.address(lo), hi - lo) == data[lo:hi]
    assert slots.held_ranges == 1 and slots.own_bytes == hi - lo  # one slot for the outside piece
    slots.drop(lo, hi)
    assert slots.own_bytes == 0 and slots.held_ranges == 0
    assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi)) == 0
    assert ctypes.string_at(mapping.address(lo), PAGE) == data[lo:lo + PAGE]  # the file's again outside


def test_a_region_is_refused_over_pages_already_ours(mapped):
    _data, _mapping, slots = mapped
    slots.load(0, 4 * PAGE)
    with pytest.raises(ValueError):
        slots.make_region(0, MIB)
    slots.make_region(MIB, 2 * MIB)
    with pytest.raises(ValueError):
        slots.make_region(MIB + PAGE, 3 * MIB)


def _layout(tensors: dict[int, tuple[tuple[int, int], ...]], dense, n_expert: int) -> MoeLayout:
    return MoeLayout(path="x.gguf", architecture="test", n_expert=n_expert, n_expert_used=2,
                     layers=tuple(sorted(tensors)), expert_tensors=tensors, dense_ranges=tuple(dense),
                     total_bytes=64 * MIB)


def test_expert_regions_hold_small_slices_whole_pages_and_no_dense_byte():
    n = 8
    small, large = 3 * PAGE + 100, REGION_SLICE  # the small tensor's ends are not page-aligned
    t0 = PAGE + 32
    t1 = t0 + n * small  # the next tensor starts in the page where the first ends
    t2 = 20 * MIB
    moe = _layout({0: ((t0, small), (t1, small)), 1: ((t2, large),)},
                  dense=[(0, t0), (t1 + n * small, t1 + n * small + 64)], n_expert=n)
    regions = expert_regions(moe, (0, 64 * MIB))
    dense = dense_pages(moe)
    assert regions and all(lo % PAGE == 0 and hi % PAGE == 0 for lo, hi in regions)
    for lo, hi in regions:
        assert not any(a < hi and lo < b for a, b in dense)  # a dense byte's page stays the file's
        assert any(off <= lo and hi <= off + n * per for off, per in moe.expert_tensors[0])  # within one tensor
    # the large slices keep recycled slots
    assert not any(t2 <= lo < t2 + n * large for lo, _ in regions)
    # every whole page of a small tensor is in a region
    covered = sum(hi - lo for lo, hi in regions)
    inner0 = memory_calls.page_inward(t0, t0 + n * small)
    inner1 = memory_calls.page_inward(t1, t1 + n * small)
    assert covered == (inner0[1] - inner0[0]) + (inner1[1] - inner1[0])
    # only the mapped part of the file
    assert expert_regions(moe, (t1, 64 * MIB)) == [r for r in regions if r[0] >= t1]


def test_a_refused_range_reads_none_of_its_region_piece(mapped):
    from shardscope.engine.stream.direct_slots import SlotsFull

    _data, mapping, slots = mapped
    slots.make_region(2 * MIB, 3 * MIB)
    slots.max_ranges = 0  # no slot may be held: the outside piece is refused
    lo, hi = 3 * MIB - 2 * PAGE, 3 * MIB + 2 * PAGE  # the region's piece comes first
    with pytest.raises(SlotsFull):
        slots.load(lo, hi)
    # the caller reads this range another way: its region piece was not read here for nothing
    assert slots.own_bytes == 0
    assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(3 * MIB)) == 0
    assert slots.load(lo, 3 * MIB) == 3 * MIB - lo  # a range wholly inside is never refused
