"""The controller's hit figures and its budget, checked against mincore on real runs.

A hook in front of the controller's ``on_layer`` asks the kernel (mincore), at the
moment compute arrives at each layer, which shards' pages are in memory. From that
alone the test derives its own on-time rate (the layer's shards were resident) and
cache hit rate (they stayed resident at every layer start since their last use),
and the resident weight bytes at every layer start — then compares the engine's
figures with them.
"""

from __future__ import annotations

import os

import pytest

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.streaming_run import StreamingRun

PROMPT = "The history of the printing press begins"
RESIDENT_PAGES = 0.99  # a page or two of a large folio at a shard's edge is not a read from disk


@pytest.fixture(scope="module")
def small_layer_model(tmp_path_factory) -> str:
    """30 layers of ~3 MB (94 MB): a 4 MB shard holds one layer, so every layer streams alone."""
    from shardscope.engine.synth.synth import write_synthetic_model

    path = tmp_path_factory.mktemp("small-layers") / "small-30x3mb.gguf"
    write_synthetic_model(path, 94, n_layers=30, seed=3)
    return str(path)


class KernelWatch:
    """mincore at every layer start: shard residency, weight bytes, hits and on-time as the kernel saw them."""

    def __init__(self, run: StreamingRun):
        self.run = run
        self.plan = run.plan
        self.forward = run._on_layer
        self.dropped = [False] * len(self.plan.shards)  # seen non-resident since the last use
        self.cache_hits = self.on_time = self.accesses = 0
        self.peak_weights = 0
        self.layer_starts = 0
        self.current_resident: dict[int, bool] = {}

    def _resident(self, index: int) -> bool:
        m = self.run.mapping
        total = found = 0
        for start, end in self.plan.shards[index].ranges:
            span = m.clip(start, end)
            if span:
                total += span[1] - span[0]
                found += memory_calls.resident_bytes(*span)
        return found >= RESIDENT_PAGES * total

    def _wrap_book(self) -> None:
        """Read the computing layer's shards inside the book's ``access``, under the controller's lock.

        The loader flips a shard to resident under that lock after its read finished, so at
        this moment the kernel and the engine look at the same state: read earlier, a
        shard landing in between (the loader always is about to land the next one when
        lru thrashes) counted as late for the watch and on time for the engine.
        """
        book = self.run.controller._book
        if getattr(book.access, "kernel_watch", False):
            return
        real = book.access

        def access(layer_pos: int) -> list[int]:
            self.current_resident = {i: self._resident(i) for i in self.plan.layer_shards[layer_pos]}
            return real(layer_pos)

        access.kernel_watch = True
        book.access = access

    def __call__(self, layer_number: int) -> bool:
        if self.run.controller is None:
            return self.forward(layer_number)
        self._wrap_book()
        # Residency is tracked from the prompt pass on; accesses count from the
        # first decoded token, like the engine's steady-state figures.
        counting = self.run.clock.phase == "generating"
        pos = self.run._layer_pos.get(layer_number, layer_number)
        current = set(self.plan.layer_shards[pos])
        resident = [False] * len(self.plan.shards)
        for index in range(len(resident)):
            if index not in current:
                resident[index] = self._resident(index)
        if counting:
            m = self.run.mapping
            self.peak_weights = max(self.peak_weights, memory_calls.resident_bytes(m.start, m.end))
            self.layer_starts += 1
        self.current_resident = {}
        ok = self.forward(layer_number)
        for index in self.plan.layer_shards[pos]:
            resident[index] = self.current_resident.get(index, False)
            if counting:
                self.accesses += 1
                self.on_time += resident[index]
                self.cache_hits += resident[index] and not self.dropped[index]
            self.dropped[index] = False
        for index, here in enumerate(resident):
            if not here:
                self.dropped[index] = True
        return ok

    @property
    def cache_hit_rate(self) -> float:
        return self.cache_hits / self.accesses

    @property
    def on_time_rate(self) -> float:
        return self.on_time / self.accesses


def _watched_run(model: str, **kw):
    settings = RunSettings(model_path=model, prompt=PROMPT, n_ctx=128, **kw)
    with StreamingRun(settings) as run:
        watch = KernelWatch(run)
        run._on_layer = watch  # the session takes the hook at load: put the watch in front first
        summary = run.run()
        samples = [s for s in run.samples if s.phase == "generating"]
    return summary, watch, samples


@pytest.mark.parametrize("policy", ["lru", "pinned"])
def test_hit_figures_match_mincore_at_layer_start(synthetic_model, policy):
    size_mb = os.path.getsize(synthetic_model) / MIB
    summary, watch, _ = _watched_run(synthetic_model, budget_mb=int(size_mb / 2), shard_mb=32, n_gen=9,
                                     prefetch_depth=2, policy=policy)
    plan = watch.plan
    assert watch.accesses == summary.cache_hits + summary.cache_misses > 0
    print(f"{policy}: cache hit rate engine {summary.cache_hit_rate:.3f} / mincore {watch.cache_hit_rate:.3f}, "
          f"on time engine {summary.on_time_rate:.3f} / mincore {watch.on_time_rate:.3f}, "
          f"pinned {summary.pinned_mb:.0f} of {plan.streamable_bytes / MIB:.0f} MB")
    if policy == "lru":
        assert watch.cache_hit_rate <= 0.10  # cyclic access thrashes: every shard came from disk
    else:
        pinned_fraction = summary.pinned_mb * MIB / plan.streamable_bytes
        assert pinned_fraction > 0.15
        assert watch.cache_hit_rate == pytest.approx(pinned_fraction, abs=0.10)
    # The engine's figures are the kernel's, within a few accesses' worth of timing.
    assert summary.cache_hit_rate == pytest.approx(watch.cache_hit_rate, abs=0.10)
    assert summary.on_time_rate == pytest.approx(watch.on_time_rate, abs=0.10)
    assert 0.0 <= summary.on_time_rate <= 1.0


@pytest.mark.parametrize("policy", ["lru", "pinned"])
@pytest.mark.parametrize("model, budget_mb, shard_mb", [
    ("small_layer_model", 64, 4),  # issue #10: small layers, where lru peaked at 70-74 MB
    ("synthetic_model", 160, 32),
])
@pytest.mark.io_paths  # make test runs it again with SHARDSCOPE_IO=portable (conftest.py)
def test_resident_weights_stay_under_budget_plus_one_shard(request, model, budget_mb, shard_mb, policy, io_path):
    path = request.getfixturevalue(model)
    with io_path.watch(path):
        summary, watch, samples = _watched_run(path, budget_mb=budget_mb, shard_mb=shard_mb, n_gen=16,
                                               prefetch_depth=2, policy=policy)
    limit_mb = budget_mb + watch.plan.max_shard_bytes / MIB
    print(f"{os.path.basename(path)} {policy}: peak resident weights at layer starts "
          f"{watch.peak_weights / MIB:.1f} MB, at samples {max(s.resident_weights_mb for s in samples):.1f} MB, "
          f"limit {limit_mb:.1f} MB")
    assert summary.read_mb_per_token > 0.3 * watch.plan.streamable_bytes / MIB / 2  # it streamed
    io_path.check(summary.io_path)  # through the I/O path asked for, seen in /proc/<pid>/maps too
    assert watch.layer_starts >= 15 * len(watch.plan.layers)
    assert watch.peak_weights <= limit_mb * MIB  # mincore at every layer start
    assert samples and all(s.resident_weights_mb <= limit_mb for s in samples)  # and at every sample


def test_fitting_run_measures_its_hits(synthetic_model):
    """No hook while the model fits: the hits come from mincore per token, never assumed."""
    settings = RunSettings(model_path=synthetic_model, prompt=PROMPT, n_ctx=128, budget_mb=4096,
                           shard_mb=32, n_gen=6)
    with StreamingRun(settings) as run:
        summary = run.run()
        assert not run.session.hook_active
        plan = run.plan
        # Drop two shards behind the engine's back: the next token must count them as read.
        for shard in plan.shards[2:4]:
            span = run.mapping.clip(*shard.ranges[0])
            memory_calls.evict(span[0], span[1], run._fd, shard.ranges[0][0])
        before = run.controller.snapshot().counters
        run.controller.count_resident_pass()  # as after a token: those two are now missing
        after = run.controller.snapshot().counters
    accesses = sum(len(s) for s in plan.layer_shards)
    assert summary.cache_hit_rate == 1.0 and summary.on_time_rate == 1.0
    assert summary.cache_hits + summary.cache_misses == (summary.n_gen - 1) * accesses  # every decoded token
    assert (after.cache_hits - before.cache_hits, after.cache_misses - before.cache_misses) == (accesses - 2, 2)
