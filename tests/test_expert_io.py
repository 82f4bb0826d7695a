"""The I/O path of a model larger than RAM, on small files: own slots read with O_DIRECT (both
paths: mremap and the portable MAP_FIXED one), a load that does not read the model, and the
cache advice. Each figure is checked against the kernel
(the file's own bytes read with plain os.pread, mincore, /proc/self/io), never the engine itself.
"""

from __future__ import annotations

import ctypes
import errno
import os

import pytest

from conftest import drop_from_page_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.experts.policy_advice import cache_advice
from shardscope.engine.stream import lazy_mapping
from shardscope.engine.stream.direct_slots import MAP_SHARED, PROT_READ, DirectSlots, libc
from shardscope.engine.stream.portable_slots import PortableSlots

MIB = 1024 * 1024
PROMPT = "The history of the printing press begins"


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


@pytest.fixture(params=[DirectSlots, PortableSlots], ids=["mremap", "portable"])
def mapped_file(tmp_path, request):
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(24 * MIB + 1234))  # a tail that is not a whole page
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
    os.close(fd)
    drop_from_page_cache(str(path))
    mapping = memory_calls.FileMapping(str(path), addr, addr + memory_calls.page_outward(0, size)[1], 0)
    slots = request.param.probe(str(path), mapping)
    if isinstance(slots, str):
        pytest.skip(slots)  # e.g. a tmpfs /tmp: the run falls back to the page cache and says so
    yield str(path), mapping, slots
    slots.close()
    libc.munmap(addr, size)


def test_own_slots_hold_the_files_bytes_and_leave_nothing_behind(mapped_file):
    path, mapping, slots = mapped_file
    lo, hi = 3 * MIB, 7 * MIB
    read0 = _read_bytes()
    slots.load(lo, hi)
    assert _read_bytes() - read0 >= hi - lo  # the kernel counted a disk read of the range
    with open(path, "rb") as f:
        f.seek(lo)
        expected = f.read(hi - lo)
    assert ctypes.string_at(mapping.address(lo), hi - lo) == expected
    assert memory_calls.resident_bytes(mapping.address(lo), mapping.address(hi)) == hi - lo
    drop_from_page_cache(path)  # the check's own read went through the page cache
    slots.drop(lo, hi)
    assert memory_calls.resident_bytes(mapping.start, mapping.end) == 0
    # A second load of the same size reuses the dropped slot's pages and still reads the file.
    slots.load(lo + 4 * MIB, hi + 4 * MIB)
    with open(path, "rb") as f:
        f.seek(lo + 4 * MIB)
        assert ctypes.string_at(mapping.address(lo + 4 * MIB), hi - lo) == f.read(hi - lo)


def test_the_last_partial_page_loads(mapped_file):
    path, mapping, slots = mapped_file
    size = os.path.getsize(path)
    lo, hi = memory_calls.page_outward(size - 5000, size)
    slots.load(lo, hi)
    with open(path, "rb") as f:
        f.seek(lo)
        assert ctypes.string_at(mapping.address(lo), size - lo) == f.read()


def test_a_read_error_is_an_error_not_a_crash(mapped_file, monkeypatch):
    path, mapping, slots = mapped_file

    def failing_preadv(*_a):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "preadv", failing_preadv)
    with pytest.raises(OSError):
        slots.load(0, MIB)
    monkeypatch.undo()
    assert ctypes.string_at(mapping.address(0), 16) == open(path, "rb").read(16)  # still the file


def test_a_streamed_model_loads_without_reading_it(synthetic_model):
    from shardscope.engine.stream.llama_session import LlamaSession

    reason = lazy_mapping.load_lazily(synthetic_model)
    if reason:
        pytest.skip(reason)
    drop_from_page_cache(synthetic_model)
    read0, skipped0 = _read_bytes(), lazy_mapping.populates_skipped()
    with LlamaSession(synthetic_model, n_threads=2, n_ctx=64, lazy_load=True) as session:
        read = _read_bytes() - read0
        mapping = memory_calls.find_mapping(synthetic_model)
        resident = memory_calls.resident_bytes(mapping.start, mapping.end)
        tokens = session.generate(PROMPT, 4).tokens
    size = os.path.getsize(synthetic_model)
    assert lazy_mapping.populates_skipped() == skipped0 + 1
    assert read < 0.1 * size and resident < 0.1 * size, (read, resident, size)
    with LlamaSession(synthetic_model, n_threads=2, n_ctx=64) as plain:  # populated, as llama.cpp loads it
        assert plain.generate(PROMPT, 4).tokens == tokens


@pytest.mark.io_paths  # make test runs it again with SHARDSCOPE_IO=portable (conftest.py)
def test_an_expert_run_reads_little_more_than_dense_and_prompt_experts_before_its_first_token(tmp_path, io_path):
    from shardscope.engine.experts.expert_run import ExpertRun
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path / "moe.gguf"
    write_synthetic_model(path, 160, moe=MoeSpec(32, 4, routing_skew=1.0), seed=3)
    drop_from_page_cache(str(path))
    settings = RunSettings(model_path=str(path), budget_mb=round(os.path.getsize(path) / MIB / 2), n_gen=3,
                           n_ctx=64, prompt=PROMPT)
    marks = {"read0": _read_bytes()}
    with ExpertRun(settings) as run, io_path.watch(str(path)):
        run.on_phase = lambda name: marks.setdefault(name, _read_bytes())
        run.run()
        io_path.check(run.io_path)  # the path this pass asked for streamed it, and the kernel saw its slots
        prompt_units = {(r.layer, e) for r in run.streamer.records if r.prompt for e in r.experts}
        needed = run.moe.dense_bytes + sum(run.moe.unit_bytes(layer) for layer, _ in prompt_units)
    before_first = marks["generating"] - marks["read0"]
    assert before_first <= 1.2 * needed, (before_first, needed, os.path.getsize(path))


def test_the_cache_advice_speaks_only_when_lru_cannot_hit():
    units = {layer: 4 * MIB for layer in range(10)}  # one token picks 2 × 10 × 4 MB = 80 MB
    assert "auto by 8.9 points" in cache_advice("lru", 60 * MIB, units, 2)
    assert cache_advice("lru", 80 * MIB, units, 2) == ""
    assert cache_advice("hot", 60 * MIB, units, 2) == ""
