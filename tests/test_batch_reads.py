"""Reads sent to the kernel in one call (engine/base/batch_reads.py) and the loads built on them
(engine/stream/direct_slots.py load_many, engine/experts/expert_io.py send_units): checked with
plain reads of the file, the kernel's read counter (/proc/self/io), mincore and the expert run's
own misses."""

from __future__ import annotations

import ctypes
import mmap
import os
import random

import pytest

from conftest import slots_over_blob
from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.base.batch_reads import DEPTH, BatchReader
from shardscope.engine.stream.direct_slots import DirectSlots, SlotsFull

MIB = 1024 * 1024
PAGE = memory_calls.PAGE
pytestmark = pytest.mark.skipif(not platform_calls.IS_LINUX, reason="batch reads are Linux's native AIO")


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


@pytest.fixture()
def direct_file(tmp_path):
    path = tmp_path / "blob.bin"
    data = os.urandom(6 * MIB + 1234)  # a tail that is not a whole page
    path.write_bytes(data)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        os.preadv(fd, [mmap.mmap(-1, PAGE)], 0)
    except OSError as exc:
        pytest.skip(f"no uncached reads here ({exc.strerror})")  # a tmpfs /tmp
    reader = BatchReader.open(fd, str(path), len(data))
    if reader is None:
        os.close(fd)
        pytest.skip("this kernel takes no batch reads")
    yield str(path), data, fd, reader
    reader.close()
    os.close(fd)


def test_a_batch_larger_than_the_depth_reads_the_files_bytes(direct_file):
    path, data, fd, reader = direct_file
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    rng = random.Random(3)
    starts = rng.sample(range(len(data) // PAGE - 4), 2 * DEPTH + 7)
    spans = [(p * PAGE, (p + rng.randint(1, 4)) * PAGE) for p in starts]
    tail = memory_calls.page_outward(len(data) - 1000, len(data))
    spans.append(tail)  # the last page: the kernel reads what the file has
    buffers = [mmap.mmap(-1, hi - lo) for lo, hi in spans]
    read0 = _read_bytes()
    pending = reader.send([(ctypes.addressof(ctypes.c_char.from_buffer(b)), hi - lo, lo)
                           for b, (lo, hi) in zip(buffers, spans)])
    done = pending.wait()
    assert done == sum(min(hi, len(data)) - lo for lo, hi in spans)
    assert _read_bytes() - read0 >= done - PAGE  # the disk was asked, not the page cache
    for buf, (lo, hi) in zip(buffers, spans):
        assert buf[:min(hi, len(data)) - lo] == data[lo:hi]


def test_a_refused_read_is_raised_once_the_batch_has_landed(direct_file):
    path, data, fd, reader = direct_file
    good = mmap.mmap(-1, 2 * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(good))
    with pytest.raises(OSError, match=path.split("/")[-1]):
        reader.send([(base, PAGE, 0), (base + PAGE + 1, PAGE, PAGE)]).wait()  # O_DIRECT: a misaligned buffer
    assert good[:PAGE] == data[:PAGE]  # the good read landed all the same


@pytest.fixture()
def mapped(tmp_path):
    if not platform_calls.has_mremap():
        pytest.skip("load_many belongs to the mremap slots")
    for _path, data, mapping, slots in slots_over_blob(tmp_path, DirectSlots, 8 * MIB):
        if not slots.batched:
            pytest.skip("this kernel takes no batch reads")
        slots.adopt()
        yield data, mapping, slots


def test_load_many_puts_region_and_slot_pieces_in_place(mapped):
    data, mapping, slots = mapped
    slots.make_region(1 * MIB, 3 * MIB)
    ranges = [(1 * MIB + i * 3 * PAGE, 1 * MIB + i * 3 * PAGE + 2 * PAGE) for i in range(40)]  # in the region
    ranges += [(4 * MIB + i * MIB // 2, 4 * MIB + i * MIB // 2 + 64 * 1024) for i in range(6)]  # slots
    ranges.append((3 * MIB - 2 * PAGE, 3 * MIB + 2 * PAGE))  # across the region's end: both kinds
    assert slots.load_many(ranges).wait() == sum(hi - lo for lo, hi in ranges)
    assert slots.own_bytes == sum(hi - lo for lo, hi in ranges)
    assert slots.held_ranges == 7  # six slots and the piece past the region
    assert memory_calls.resident_bytes(mapping.start, mapping.end) == slots.own_bytes
    for lo, hi in ranges:
        assert ctypes.string_at(mapping.address(lo), hi - lo) == data[lo:hi]
    slots.drop_many(ranges)
    assert slots.own_bytes == 0 and memory_calls.resident_bytes(mapping.start, mapping.end) == 0



def test_region_pieces_are_booked_from_the_send_as_the_kernel_holds_them(mapped):
    """O_DIRECT pins a read's pages when it is submitted: a reading of the books taken while the
    batch is in flight (the sampler gets the GIL while the decode thread waits) must count them."""
    data, mapping, slots = mapped
    slots.make_region(1 * MIB, 3 * MIB)
    ranges = [(1 * MIB + i * 3 * PAGE, 1 * MIB + i * 3 * PAGE + 2 * PAGE) for i in range(40)]
    loading = slots.load_many(ranges)
    in_flight = memory_calls.resident_bytes(mapping.address(1 * MIB), mapping.address(3 * MIB))
    assert slots.own_bytes == in_flight == 40 * 2 * PAGE
    loading.wait()
    assert slots.own_bytes == memory_calls.resident_bytes(mapping.start, mapping.end) == 40 * 2 * PAGE

def test_load_many_refuses_before_reading_when_the_slots_are_full(mapped):
    data, mapping, slots = mapped
    slots.max_ranges = 3
    with pytest.raises(SlotsFull):
        slots.load_many([(i * MIB, i * MIB + 64 * 1024) for i in range(4)])
    assert slots.own_bytes == 0 and memory_calls.resident_bytes(mapping.start, mapping.end) == 0


@pytest.mark.slow
def test_a_layers_misses_go_to_the_disk_in_one_call(tmp_path, monkeypatch):
    """Every miss of a decode pass is sent with the rest of its layer's misses, in one batch."""
    from shardscope.engine.experts import expert_cache, expert_io
    from shardscope.engine.experts.expert_run import ExpertRun
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path / "moe.gguf"
    write_synthetic_model(path, 80, moe=MoeSpec(64, 8), seed=2)
    sends, missing = [], []
    real_send, real_access = expert_io.ExpertIO.send_units, expert_cache.ExpertCache.access

    def send_units(self, units):
        batch = real_send(self, units)
        if batch is not None:
            sends.append(list(units))
        return batch

    def access(self, layer, experts, weights=None):
        result = real_access(self, layer, experts, weights)
        if result.misses:
            missing.append((self, list(result.misses)))
        return result

    monkeypatch.setattr(expert_io.ExpertIO, "send_units", send_units)
    monkeypatch.setattr(expert_cache.ExpertCache, "access", access)
    settings = RunSettings(model_path=str(path), budget_mb=round(os.path.getsize(path) / MIB / 3), n_gen=6,
                           n_ctx=128, prompt="The history of the printing press begins")
    with ExpertRun(settings) as run:
        summary = run.run()
        slots, live, counted = run.streamer.io.slots, run.streamer.cache, run.streamer.snapshot_counters()
    if slots is None or not slots.batched:
        pytest.skip("this run's slots take no batches (page cache, portable path or no AIO)")
    assert summary.expert_misses > 0
    # one call a layer pass, holding exactly its misses (auto's shadow directories are caches too: left out)
    assert sends == [misses for cache, misses in missing if cache is live]
    assert sum(map(len, sends)) == counted.misses == counted.loads  # prompt and decode: none by the pool
