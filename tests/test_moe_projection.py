"""MoE projection: `shardscope size`/`plan` and the device projection use the expert hit rate
(given, or replayed from a routing trace) and the model's real dense/expert split.

Expected values are computed here from the GGUF's tensor table by name (not through the
sizing module's own shape) and, for a replayed trace, from an LFU written in this test (sizing
replays through the engine's own cache, so the engine's replay would be no independent source).
"""

from __future__ import annotations

import random

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.devices.projection import moe_ssd_bytes_per_token
from shardscope.engine.devices.sizing import SizingInput
from shardscope.engine.devices.sizing_gguf import size_from_gguf_header
from shardscope.engine.devices.sizing_numbers import size_from_numbers
from shardscope.engine.experts.routing_trace import TraceHeader, TraceRecord, TraceWriter, read_trace
from shardscope.engine.layout.gguf_layout import read_layout

MIB = 1024 * 1024
KIMI_LIKE = SizingInput(total_params=1.56e12, active_params=48e9, bits_per_weight=8, n_layers=61,
                        globals_bytes=2.35e9, name="1.56 TB MoE")


@pytest.fixture(scope="module")
def moe_gguf(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-proj") / "moe-60.gguf"
    write_synthetic_model(path, 60, moe=MoeSpec(16, 4, shared_experts=1, routing_skew=2.0), seed=4)
    return str(path)


def _split(path: str) -> tuple[int, int, int]:
    """(globals, dense layer bytes, routed expert bytes) straight from the tensor names."""
    g = d = e = 0
    for t in read_layout(path).tensors:
        if not t.name.startswith("blk."):
            g += t.n_bytes
        elif "_exps" in t.name:
            e += t.n_bytes
        else:
            d += t.n_bytes
    return g, d, e


def test_formula():
    assert moe_ssd_bytes_per_token(10, 100, 0.25) == pytest.approx(10 + 75)
    with pytest.raises(Exception, match="expert_hit_rate"):
        moe_ssd_bytes_per_token(0, 100, 1.5)


def test_given_hit_rate_scales_the_expert_bytes_only(moe_gguf):
    g, d, e = _split(moe_gguf)
    f = 4 / 16
    budget = (g + d) / MIB + 40  # dense fits; the rest is expert cache
    for hit in (0.0, 0.4, 1.0):
        r = size_from_gguf_header(moe_gguf, "iphone-16-pro", budget_mb=budget, expert_hit_rate=hit)
        assert r.streamed_bytes_per_token == pytest.approx((1 - hit) * f * e, rel=1e-9)
        assert any(f"expert hit rate {hit:.1%} (given)" in a for a in r.assumptions)
        if hit < 1:
            bandwidth = r.projection.terms["ssd"] - r.projection.ssd_latency_s  # + the device's request latency
            assert bandwidth == pytest.approx((1 - hit) * f * e / (r.ssd_mb_s * 1e6))
            assert 0 < r.projection.ssd_latency_s <= r.n_layers * 150e-6 + 1e-12
            assert not r.projection.overlapped  # misses are waited for


def test_worked_example_states_its_hit_rate():
    from shardscope.engine.devices.devices import get_device

    iphone = get_device("iphone-16-pro").with_extended_limit()
    plain = size_from_numbers(KIMI_LIKE, iphone)
    assert any("expert hit rate not given" in a for a in plain.assumptions)
    half = size_from_numbers(KIMI_LIKE, iphone, expert_hit_rate=0.5)
    touched = 48e9 - 2.35e9  # all layer bytes are routed experts when planned from numbers
    assert half.streamed_bytes_per_token == pytest.approx(0.5 * touched, rel=1e-6)


def _trace(tmp_path, n_expert=16, used=4, layers=3, unit=1 * MIB, tokens=120):
    rng = random.Random(7)
    writer = TraceWriter(tmp_path / "t.jsonl", TraceHeader("m.gguf", n_expert, used, {k: unit for k in range(layers)}))
    weights = [10 if e < 4 else 1 for e in range(n_expert)]
    for token in range(1, tokens + 1):
        for layer in range(layers):
            picks: set[int] = set()
            while len(picks) < used:
                picks.add(rng.choices(range(n_expert), weights)[0])
            writer.write(TraceRecord(token, layer, tuple(sorted(picks))))
    writer.close()
    return tmp_path / "t.jsonl"


def _lfu_hit_rate(accesses, capacity_units: int) -> float:
    """An independent LFU over equal-sized units (not the engine's cache): a layer's picks are hits
    if resident; misses evict the least frequently picked unit (every pick counts, resident or
    not), ties to the least recently used, then the earlier in router order; never a unit the
    current layer picked."""
    counts: dict = {}
    resident: dict = {}  # unit -> (last tick, router-order sequence)
    hits = misses = seq = 0
    for tick, (layer, experts) in enumerate(accesses, 1):
        picked = [(layer, x) for x in dict.fromkeys(experts)]
        new = []
        for unit in picked:
            counts[unit] = counts.get(unit, 0) + 1
            seq += 1
            if unit in resident:
                hits += 1
                resident[unit] = (tick, seq)
            else:
                misses += 1
                new.append((unit, seq))
        while len(resident) + len(new) > capacity_units:
            victim = min((u for u in resident if u not in picked), key=lambda u: (counts[u], *resident[u]))
            del resident[victim]
        for unit, s in new:
            resident[unit] = (tick, s)
    return hits / (hits + misses)


def test_trace_is_replayed_at_the_same_share_of_the_experts(moe_gguf, tmp_path, capsys):
    g, d, e = _split(moe_gguf)
    f = 4 / 16
    cache_mb = 30
    budget = (g + d) / MIB + cache_mb
    path = _trace(tmp_path)
    trace = read_trace(path)
    r = size_from_gguf_header(moe_gguf, "iphone-16-pro", budget_mb=budget, expert_trace=trace, expert_policy="lfu")
    # The expert cache is the budget less the dense bytes (issue 23): cache_mb of the model's e
    # expert bytes, the same share of the trace's 16 experts x 3 layers x 1 MiB.
    units = int(cache_mb * MIB / e * 16 * 3 * MIB) // MIB
    expected = _lfu_hit_rate([(rec.layer, rec.experts) for rec in trace.records], units)
    assert r.streamed_bytes_per_token == pytest.approx((1 - expected) * f * e, rel=1e-9)
    assert main(["plan", "--gguf", moe_gguf, "--budget-mb", f"{budget:.6f}", "--trace", str(path),
                 "--expert-policy", "lfu"]) == 0
    assert f"expert hit rate {expected:.1%} (replayed" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--expert-hit-rate", "1.5"], "--expert-hit-rate: must be between 0 and 1"),
    (["--expert-hit-rate", "0.5", "--trace", "x.jsonl"], "not both"),
    (["--trace", "/nonexistent/t.jsonl"], "/nonexistent/t.jsonl"),
])
def test_bad_moe_plan_input_is_one_line_exit_2(args, words, capsys):
    argv = ["plan", "--total-params", "1.56e12", "--active-params", "48e9", "--bits", "8", "--layers", "61"]
    assert main(argv + args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_expert_run_summary_projects_its_touched_bytes(tmp_path):
    from shardscope.engine.devices.run_projection import measurement_from_summary
    from shardscope.engine.experts.expert_run import ExpertRunSummary
    from tests.conftest import blank_summary

    base = blank_summary(model_size_mb=400.0, globals_mb=40.0, read_mb_per_token=30.0, avg_ts=5.0,
                         wait_ms_per_token=100.0, n_threads=2, prefetch_depth=0)
    s = ExpertRunSummary(**{**base.__dict__, "n_expert": 64, "n_expert_used": 8})
    m = measurement_from_summary(s)
    assert m.ssd_bytes_per_token == pytest.approx(30 * MIB)
    assert m.resident_bytes_per_token == pytest.approx((40 + 360 * 8 / 64 - 30) * MIB)
    assert m.compute_s_per_token == pytest.approx(0.2 - 0.1) and not m.prefetch
