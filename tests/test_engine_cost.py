"""The engine's own cost at the headline's shape (issue #24), shown by counts, never by timing:
the mappings own slots hold (counted by the kernel in /proc/self/maps, from the test), the books
of own bytes (against mincore), and the graph nodes the eval callback reads names for.
"""

from __future__ import annotations

import ctypes
import os
import random

import pytest

from conftest import drop_from_page_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.stream.direct_slots import (
    MAP_HEADROOM,
    MAP_SHARED,
    PROT_READ,
    DirectSlots,
    OwnRanges,
    SlotsFull,
    libc,
    max_map_count,
)

PAGE = memory_calls.PAGE


def _mappings_inside(lo: int, hi: int) -> int:
    """VMAs of this process inside [lo, hi), as the kernel lists them."""
    n = 0
    with open("/proc/self/maps") as maps:
        for line in maps:
            a, b = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            n += lo <= a and b <= hi
    return n


def test_own_ranges_books_equal_a_page_by_page_reference():
    rng = random.Random(5)
    books, pages = OwnRanges(), set()
    for _ in range(4000):
        lo = rng.randrange(0, 400) * PAGE
        hi = lo + rng.randint(1, 12) * PAGE
        if rng.random() < 0.6:
            books.add(lo, hi)
            pages |= set(range(lo, hi, PAGE))
        else:
            books.cut(lo, hi)
            pages -= set(range(lo, hi, PAGE))
        assert books.bytes == len(pages) * PAGE
    held = set()
    for start, end in books.ends.items():
        assert not held & set(range(start, end, PAGE))  # pieces are disjoint
        held |= set(range(start, end, PAGE))
    assert held == pages


@pytest.fixture()
def many_slices(tmp_path):
    """A sparse file of more one-page slices (every other page) than vm.max_map_count allows
    mappings, mapped read-only and shared as llama.cpp maps a model."""
    n_slices = max_map_count() + 5000
    size = 2 * n_slices * PAGE
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as f:
        f.truncate(size)
        for i in range(0, size, 97 * PAGE):  # some real bytes to check, the rest holes (zeros)
            f.seek(i)
            f.write(os.urandom(PAGE))
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    os.close(fd)
    drop_from_page_cache(str(path))
    mapping = memory_calls.FileMapping(str(path), addr, addr + size, 0)
    slots = DirectSlots.probe(str(path), mapping)
    if isinstance(slots, str):
        pytest.skip(slots)
    yield str(path), mapping, slots, n_slices
    slots.close()
    libc.munmap(addr, size)


def test_mappings_stay_bounded_with_more_slices_than_max_map_count(many_slices):
    path, mapping, slots, n_slices = many_slices
    slots.adopt()
    limit = max_map_count()
    loaded = refused = 0
    for i in range(n_slices):  # the worst pattern: every other page, none adjacent
        lo = 2 * i * PAGE
        try:
            slots.load(lo, lo + PAGE)
            loaded += 1
        except SlotsFull:
            refused += 1
    inside = _mappings_inside(mapping.start, mapping.end)
    assert n_slices > limit
    assert loaded == slots.max_ranges == (limit - MAP_HEADROOM) // 2 and refused == n_slices - loaded
    assert inside <= 2 * slots.max_ranges + 1 <= limit - MAP_HEADROOM + 1  # the kernel's own count
    # The books are the kernel's reading of the same pages.
    assert slots.own_bytes == loaded * PAGE == memory_calls.resident_bytes(mapping.start, mapping.end)
    with open(path, "rb") as f:  # the bytes are the file's
        assert ctypes.string_at(mapping.start, PAGE) == f.read(PAGE)
    # Dropped ranges are mapped back with their neighbours' flags: the kernel merges them again.
    for i in range(loaded):
        slots.drop(2 * i * PAGE, 2 * i * PAGE + PAGE)
    assert slots.own_bytes == 0 and slots.held_ranges == 0
    assert _mappings_inside(mapping.start, mapping.end) == 1


@pytest.fixture(scope="module")
def small_kimi(tmp_path_factory) -> str:
    """~40 MB, 6 layers of Kimi's shape (1 dense + 5 MoE of 384 experts top-8)."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import like_kimi_k2

    path = tmp_path_factory.mktemp("kimi") / "kimi-40.gguf"
    write_synthetic_model(path, 40, n_layers=6, moe=like_kimi_k2(routing_skew=2.0), seed=3)
    return str(path)


def test_callback_reads_node_names_once_per_graph_and_tokens_stay_the_same(small_kimi):
    """After the first decoded token, a token reads one name a MoE layer (the check before acting
    on a stop) instead of one per graph node; the greedy tokens equal llama.cpp's alone."""
    from shardscope.engine.experts.expert_run import ExpertRun
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.stream.llama_session import LlamaSession

    prompt, n_gen = "The history of the printing press begins", 8
    with LlamaSession(small_kimi, n_threads=2, n_ctx=128) as session:  # all resident, no callback
        reference = session.generate(prompt, n_gen).tokens
    budget = round(os.path.getsize(small_kimi) / 2**20 / 2)
    run = ExpertRun(RunSettings(model_path=small_kimi, budget_mb=budget, n_gen=n_gen, n_ctx=128, prompt=prompt))
    try:
        run.load()
        session, reads, per_decode = run.session, [0], []
        get_name, decode = session._get_name, session._decode

        def counting_get_name(tensor):
            reads[0] += 1
            return get_name(tensor)

        def counting_decode(tokens):
            before = reads[0]
            decode(tokens)
            per_decode.append((len(tokens), reads[0] - before))

        session._get_name, session._decode = counting_get_name, counting_decode
        run.run()
        tokens, moe_layers = run.tokens, len(run.moe.layers)
    finally:
        run.close()
    assert tokens == reference
    singles = [n for n_tokens, n in per_decode if n_tokens == 1]
    assert len(singles) == n_gen - 1
    assert singles[0] > 10 * moe_layers  # the first decode graph: every node's name, once
    assert singles[1:] == [moe_layers] * (n_gen - 2)  # later tokens: one check a MoE layer, no more
