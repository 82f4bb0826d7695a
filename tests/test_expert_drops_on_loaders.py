"""A layer's victims are dropped on the loader threads, beside its reads (engine/experts/expert_streaming.py):
the drops leave the decode thread, yet no read lands before the drops that make its room, and a unit
re-admitted while its drop is pending is read after it. Residency is checked with mincore over the
model's mapping and the bytes against the file read with os.pread, never the engine's books.
"""

from __future__ import annotations

import ctypes
import os
import random
import threading
import time

import numpy as np
import pytest

from conftest import drop_from_page_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.experts.expert_streaming import ExpertStreamer
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.stream.direct_slots import MAP_SHARED, PROT_READ, DirectSlots, libc
from shardscope.engine.stream.portable_slots import PortableSlots
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec

SLOW_DROP_S = 0.02  # a drop held back this long: a read that did not wait for it would land first


@pytest.fixture(params=[DirectSlots, PortableSlots], ids=["mremap", "portable"])
def streamer(tmp_path, request):
    path = tmp_path / "moe.gguf"
    write_synthetic_model(path, 24, moe=MoeSpec(32, 4), seed=5)
    moe = read_moe_layout(read_layout(str(path)))
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    mapping = memory_calls.FileMapping(str(path), addr, addr + memory_calls.page_outward(0, size)[1], 0)
    slots = request.param.probe(str(path), mapping)
    if isinstance(slots, str):
        os.close(fd)
        pytest.skip(slots)
    unit = max(moe.unit_bytes(layer) for layer in moe.layers) + 2 * memory_calls.PAGE
    cache = 2 * moe.n_expert_used * unit  # two layers' picks: every later layer evicts
    s = ExpertStreamer(moe, mapping, fd, budget_bytes=0, cache_bytes=cache, policy="lru", slots=slots)
    s.start()
    s.end_prompt()
    drop_from_page_cache(str(path))
    yield s, moe, mapping, fd, cache
    s.close()
    libc.munmap(addr, size)
    os.close(fd)


def _slow_drops(s, seen: list):
    evict = s.io.evict_unit

    def slow(layer, expert):
        seen.append(threading.current_thread().name)
        time.sleep(SLOW_DROP_S)
        return evict(layer, expert)

    s.io.evict_unit = slow


def _resident(mapping) -> int:
    return memory_calls.resident_bytes(mapping.start, mapping.end)


def test_drops_run_on_loaders_and_no_read_lands_before_its_room(streamer):
    s, moe, mapping, fd, cache = streamer
    dense = _resident(mapping)  # the dense bytes, read at start and resident for the run
    peaks, drop_threads = [], []
    _slow_drops(s, drop_threads)
    load = s.io.load_slice

    def watched(*args):
        read = load(*args)
        peaks.append(_resident(mapping))  # the mapping after this read landed, as mincore sees it
        return read

    s.io.load_slice = watched
    rng = random.Random(3)
    for _ in range(4):
        for layer in moe.layers:
            picks = rng.sample(range(moe.n_expert), moe.n_expert_used)
            assert s.on_topk(layer, np.array([picks], dtype=np.int32))
            for expert in picks:  # each pick holds the file's bytes once its layer may go on
                for lo, hi in moe.unit_ranges(layer, expert):
                    assert ctypes.string_at(mapping.address(lo), hi - lo) == os.pread(fd, hi - lo, lo)
            drop_from_page_cache(mapping.path)  # the check's own reads went through the page cache
    assert s.counters.evictions > 0 and drop_threads
    assert all(name.startswith("shardscope-expert-loader") for name in drop_threads), set(drop_threads)
    assert peaks and max(peaks) <= dense + cache, (max(peaks) - dense, cache)


def test_a_unit_readmitted_while_its_drop_is_pending_is_read_after_it(streamer):
    s, moe, mapping, fd, _ = streamer
    layer = moe.layers[0]
    picks = list(range(moe.n_expert_used))
    assert s.on_topk(layer, np.array([picks], dtype=np.int32))
    _slow_drops(s, [])
    unit = (layer, picks[0])
    drop = s._evict_later(unit)  # as a victim's drop goes out
    load = s._submit(unit)  # and the same unit comes back before that drop ran
    load.result()
    drop.result()
    for lo, hi in moe.unit_ranges(*unit):
        inner = memory_calls.page_inward(lo, hi)
        if inner:  # still in memory: the drop did not land after the read
            span = mapping.clip(*inner)
            assert memory_calls.resident_bytes(*span) == span[1] - span[0]
        assert ctypes.string_at(mapping.address(lo), hi - lo) == os.pread(fd, hi - lo, lo)
