"""Issue 25, 3 and issue 34: the online policies for real routers, on the three real traces as fetched.

Issue 34: ``auto`` (the default) is never more than half a point below lru or decay at one and two
tokens' picks, and closes at least a quarter of the lru → optimum gap on average over those six
points (decay alone: 24.96 %). Issue 25:

What is asserted is measured here: decay beats every other online policy at one and two tokens'
picks on each trace, and it gets within reach of a frequency oracle that pins the whole trace's
most-picked experts (computed here from the CSV rows: what any policy ranking experts by how often
they are picked could hit at best). The issue's goal, half of the way from lru to the optimum, is
not met on these traces; that test is an expected failure with the measured numbers, so meeting it
turns it into an unexpected pass.
"""

from __future__ import annotations

import csv
import functools
from collections import Counter
from pathlib import Path

import pytest

from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_cache import ExpertCache
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.replay import replay_one
from shardscope.engine.knobs.knobs import KNOBS

TRACES = Path(__file__).parent / "data" / "route-traces"
SIZES_MB = {"qwen": (783, 1566), "gemma": (677, 1354), "gptoss": (908, 1816)}


@functools.lru_cache(maxsize=None)  # both tests read the same replays (a minute each on a busy machine)
def _hit_rates(name: str, mb: float) -> dict[str, float]:
    trace = load_trace(TRACES / f"{name}.route.csv")
    return {p: 100 * replay_one(trace, p, int(mb * MIB)).expert_hit_rate
            for p in ("auto", "decay", "lru", "lfu", "hot", "optimal")}


def _pinning_oracle(name: str, mb: float) -> float:
    """Decoded picks covered by the whole trace's most-picked experts that fit beside one layer's picks."""
    with open(TRACES / f"{name}.route.csv", encoding="utf-8") as handle:
        lines = handle.readlines()
    size = {}
    for line in lines:
        if line.startswith("# layer="):
            fields = dict(part.split("=") for part in line[2:].split())
            size[int(fields["layer"])] = int(fields["expert_bytes"])
    rows = [r for r in csv.DictReader(line for line in lines if not line.startswith("#")) if r["phase"] == "1"]
    picks = Counter((int(r["layer"]), int(r["expert"])) for r in rows)
    k = max(Counter((r["step"], r["layer"]) for r in rows).values())
    room, covered = mb * MIB - k * max(size.values()), 0
    for unit, count in picks.most_common():
        if size[unit[0]] <= room:
            room -= size[unit[0]]
            covered += count
    return 100 * covered / len(rows)


@pytest.mark.parametrize("name", sorted(SIZES_MB))
def test_decay_beats_every_other_online_policy_at_one_and_two_tokens(name):
    for mb in SIZES_MB[name]:
        rates = _hit_rates(name, mb)
        for other in ("lru", "lfu", "hot"):
            assert rates["decay"] > rates[other], (name, mb, rates)
        # near what pinning by the whole trace's counts (an oracle of frequency) covers
        assert rates["decay"] >= _pinning_oracle(name, mb) - 5.0, (name, mb, rates)


@pytest.mark.xfail(strict=True, reason="not met: auto gets 14-37 % of the way from lru to the optimum, decay 14-31 %, "
                                       "the best other candidate searched (bench/studies/policy_search.py) 17-33 % "
                                       "(docs/decisions.md, 'Issue 25: the online policy search'; docs/real-traces.md)")
@pytest.mark.parametrize("name", sorted(SIZES_MB))
def test_best_online_policy_is_halfway_from_lru_to_the_optimum(name):
    for mb in SIZES_MB[name]:
        rates = _hit_rates(name, mb)
        best = max(rates[p] for p in ("auto", "decay", "lru", "lfu", "hot"))
        assert best >= rates["lru"] + (rates["optimal"] - rates["lru"]) / 2, (name, mb, rates)


@pytest.mark.parametrize("name", sorted(SIZES_MB))
def test_auto_is_never_half_a_point_below_lru_or_decay(name):
    for mb in SIZES_MB[name]:
        rates = _hit_rates(name, mb)
        assert rates["auto"] >= rates["lru"] - 0.5, (name, mb, rates)
        assert rates["auto"] >= rates["decay"] - 0.5, (name, mb, rates)


def test_auto_closes_a_quarter_of_the_gap_to_the_optimum_on_average():
    shares = [(r["auto"] - r["lru"]) / (r["optimal"] - r["lru"])
              for r in (_hit_rates(name, mb) for name in SIZES_MB for mb in SIZES_MB[name])]
    assert sum(shares) / len(shares) >= 0.25, shares


def test_auto_is_the_default_expert_policy():
    assert KNOBS["expert_policy"].default == "auto"


def test_the_static_advice_figures_are_the_replayed_ones():
    import re

    from shardscope.engine.experts.policy_advice import QWEN_AT_ONE_TOKEN
    from tests.test_trace_sizing import lru_hit_rate

    # lru's figure from an LRU simulated in the tests, apart from the engine's replay
    trace = load_trace(TRACES / "qwen.route.csv")
    auto_pct, lru_pct, margin = (float(x) for x in re.search(
        r"auto ([\d.]+) % vs lru ([\d.]+) %.*auto by ([\d.]+) points", QWEN_AT_ONE_TOKEN).groups())
    assert lru_pct == pytest.approx(100 * lru_hit_rate(trace, int(783 * MIB)), abs=0.05)
    # auto's is the replay's (no second auto exists to ask): the text is what a replay prints today
    assert auto_pct == pytest.approx(100 * replay_one(trace, "auto", int(783 * MIB)).expert_hit_rate, abs=0.05)
    assert margin == pytest.approx(auto_pct - lru_pct, abs=0.1 + 1e-9)  # each printed to 0.1


def test_decay_evicts_the_longest_expected_wait_first():
    """Two layers run 0, 1, 0, 1, …: a unit picked every token outlasts one picked once."""
    cache = ExpertCache("decay", 3, {0: 1, 1: 1})
    cache.access(0, [5])
    cache.access(1, [7])
    cache.access(0, [5])  # 5 is picked every token, 7 once
    cache.access(1, [8])  # room for 8: 7 (layer 1, picked once) or 5 (layer 0, picked twice)?
    assert (0, 5) in cache and (1, 7) in cache and (1, 8) in cache
    got = cache.access(0, [6])
    assert got.evicted == [(1, 7)]  # not 5 (picked twice), not 8 (just picked)


def test_hot_without_a_prompt_is_labelled_an_oracle(tmp_path):
    path = tmp_path / "decode-only.csv"
    path.write_text("token,layer,expert\n# expert_bytes=10\n" +
                    "".join(f"{t},0,{e}\n" for t in range(4) for e in (t % 3, 3)))
    trace = load_trace(path)
    assert replay_one(trace, "hot", 40).policy == "hot (oracle)"
    with_prompt = tmp_path / "with-prompt.csv"
    with_prompt.write_text("token,layer,expert,prompt\n# expert_bytes=10\n0,0,1,1\n0,0,3,1\n" +
                           "".join(f"{t},0,{e},0\n" for t in range(1, 4) for e in (t % 3, 3)))
    assert replay_one(load_trace(with_prompt), "hot", 40).policy == "hot"
