"""Issue 34: ``auto``, the default expert policy, follows whichever candidate order would have hit
most, and decides alike live and in a replay.

Routers here are generated in the test (numpy, seeded) with shapes none of the public traces has,
and in two families where different orders win: one whose picks repeat token to token but favour
no expert (lru wins: decay keeps once-popular experts), one with steady favourites and noisy
picks (decay/lfu win). The references are the other policies' own replays of the same routing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardscope.engine.experts.expert_cache import ExpertCache
from shardscope.engine.experts.policy_advice import advise, compare
from shardscope.engine.experts.replay import replay_one
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord, read_trace
from shardscope.engine.knobs.knobs import KNOBS

MIB = 1 << 20


def _trace(layers: int, n_expert: int, k: int, popular: float, context: float, noise: float, memory: float,
           tokens: int = 96, seed: int = 0) -> RoutingTrace:
    rng = np.random.default_rng(seed)
    pop = rng.standard_normal((layers, n_expert)) * popular
    proj = rng.standard_normal((layers, n_expert, 8)) / np.sqrt(8)
    ctx = np.zeros(8)
    records, union = [], [dict() for _ in range(layers)]
    for t in range(8 + tokens):
        ctx = memory * ctx + (1 - memory) * rng.standard_normal(8) * 3.0
        logits = pop + context * (proj @ ctx) + noise * rng.standard_normal((layers, n_expert))
        for layer in range(layers):
            picks = tuple(int(e) for e in np.argsort(-logits[layer])[:k])
            if t < 8:
                for e in picks:
                    union[layer][e] = union[layer].get(e, 0) + 1
            else:
                records.append(TraceRecord(t, layer, picks))
    prompt = [TraceRecord(0, layer, tuple(union[layer]), tuple(union[layer].values()), True) for layer in range(layers)]
    return RoutingTrace(TraceHeader("generated", n_expert, k, {layer: MIB for layer in range(layers)}),
                        tuple(prompt + records))


BURSTS = dict(popular=0.3, context=2.0, noise=0.4, memory=0.3)  # lag-1 reuse, no favourites: lru's
STEADY = dict(popular=1.8, context=0.6, noise=0.6, memory=0.8)  # favourites that stay: decay's, lfu's


def _rates(trace: RoutingTrace, cache: int) -> dict[str, float]:
    return {p: 100 * replay_one(trace, p, cache).expert_hit_rate for p in ("auto", "decay", "lru", "lfu")}


@pytest.mark.parametrize("shape", [(10, 24, 3), (20, 96, 6)])
def test_auto_follows_lru_where_lru_wins_and_decay_where_decay_wins(shape):
    layers, n_expert, k = shape
    bursts = _rates(_trace(layers, n_expert, k, **BURSTS), layers * k * MIB)
    assert bursts["lru"] > bursts["decay"] + 3  # the family is what it says
    assert bursts["auto"] >= bursts["lru"] - 1.0, bursts
    steady = _rates(_trace(layers, n_expert, k, **STEADY, seed=1), 2 * layers * k * MIB)
    assert steady["decay"] > steady["lru"] + 2
    assert steady["auto"] >= max(steady["decay"], steady["lfu"]) - 1.0, steady


def test_auto_switches_order_without_loading_or_evicting_anything():
    """A switch of leader changes which order the next victims come from, nothing else: the live
    cache's units are the same right after the access that switched it."""
    trace = _trace(8, 16, 2, **BURSTS)
    cache = ExpertCache("auto", 8 * 2 * MIB, trace.header.unit_bytes, 2)
    switched = 0
    for r in trace.records:
        before = set(cache.resident)
        order = cache.order
        got = cache.access(r.layer, r.experts, dict(zip(r.experts, r.counts)) if r.prompt else None)
        assert set(cache.resident) == (before - set(got.evicted)) | set(got.misses)
        switched += cache.order != order
    assert switched >= 1 and cache.shadows.switches == switched
    # the shadow directories hold expert ids and ticks only, each within the live cache's bytes
    assert len(cache.shadows.caches) == 4  # decay, lru, lfu, rank: a loop over none would pass
    for shadow in cache.shadows.caches.values():
        assert shadow.used_bytes <= cache.capacity_bytes
        assert all(isinstance(u, tuple) and isinstance(t, int) for u, t in shadow.resident.items())


def test_a_live_switch_to_auto_and_a_shrink_keep_the_shadows_in_step():
    trace = _trace(6, 16, 2, **STEADY)
    cache = ExpertCache("lru", 12 * MIB, trace.header.unit_bytes, 2)
    for r in trace.records[:40]:
        cache.access(r.layer, r.experts, dict(zip(r.experts, r.counts)) if r.prompt else None)
    cache.policy = "auto"
    from shardscope.engine.experts.adaptive_policy import CANDIDATES

    # one shadow per candidate (an empty set of shadows would pass every "all" below)
    assert cache.shadows is not None and set(cache.shadows.caches) == set(CANDIDATES)
    assert all(set(s.resident) == set(cache.resident) for s in cache.shadows.caches.values())
    # seeded with the live cache's ticks, each shadow keeps counting after them: its lru order is the live one's
    assert all(s._tick >= max(cache.resident.values()) for s in cache.shadows.caches.values())
    cache.capacity_bytes = 8 * MIB
    cache.make_room(0, protected=set())
    assert cache.used_bytes <= 8 * MIB and all(s.used_bytes <= 8 * MIB for s in cache.shadows.caches.values())
    for r in trace.records[40:]:
        cache.access(r.layer, r.experts)
    assert cache.used_bytes <= 8 * MIB


def test_the_shadows_search_after_the_live_cache_decides_and_decide_alike():
    """The expert streamer sends a layer's reads before auto's shadow directories search for their own
    victims (ExpertCache.settle after the submits): an access scores the shadows by the picks they
    hold, and their accesses run at settle. The live decisions are those of shadows that took every
    access at once (ShadowDirectories.access, as before), settled early or not."""
    trace = _trace(8, 24, 3, **BURSTS)

    def run(settle_every: int | None, eager: bool):
        cache = ExpertCache("auto", 8 * 3 * MIB, trace.header.unit_bytes, 3)
        calls = []
        for name, shadow in cache._shadows.caches.items():
            shadow_access = shadow.access
            shadow.access = lambda *a, _f=shadow_access: calls.append(a[:2]) or _f(*a)
        if eager:  # every shadow searched inside the access, the way auto ran before
            cache._shadows.decide = lambda *a, _s=cache._shadows, _d=cache._shadows.decide: (
                _d(*a), _s.settle())[0]
        seen = []
        for i, r in enumerate(trace.records):
            before = len(calls)
            got = cache.access(r.layer, r.experts, dict(zip(r.experts, r.counts)) if r.prompt else None)
            this = sum(1 for a in calls[before:] if a == (r.layer, list(dict.fromkeys(r.experts))))
            if not eager:  # at most the leader's (a twin's victims, once a token its state): never all four
                assert this <= 1, "the shadows searched before the live cache's reads went out"
            if settle_every and i % settle_every == 0:
                cache.settle()
                assert len(calls) == 4 * (i + 1)  # every shadow took every access, in order, once
            seen.append((got.hits, got.misses, got.evicted, cache.order))
        return seen, cache.shadows.switches

    reference = run(None, eager=True)
    assert reference[1] >= 1  # the leader moved: a switch's timing is part of what is compared
    assert run(None, eager=False) == reference
    assert run(1, eager=False) == reference
    assert run(3, eager=False) == reference


def test_auto_is_the_default_and_bench_help_names_it(capsys):
    from shardscope.engine.cli.cli import main

    assert KNOBS["expert_policy"].default == "auto"
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: auto)" in text.split("--expert-policy {auto,decay,lru,lfu,hot}", 2)[2].split(" --", 1)[0]


def test_advice_names_the_trace_and_the_margin_and_calls_a_tie_under_one_point():
    """The advice for an lru run on a router with steady favourites: lru's rate as an LRU simulated
    apart from the engine (tests/test_trace_sizing.py) has it, the better policy's lead is the
    difference of the two printed rates, and the policy it names is the one printed first."""
    import re

    from tests.test_trace_sizing import lru_hit_rate

    trace = _trace(10, 24, 3, **STEADY, tokens=60, seed=1)
    line = advise(trace, 30 * MIB, "lru", "generated.csv")
    assert line.startswith("replaying generated.csv (60 tokens) at 30 MiB: ")
    best, best_pct, lru_pct, margin, named = re.search(
        r"MiB: (\w+) ([\d.]+) % vs lru ([\d.]+) %: \w+ by ([\d.]+) points \(expert policy (\w+)\)", line).groups()
    assert float(lru_pct) == pytest.approx(100 * lru_hit_rate(trace, 30 * MIB), abs=0.05)
    # each printed to 0.1: the margin of the unrounded rates lies within 0.1 of the printed ones' difference
    assert float(margin) == pytest.approx(float(best_pct) - float(lru_pct), abs=0.1 + 1e-9) and float(margin) >= 1
    assert named == best != "lru"
    long = advise(_trace(10, 24, 3, **BURSTS, tokens=100), 30 * MIB, "decay", "this run's routing")
    assert long.startswith("replaying the last 64 tokens of this run's routing at 30 MiB")  # a long run: its end
    assert "tie" in compare({"auto": 0.400, "lru": 0.395}, "lru", "t.csv", 10)
    assert compare({"auto": 0.400, "lru": 0.395}, "auto", "t.csv", 10) == ""  # nothing better to say


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-auto") / "moe-120.gguf"
    write_synthetic_model(path, 120, moe=MoeSpec(32, 4), seed=4)  # the real-shaped router (default)
    return str(path)


def test_a_live_auto_run_and_its_replay_hit_alike(moe_model, tmp_path):
    """The run's own trace replayed through auto at the run's cache gives the run's hits and
    misses (0.5 point on the rate, as the issue asks; here they are equal)."""
    from shardscope.engine.experts.expert_run import ExpertRun
    from shardscope.engine.knobs.settings import RunSettings

    trace = tmp_path / "auto.jsonl"
    settings = RunSettings(model_path=moe_model, budget_mb=60, n_gen=24, n_ctx=128)  # no expert policy given
    with ExpertRun(settings, trace_path=str(trace)) as run:
        summary = run.run()
        cache_bytes = run.cache_bytes
        booked = dict(run.streamer.cache.unit_bytes)  # an expert's bytes plus the pages it shares at its edges
    assert summary.expert_policy == "auto"
    assert summary.expert_misses > 0 and 0 < summary.expert_hit_rate < 1
    written = read_trace(trace)
    # the trace's header has the experts' own bytes; the live cache books the edge pages too, so a
    # cache holds a unit fewer where the edges add up to one: replayed with the bytes the run booked
    replayed = replay_one(RoutingTrace(dataclasses.replace(written.header, unit_bytes=booked), written.records),
                          "auto", cache_bytes)
    assert (replayed.hits, replayed.misses) == (summary.expert_hits, summary.expert_misses), summary
    assert abs(replayed.expert_hit_rate - summary.expert_hit_rate) <= 0.005


def test_a_rounds_advice_replays_only_the_last_tokens_walked_from_the_end():
    """Each round's advice replays the last ADVICE_TOKENS decoded tokens; taking them must not copy
    the whole session's routing (it grew with the session: issue 32). Prompt records are skipped,
    the order is kept, and whether earlier tokens exist is said (the advice names "the last N")."""
    import threading
    from collections import deque
    from types import SimpleNamespace

    from shardscope.engine.experts.expert_streaming import ExpertStreamer
    from shardscope.engine.experts.routing_trace import TraceRecord

    records = deque()
    for token in range(10):
        records.append(TraceRecord(token, 0, (1, 2), (3, 3), prompt=True))  # a round's prompt pass
        for layer in (0, 1):
            records.append(TraceRecord(token, layer, (token % 4, 5)))
    streamer = SimpleNamespace(records=records, _state_lock=threading.Lock())
    tail, more = ExpertStreamer.routing_tail(streamer, 3)
    assert [(r.token, r.layer) for r in tail] == [(7, 0), (7, 1), (8, 0), (8, 1), (9, 0), (9, 1)]
    assert more and not any(r.prompt for r in tail)
    everything, more = ExpertStreamer.routing_tail(streamer, 64)
    assert len(everything) == 20 and not more
