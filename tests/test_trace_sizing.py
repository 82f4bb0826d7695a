"""size --trace: the model's bytes from a routing trace's header, checked against the header read by hand.

Bytes below were added up from tests/data/route-traces/qwen.route.csv's '# layer=' lines by hand
(grep '^# layer' | awk): 24 layers of expert_bytes=3059712 / dense_bytes=11953152 and 24 layers of
expert_bytes=2654208 / dense_bytes=11682816, n_expert=128, n_expert_used=6:

    sum of expert bytes = 24 x 3,059,712 + 24 x 2,654,208 = 137,134,080
    sum of dense bytes  = 24 x 11,953,152 + 24 x 11,682,816 = 567,263,232
    a token's picks at k=6 = 6 x 137,134,080 = 822,804,480 bytes (823 MB); at k=8 1,097,072,640
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.devices.sizing_trace import size_from_trace
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord, TraceWriter, read_trace

TRACES = Path(__file__).parent / "data" / "route-traces"
QWEN = TRACES / "qwen.route.csv"
QWEN_EXPERT_SUM = 137_134_080
QWEN_DENSE_SUM = 567_263_232


def lru_hit_rate(trace, cache_bytes: int) -> float:
    """An LRU cache of ``cache_bytes`` over the trace, written here apart from the engine's
    ExpertCache/replay (which `size --trace` calls): decoded picks that were held ÷ decoded picks.
    A pass's picks become the most recent in router order; a miss evicts the least recent units
    that are not among the pass's picks until it fits; prompt passes load but are not counted."""
    from collections import OrderedDict

    held, used, hits, picks = OrderedDict(), 0, 0, 0
    sizes = trace.header.unit_bytes
    for r in trace.records:
        picked = [(r.layer, e) for e in dict.fromkeys(r.experts)]
        missing = [u for u in picked if u not in held]
        if not r.prompt:
            hits, picks = hits + len(picked) - len(missing), picks + len(picked)
        need = sizes[r.layer] * len(missing)
        for old in [u for u in held if u not in picked]:
            if used + need <= cache_bytes:
                break
            del held[old]
            used -= sizes[old[0]]
        for u in missing:
            held[u] = True
            used += sizes[u[0]]
        for u in picked:
            held.move_to_end(u)
    return hits / picks


def test_the_lru_simulation_here_counts_by_hand():
    """The simulation above on a trace small enough to follow by hand: one layer of 1-byte experts,
    a cache of 2 bytes, decoded picks (1), (2), (1), (3), (1), (2):
    (1) miss; (2) miss → {1,2}; (1) hit → order 2,1; (3) miss, evicts 2 → {1,3}; (1) hit → 3,1;
    (2) miss, evicts 3 → {1,2}. Hits 2 of 6 picks = 1/3."""
    header = TraceHeader("hand", 4, 1, {0: 1})
    records = tuple(TraceRecord(t, 0, (e,)) for t, e in enumerate((1, 2, 1, 3, 1, 2)))
    assert lru_hit_rate(RoutingTrace(header, records), 2) == pytest.approx(1 / 3)


def test_route_trace_header_gives_each_layers_dense_bytes():
    header = load_trace(QWEN).header
    assert len(header.dense_bytes) == 48 and header.has_layer_bytes
    assert sum(header.dense_bytes.values()) == QWEN_DENSE_SUM
    assert sum(header.unit_bytes.values()) == QWEN_EXPERT_SUM
    assert header.dense_bytes[0] == 11_953_152 and header.dense_bytes[6] == 11_682_816  # lines 3 and 9 of the file


@pytest.mark.parametrize("name", ["qwen", "gemma", "gptoss"])
def test_size_trace_alone_streams_the_missed_share_of_the_headers_picks(name, capsys):
    path = TRACES / f"{name}.route.csv"
    # lru: the phone's policy, fast to replay
    assert main(["size", "--trace", str(path), "--expert-policy", "lru"]) == 0
    out = capsys.readouterr().out
    assert f"bytes from  the trace header of {path}" in out
    # the header's picks a token, added up here from the '# layer=' lines themselves
    text = path.read_text()
    k = int(re.search(r"n_expert_used=(\d+)", text).group(1))
    picks = k * sum(int(b) for b in re.findall(r"^# layer=\d+ expert_bytes=(\d+)", text, re.M))
    cache_mib = float(re.search(r"expert cache ([\d,.]+) MiB", out).group(1).replace(",", ""))
    hit = float(re.search(r"expert hit rate ([\d.]+)% \(replayed", out).group(1)) / 100
    # an LRU cache of the printed size simulated here, apart from the engine's replay (0.05 MiB printed rounding)
    assert lru_hit_rate(load_trace(path), int(cache_mib * 2**20)) == pytest.approx(hit, abs=0.002)
    streamed = re.search(r"streamed    ([\d.]+) (MB|GB) per token", out)
    streamed_bytes = float(streamed.group(1)) * (1e9 if streamed.group(2) == "GB" else 1e6)
    assert streamed_bytes == pytest.approx((1 - hit) * picks, rel=0.05)


def test_experts_used_rescales_the_picks_and_says_so(capsys):
    trace = load_trace(QWEN)
    at8 = size_from_trace(trace, str(QWEN), "oneplus-15r", budget_mb=4000, experts_used=8, expert_policy="lru")
    hit = lru_hit_rate(trace, int(at8.expert_cache_bytes))  # the trace's own k=6 picks, simulated here
    assert at8.streamed_bytes_per_token == pytest.approx((1 - hit) * 8 * QWEN_EXPERT_SUM, rel=1e-9)
    assert any("k re-scaled to 8 (the trace ran 6)" in a for a in at8.assumptions)
    assert "k = 8 (the trace ran 6)" in at8.bytes_source


def test_experts_used_below_the_traces_k_replays_its_top_k(capsys):
    """k = 4 of a k = 6 trace: the run's picks are the router's top 4 of each recorded access (highest
    weight first), so the hit is the simulation above on the trace cut so, not the trace's own 6 picks."""
    from dataclasses import replace

    trace = load_trace(QWEN)
    at4 = size_from_trace(trace, str(QWEN), "oneplus-15r", budget_mb=4000, experts_used=4, expert_policy="lru")

    def top4(r):
        keep = sorted(sorted(range(len(r.experts)), key=lambda i: -r.weights[i])[:4])
        return replace(r, experts=tuple(r.experts[i] for i in keep), weights=tuple(r.weights[i] for i in keep))

    cut = RoutingTrace(trace.header, tuple(r if r.prompt else top4(r) for r in trace.records))
    hit4, hit6 = lru_hit_rate(cut, int(at4.expert_cache_bytes)), lru_hit_rate(trace, int(at4.expert_cache_bytes))
    assert abs(hit4 - hit6) > 0.01  # the cut changes the answer: a replay at the trace's k would miss it
    assert at4.streamed_bytes_per_token == pytest.approx((1 - hit4) * 4 * QWEN_EXPERT_SUM, rel=0.01)
    assert any("at k = 4: replayed, the top 4 of the trace's 6 picks" in a for a in at4.assumptions)


def test_globals_estimated_and_said_so_unless_given():
    trace = load_trace(QWEN)
    estimated = size_from_trace(trace, str(QWEN), "oneplus-15r", budget_mb=4000, expert_hit_rate=0.5)
    given = size_from_trace(trace, str(QWEN), "oneplus-15r", budget_mb=4000, globals_bytes=436e6, expert_hit_rate=0.5)
    assert any(a.startswith("globals (embeddings + output head) not in the trace header: estimated")
               for a in estimated.assumptions)
    assert not any(a.startswith("globals") for a in given.assumptions)
    # weights = globals + dense + 128 experts of every layer, all from the header
    assert given.weight_bytes == pytest.approx(436e6 + QWEN_DENSE_SUM + 128 * QWEN_EXPERT_SUM)
    assert given.dense_resident_bytes == pytest.approx(436e6 + QWEN_DENSE_SUM)


@pytest.mark.parametrize("args, words", [
    (["--total-params", "3e10", "--bits", "4.8", "--layers", "48"], "header gives the model's bytes per layer"),
    (["--experts-used", "200"], "--experts-used: must be a whole number from 1 to the trace's n_expert (128)"),
])
def test_size_trace_refusals_are_one_line(args, words, capsys):
    assert main(["size", "--trace", str(QWEN), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and "Traceback" not in err


def test_experts_used_without_a_trace_model_is_refused(capsys):
    assert main(["size", "--total-params", "3e10", "--active-params", "3e9", "--bits", "4", "--layers", "48",
                 "--experts-used", "8"]) == 2
    assert "--experts-used: re-scales the k of a trace" in capsys.readouterr().err


def test_json_trace_dense_bytes_round_trip_and_a_trace_without_them_asks_for_the_model(tmp_path, capsys):
    with_dense = tmp_path / "d.jsonl"
    w = TraceWriter(with_dense, TraceHeader("m.gguf", 8, 2, {0: 1000, 1: 1000}, {0: 5000, 1: 7000}))
    for token in range(3):
        for layer in (0, 1):
            w.write(TraceRecord(token, layer, (token % 8, (token + 1) % 8)))
    w.close()
    assert json.loads(with_dense.read_text().splitlines()[0])["dense_bytes"] == {"0": 5000, "1": 7000}
    assert read_trace(with_dense).header.dense_bytes == {0: 5000, 1: 7000}
    bare = tmp_path / "bare.jsonl"
    w = TraceWriter(bare, TraceHeader("m.gguf", 8, 2, {0: 1000, 1: 1000}))
    w.write(TraceRecord(0, 0, (1, 2)))
    w.close()
    assert main(["size", "--trace", str(bare)]) == 2
    err = capsys.readouterr().err
    assert "header has no dense bytes per layer" in err and "--model" in err


def test_plain_csv_dense_bytes_line_makes_the_trace_a_model(tmp_path, capsys):
    path = tmp_path / "plain.csv"
    # 2 layers x 4 experts of 1 MB, 3 MB dense a layer, k = 2: picks 2 x 2 x 1 MB = 4 MB a token
    path.write_text("# model=tiny n_expert=4 n_expert_used=2\n# expert_bytes=1000000\n# dense_bytes=3000000\n"
                    "token,layer,expert\n" + "".join(f"{t},{l},{(t + l) % 4}\n{t},{l},{(t + l + 1) % 4}\n"
                                                     for t in range(4) for l in range(2)))
    assert main(["size", "--trace", str(path), "--globals-bytes", "1e6", "--budget-mb", "12"]) == 0
    out = capsys.readouterr().out
    assert "bytes from  the trace header" in out and "a token's picks 4 MB" in out
    assert "weights     15 MB" in out  # 1 MB globals + 2 x 3 MB dense + 2 x 4 x 1 MB experts
