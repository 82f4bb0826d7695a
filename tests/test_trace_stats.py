"""Routing statistics (engine.experts.trace_stats) on traces whose answers are known by hand,
on a real model's published trace, and through ``shardscope replay --stats`` / ``trace-stats``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.cli.cli import main
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord
from shardscope.engine.experts.trace_stats import trace_stats

# BigMoeOnEdge's Qwen3-30B-A3B trace, byte for byte (tests/data/route-traces/NOTICE).
QWEN_CSV = Path(__file__).resolve().parent / "data" / "route-traces" / "qwen.route.csv"


def _hand_trace() -> RoutingTrace:
    """8 experts, top-2, 10 decoded tokens. Layer 0 always picks {0, 1}; layer 1 picks
    {t mod 8, t+1 mod 8}: half of each token's picks were the previous token's, all of them
    the picks 8 back; counts e0..e7 = 3,4,3,2,2,2,2,2 (top-2 cover 7 of 20)."""
    header = TraceHeader("hand.gguf", 8, 2, {0: 4096, 1: 4096})
    records = [TraceRecord(0, 0, (5, 6, 7), (3, 1, 1), prompt=True)]  # a prompt union: not counted
    for t in range(10):
        records.append(TraceRecord(t, 0, (0, 1)))
        records.append(TraceRecord(t, 1, (t % 8, (t + 1) % 8)))
    return RoutingTrace(header, tuple(records))


def test_known_answers():
    s = trace_stats(_hand_trace())
    l0, l1 = s.layers
    assert (l0.lag1, l0.lag8, l0.static_topk, l0.distinct, l0.hottest8) == (1.0, 1.0, 1.0, 2, 1.0)
    assert (l1.lag1, l1.lag8, l1.distinct, l1.hottest8) == (0.5, 1.0, 8, 1.0)
    assert l1.static_topk == pytest.approx(7 / 20)
    assert s.tokens == 10 and l0.tokens == 10
    assert s.lag1 == pytest.approx(0.75) and s.lag8 == 1.0 and s.static_topk == pytest.approx((1 + 7 / 20) / 2)
    assert (s.distinct_mean, s.distinct_min, s.distinct_max) == (5.0, 2, 8)
    assert s.random == 0.25


def test_short_trace_has_no_lag8_and_thirds_by_depth():
    header = TraceHeader("m", 16, 1, {i: 1 for i in range(6)})
    # 3 tokens; layer i picks expert 0 on the first i tokens (rising concentration), else a new one.
    records = [TraceRecord(t, layer, (0,) if t < min(layer, 3) else (1 + t + 3 * layer,))
               for t in range(3) for layer in range(6)]
    s = trace_stats(RoutingTrace(header, tuple(records)))
    assert all(math.isnan(r.lag8) for r in s.layers) and math.isnan(s.lag8)
    assert [r.hottest8 for r in s.layers] == [1.0] * 6  # 3 picks, at most 3 experts: 8 cover all
    assert [r.distinct for r in s.layers] == [3, 3, 2, 1, 1, 1]
    assert s.distinct_min == 1 and s.distinct_max == 3


def test_only_a_prompt_is_refused():
    header = TraceHeader("m", 8, 2, {0: 1})
    trace = RoutingTrace(header, (TraceRecord(0, 0, (1, 2), (1, 1), prompt=True),))
    with pytest.raises(ShardscopeError, match="no decoded tokens"):
        trace_stats(trace, "p.jsonl")


def _read_route_csv(path: Path) -> RoutingTrace:
    """A small converter of BigMoeOnEdge's ``# route_trace v1`` CSV (decode rows) for this test."""
    n_expert = used = 0
    unit: dict[int, int] = {}
    picks: dict[tuple[int, int], list[int]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            kv = dict(w.split("=", 1) for w in line[1:].split() if "=" in w)
            if "n_expert" in kv:
                n_expert, used = int(kv["n_expert"]), int(kv["n_expert_used"])
            elif "expert_bytes" in kv:
                unit[int(kv["layer"])] = int(kv["expert_bytes"])
        elif line[:1].isdigit():
            turn, phase, step, layer, _slot, expert = map(int, line.split(",")[:6])
            if phase == 1:
                picks.setdefault((step, layer), []).append(expert)
    records = tuple(TraceRecord(step, layer, tuple(e)) for (step, layer), e in sorted(picks.items()))
    return RoutingTrace(TraceHeader(path.name, n_expert, used, unit), records)


# BigMoeOnEdge's findings on this trace (decode rows; their own script, scripts/route-analyze.py;
# /work/shared/notes/real-routing-facts.md), at the precision they print: statistic → figure.
PUBLISHED_QWEN = {
    "lag-1 reuse, mean over layers (%)": 38.0,
    "lag-8 reuse, mean over layers (%)": 26.7,
    "static top-k share, mean over layers (%)": 37.5,  # (37.6 % is their hot list learned from the decode)
    "distinct experts per layer, mean": 64,
    "distinct experts per layer, min": 33,
    "distinct experts per layer, max": 107,
    "hottest-8 share, mean over layers (%)": 44.5,
    "hottest-8 share, layer 0 (%)": 21.5,
}


def _as_published(s) -> dict:
    """trace_stats' figures rounded as the publication prints them (0.1 % or whole experts)."""
    return {
        "lag-1 reuse, mean over layers (%)": round(100 * s.lag1, 1),
        "lag-8 reuse, mean over layers (%)": round(100 * s.lag8, 1),
        "static top-k share, mean over layers (%)": round(100 * s.static_topk, 1),
        "distinct experts per layer, mean": round(s.distinct_mean),
        "distinct experts per layer, min": s.distinct_min,
        "distinct experts per layer, max": s.distinct_max,
        "hottest-8 share, mean over layers (%)": round(100 * s.hottest8, 1),
        "hottest-8 share, layer 0 (%)": round(100 * s.layers[0].hottest8, 1),
    }


@pytest.fixture(scope="module")
def qwen_stats():
    assert QWEN_CSV.is_file(), f"{QWEN_CSV} is part of the repository"  # never a skip
    return trace_stats(_read_route_csv(QWEN_CSV))


def test_real_qwen_trace_matches_the_published_figures(qwen_stats):
    """BigMoeOnEdge's findings.md: lag-1 38.0 %, lag-8 26.7 %, static top-k 37.5 %,
    distinct 64 (33–107), hottest-8 44.5 % (layer 0: 21.5 %). Every figure, exactly at the
    published precision."""
    s = qwen_stats
    assert (s.n_expert, s.n_expert_used, len(s.layers)) == (128, 6, 48)
    assert _as_published(s) == PUBLISHED_QWEN


# (figure changed, the TraceStats field and how far one unit of the published precision moves it)
ONE_UNIT = [("lag1", 0.001), ("lag1", -0.001), ("lag8", 0.001), ("lag8", -0.001), ("static_topk", 0.001),
            ("static_topk", -0.001), ("distinct_mean", 1), ("distinct_mean", -1), ("distinct_min", 1),
            ("distinct_min", -1), ("distinct_max", 1), ("distinct_max", -1), ("hottest8", 0.001),
            ("hottest8", -0.001), ("layer0.hottest8", 0.001), ("layer0.hottest8", -0.001)]


@pytest.mark.parametrize("field, step", ONE_UNIT)
def test_the_published_check_fails_when_one_figure_moves_one_unit(qwen_stats, field, step):
    """The comparison above is not loose: any one figure one unit (0.1 % or one expert) off fails it."""
    import dataclasses

    s = qwen_stats
    if field == "layer0.hottest8":
        l0 = dataclasses.replace(s.layers[0], hottest8=s.layers[0].hottest8 + step)
        moved = dataclasses.replace(s, layers=(l0,) + s.layers[1:])
    else:
        moved = dataclasses.replace(s, **{field: getattr(s, field) + step})
    assert _as_published(moved) != PUBLISHED_QWEN


def _write(trace: RoutingTrace, path: Path) -> Path:
    lines = [json.dumps(trace.header.to_json())] + [json.dumps(r.to_json()) for r in trace.records]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_replay_stats_and_trace_stats_print_the_table(tmp_path, capsys):
    path = _write(_hand_trace(), tmp_path / "t.jsonl")
    assert main(["replay", str(path), "--stats"]) == 0
    out = capsys.readouterr().out
    assert "| 1 | 10 | 50.0 % | 100.0 % | 35.0 % | 8 of 8 | 100.0 % |" in out
    assert "| all | 10 | 75.0 % | 100.0 % | 67.5 % | 5 (2–8) | 100.0 % |" in out
    assert "hit_rate" not in out  # no --cache-mb: statistics only
    assert main(["trace-stats", str(path)]) == 0
    assert capsys.readouterr().out == out
    assert main(["replay", str(path), "--stats", "--cache-mb", "1", "--policy", "lru"]) == 0
    both = capsys.readouterr().out
    assert both.startswith(out) and "| lru |" in both


def test_replay_without_sizes_or_stats_is_one_line(tmp_path, capsys):
    path = _write(_hand_trace(), tmp_path / "t.jsonl")
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cache-mb" in err and "--stats" in err
