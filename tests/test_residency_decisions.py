"""The residency decisions on a fake plan, with the controller's threads simulated in steps.

No llama.cpp, no disk, no threads: a step loop plays compute, the loader, the mapper
and the evictor against one ``ResidencyBook`` and checks the budget at every step.
What the simulated kernel holds is tracked here from the I/O the book asked for
(bytes come in when a load starts, leave when the evictor gets to them), not from the
book's own accounting.
"""

from __future__ import annotations

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.shard_plan import Shard, ShardPlan
from shardscope.engine.stream.residency_decisions import (
    LOADING,
    RESIDENT,
    ResidencyBook,
    choose_pinned,
    require_budget,
    wanted,
)


def fake_plan(layer_mb: list[float], globals_mb: float, per_shard: int = 1) -> ShardPlan:
    """One shard per ``per_shard`` consecutive layers, globals first in the file."""
    shards, layer_shards = [], []
    offset = int(globals_mb * MIB)
    for first in range(0, len(layer_mb), per_shard):
        layers = tuple(range(first, min(first + per_shard, len(layer_mb))))
        ranges = []
        for layer in layers:
            size = int(layer_mb[layer] * MIB)
            ranges.append((offset, offset + size))
            offset += size
        shards.append(Shard(len(shards), layers, tuple(ranges)))
        layer_shards.extend((len(shards) - 1,) for _ in layers)
    streamable = offset - int(globals_mb * MIB)
    return ShardPlan("fake.gguf", 4 * MIB, tuple(shards), tuple(layer_shards), tuple(range(len(layer_mb))),
                     offset, streamable)


class Sim:
    """Compute, loader, mapper and evictor as steps; kernel bytes tracked from the I/O done."""

    def __init__(self, plan: ShardPlan, budget_mb: float, depth: int, policy: str,
                 load_steps: int = 2, compute_steps: int = 3, evict_steps: int = 1, in_flight: int = 2):
        self.plan = plan
        self.book = ResidencyBook(plan, require_budget(plan, budget_mb, depth), depth, policy)
        self.load_steps, self.compute_steps, self.evict_steps = load_steps, compute_steps, evict_steps
        self.in_flight = in_flight  # shards the loader has queued at the disk at once
        self.in_kernel = set(range(len(plan.shards)))  # llama.cpp's load read everything
        self.loading: list[list[int]] = []  # [shard, steps left]: the disk serves the oldest first
        self.evicting: list[list[int]] = []  # [shard, steps left], in queue order
        self.peak_kernel = 0
        self.steps = 0
        self.draining = False  # after a budget cut: the kernel is above it until the evictor catches up
        for index in self.book.cold_start(None):
            self.in_kernel.discard(index)

    def kernel_bytes(self) -> int:
        return self.plan.globals_bytes + sum(self.plan.shards[i].n_bytes for i in self.in_kernel)

    def step(self) -> None:
        """One tick of the I/O threads, then the budget checks."""
        book = self.book
        if self.evicting:  # the evictor: one shard at a time, in queue order
            self.evicting[0][1] -= 1
            if self.evicting[0][1] <= 0:
                index, _ = self.evicting.pop(0)
                self.in_kernel.discard(index)  # like the real evictor: whatever the books say now
                book.evicted(index)
        if self.loading:  # the loader (+ mapper): a load takes load_steps ticks
            self.loading[0][1] -= 1
            if self.loading[0][1] <= 0:
                book.loaded(self.loading.pop(0)[0])
        while len(self.loading) < self.in_flight:
            victims, target = book.next_step()
            self.queue(victims)
            if target is None:
                break
            self.in_kernel.add(target)  # asked for: its bytes may arrive any time from now
            self.loading.append([target, self.load_steps])
        self.steps += 1
        self.check()

    def queue(self, victims: list[int]) -> None:
        self.evicting.extend([index, self.evict_steps] for index in victims)

    def check(self) -> None:
        budget = self.book.budget_bytes
        kernel = self.kernel_bytes()
        self.peak_kernel = max(self.peak_kernel, kernel)
        assert self.book.accounted <= budget, f"step {self.steps}: books over budget"
        if self.draining and not self.evicting:
            self.draining = False
        if not self.draining:
            assert kernel <= budget, f"step {self.steps}: kernel {kernel / MIB:.1f} MB"

    def layer(self, pos: int) -> None:
        missing = self.book.access(pos)
        self.queue(self.book.behind(pos))
        while any(self.book.state[i] != RESIDENT for i in missing):
            self.step()
        needed = set(self.plan.layer_shards[pos])
        assert needed <= self.in_kernel, f"layer {pos} computes on shards the evictor dropped"
        for _ in range(self.compute_steps):
            self.step()

    def token(self) -> None:
        for pos in range(len(self.plan.layers)):
            self.layer(pos)

    def rates(self, tokens: int) -> tuple[float, float]:
        """(cache hit rate, on-time rate) over ``tokens`` tokens after two warm-up tokens."""
        for _ in range(2):
            self.token()
        c0 = self.book.counters.copy()
        for _ in range(tokens):
            self.token()
        c = self.book.counters
        accesses = (c.cache_hits - c0.cache_hits) + (c.cache_misses - c0.cache_misses)
        assert accesses == (c.on_time - c0.on_time) + (c.stalls - c0.stalls)
        return (c.cache_hits - c0.cache_hits) / accesses, (c.on_time - c0.on_time) / accesses


SMALL_LAYERS = fake_plan([3.0] * 30, globals_mb=45)  # issue #10: 30 layers of ~3 MB, 45 MB globals
EVEN = fake_plan([4.0] * 16, globals_mb=8)


@pytest.mark.parametrize("plan, budget_mb, depth", [
    (SMALL_LAYERS, 64, 0), (SMALL_LAYERS, 64, 2), (SMALL_LAYERS, 64, 4), (EVEN, 40, 1), (EVEN, 40, 3),
])
def test_cyclic_access_under_lru_thrashes(plan, budget_mb, depth):
    hit, on_time = Sim(plan, budget_mb, depth, "lru").rates(tokens=4)
    assert hit == 0.0  # every streamed shard is evicted just before it is needed again
    if depth == 0:
        assert on_time == 0.0  # nothing prefetched: every access waits


@pytest.mark.parametrize("plan, budget_mb, depth", [
    (SMALL_LAYERS, 64, 0), (SMALL_LAYERS, 64, 2), (SMALL_LAYERS, 80, 2), (EVEN, 40, 1), (EVEN, 48, 3),
])
def test_pinned_keeps_its_prefix(plan, budget_mb, depth):
    sim = Sim(plan, budget_mb, depth, "pinned")
    pinned = sim.book.pinned
    assert pinned and pinned == frozenset(range(len(pinned)))  # a prefix
    hit, _ = sim.rates(tokens=3)
    assert hit == pytest.approx(len(pinned) / len(plan.shards))  # equal shards: fraction by count
    for pos in range(len(plan.layers)):
        sim.layer(pos)
        assert all(sim.book.state[i] == RESIDENT for i in pinned)
        assert pinned <= sim.in_kernel


@pytest.mark.parametrize("policy", ["lru", "pinned"])
@pytest.mark.parametrize("depth", [0, 1, 2, 4])
@pytest.mark.parametrize("load_steps, compute_steps, evict_steps", [(1, 4, 1), (3, 1, 2), (2, 2, 5)])
@pytest.mark.parametrize("in_flight", [1, 2])
def test_budget_is_never_exceeded_in_any_step(policy, depth, load_steps, compute_steps, evict_steps, in_flight):
    for plan, budget_mb in ((SMALL_LAYERS, 64), (EVEN, 40), (fake_plan([2.0, 6.0, 3.0] * 6, 10), 44)):
        sim = Sim(plan, budget_mb, depth, policy, load_steps, compute_steps, evict_steps, in_flight)
        for _ in range(4):
            sim.token()  # Sim.check asserts books and kernel ≤ budget every step
        assert sim.peak_kernel >= plan.globals_bytes + 2 * min(s.n_bytes for s in plan.shards)  # it streamed


@pytest.mark.parametrize("policy", ["lru", "pinned"])
def test_budget_cut_mid_token_evicts_before_it_loads(policy):
    plan = SMALL_LAYERS
    sim = Sim(plan, 90, 2, policy)
    sim.token()
    for pos in range(12):
        sim.layer(pos)
    assert sim.kernel_bytes() > 64 * MIB
    sim.book.set_knobs(budget_bytes=64 * MIB)
    victims, target = sim.book.next_step()
    assert victims and sim.book.accounted <= 64 * MIB
    sim.queue(victims)
    sim.draining = True
    # No load starts until the evictor brought the kernel down to the budget with it.
    if target is not None:
        assert sim.kernel_bytes() + plan.shards[target].n_bytes <= 64 * MIB
    while sim.evicting:
        before = {i for i, st in enumerate(sim.book.state) if st == LOADING}
        sim.step()
        started = {i for i, st in enumerate(sim.book.state) if st == LOADING} - before
        if started:
            assert sim.kernel_bytes() <= 64 * MIB
    for pos in range(12, 30):
        sim.layer(pos)  # and from here every step is checked against the new budget
    sim.token()


def test_fitting_model_pins_everything_and_counts_from_measured_residency():
    plan = EVEN
    book = ResidencyBook(plan, 1024 * MIB, 2, "lru")
    assert book.pinned == frozenset(range(len(plan.shards)))
    resident = [True] * len(plan.shards)
    resident[3] = False  # llama.cpp's load left one shard out (or the kernel reclaimed it)
    assert book.cold_start(resident) == [3]
    book.resident_pass([True] * len(plan.shards))
    c = book.counters
    assert (c.cache_hits, c.cache_misses, c.on_time, c.stalls) == (15, 1, 15, 1)
    book.resident_pass(None)  # nothing measurable (no mapping): nothing counted, never assumed
    assert c.cache_hits + c.cache_misses == 16


def test_prefetched_in_time_is_on_time_but_not_a_cache_hit():
    plan = EVEN
    book = ResidencyBook(plan, 40 * MIB, 1, "lru")
    book.cold_start(None)
    victims, target = book.next_step()
    assert target == 0  # cold start prefetches the first shard
    book.loaded(0)
    assert book.access(0) == []
    c = book.counters
    assert (c.cache_hits, c.cache_misses, c.on_time, c.stalls) == (0, 1, 1, 0)
    assert book.access(0) == []  # used again with no read in between: a cache hit
    assert (c.cache_hits, c.on_time) == (1, 2)


def test_window_skips_pinned_shards_and_lends_the_current_layers_room():
    plan = EVEN
    pinned = frozenset({0, 1, 2})
    assert wanted(plan, None, 2, pinned) == ([3, 4], [0, 1, 2])
    assert wanted(plan, 1, 2, pinned)[0] == [1, 3, 4, 5]  # layer 1 is pinned: one more in the window
    assert wanted(plan, 15, 2, pinned)[0] == [15, 3, 4]  # wraps to the next token
    assert choose_pinned(plan, 40 * MIB, 1, "lru") == frozenset()


def test_budget_below_the_minimum_is_refused_with_the_minimum():
    with pytest.raises(ShardscopeError, match="the minimum is 57 MiB"):
        require_budget(SMALL_LAYERS, 50, 3)
