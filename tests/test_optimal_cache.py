"""Issue 25, 2: ``optimal`` (Belady's MIN) and lru on the three real traces, each against a simulation
written here from the CSV rows alone (csv module, own cache loop; no engine code).

The rules the simulation shares with the replay, because they define the numbers: the prompt's
union per layer is loaded first (cut to its most-picked experts that fit when larger than the
cache), then each decoded (token, layer) in file order; a layer's current picks are never
evicted; lru touches an access's picks in router order; hits count decoded accesses only.
"""

from __future__ import annotations

import bisect
import csv
from collections import defaultdict
from pathlib import Path

import pytest

from shardscope.engine.base.units import MIB
from shardscope.engine.cli.cli import main
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.optimal_cache import belady_hits
from shardscope.engine.experts.replay import replay_one

TRACES = Path(__file__).parent / "data" / "route-traces"
# one token's picks (layers × k × expert bytes) in MiB, as the issue gives them: 1× and 2×
SIZES_MB = {"qwen": (783, 1566), "gemma": (677, 1354), "gptoss": (908, 1816)}


def _accesses(name: str):
    """[(layer, picks, is_prompt)], {layer: expert bytes} straight from the CSV."""
    sizes, prompt, decode, order = {}, defaultdict(lambda: defaultdict(int)), defaultdict(list), []
    with open(TRACES / f"{name}.route.csv", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("# layer="):
                fields = dict(part.split("=") for part in line[2:].split())
                sizes[int(fields["layer"])] = int(fields["expert_bytes"])
        handle.seek(0)
        for row in csv.DictReader(line for line in handle if not line.startswith("#")):
            layer, expert = int(row["layer"]), int(row["expert"])
            if row["phase"] == "0":
                prompt[layer][expert] += 1
            else:
                key = (int(row["step"]), layer)
                if key not in decode:
                    order.append(key)
                decode[key].append(expert)
    accesses = [(layer, dict(prompt[layer]), True) for layer in sorted(prompt)]
    accesses += [(key[1], decode[key], False) for key in order]
    return accesses, sizes


def _simulate(accesses, sizes, capacity: int, belady: bool) -> float:
    uses = defaultdict(list)  # unit → indices of its accesses (for Belady's look-ahead)
    for i, (layer, picks, _) in enumerate(accesses):
        for e in picks:
            uses[(layer, e)].append(i)
    resident, last, used, hits, total = set(), {}, 0, 0, 0
    for i, (layer, picks, is_prompt) in enumerate(accesses):
        if is_prompt:  # the most-picked of the prompt's union that fit, stable in order of appearance
            keep = set(sorted(picks, key=lambda e: -picks[e])[:capacity // sizes[layer]])
            picks = [e for e in picks if e in keep]
        wanted = [(layer, e) for e in picks]
        if not is_prompt:
            hits += sum(u in resident for u in wanted)
            total += len(wanted)
        need = sum(sizes[layer] for u in wanted if u not in resident)
        while used + need > capacity:
            others = [u for u in resident if u not in wanted]
            if belady:
                def next_use(u):
                    later = bisect.bisect_right(uses[u], i)
                    return uses[u][later] if later < len(uses[u]) else float("inf")
                victim = max(others, key=next_use)
            else:
                victim = min(others, key=lambda u: last[u])
            resident.remove(victim)
            used -= sizes[victim[0]]
        for j, u in enumerate(wanted):  # touched in router order: ties go to the earlier pick
            if u not in resident:
                resident.add(u)
                used += sizes[layer]
            last[u] = (i, j)
    return 100 * hits / total


@pytest.mark.parametrize("name", sorted(SIZES_MB))
def test_lru_and_optimal_match_an_independent_simulation(name):
    trace = load_trace(TRACES / f"{name}.route.csv")
    accesses, sizes = _accesses(name)
    for mb in SIZES_MB[name]:
        capacity = int(mb * MIB)
        lru = 100 * replay_one(trace, "lru", capacity).expert_hit_rate
        optimal = 100 * replay_one(trace, "optimal", capacity).expert_hit_rate
        assert lru == pytest.approx(_simulate(accesses, sizes, capacity, belady=False), abs=0.5), (name, mb)
        assert optimal == pytest.approx(_simulate(accesses, sizes, capacity, belady=True), abs=1.5), (name, mb)


@pytest.mark.parametrize("name", sorted(SIZES_MB))
def test_no_online_policy_beats_the_optimum(name):
    trace = load_trace(TRACES / f"{name}.route.csv")
    for mb in SIZES_MB[name]:
        optimal = replay_one(trace, "optimal", int(mb * MIB)).expert_hit_rate
        for policy in ("auto", "decay", "lru", "lfu", "hot"):
            assert replay_one(trace, policy, int(mb * MIB)).expert_hit_rate <= optimal, (name, mb, policy)


def test_belady_on_a_hand_example():
    """Cache of 2 units, accesses a b c a b: MIN evicts c's competitor farthest ahead."""
    order = [(0, (1,)), (0, (2,)), (0, (3,)), (0, (1,)), (0, (2,))]
    # at c: a is used at 3, b at 4 → evict b; a hits; at b: evict c (never again) → b misses
    assert belady_hits(order, [True] * 5, 2, {0: 1}) == (1, 4, 4)
    # the current picks are never evicted: two picks in a two-unit cache always fit
    assert belady_hits([(0, (1, 2)), (0, (3, 4)), (0, (1, 2))], [True] * 3, 2, {0: 1})[0] == 0


def test_replay_with_no_policy_prints_every_policy_and_the_optimum(capsys):
    assert main(["replay", str(TRACES / "gemma.route.csv"), "--cache-mb", "677,1354"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("| google")]
    assert [line.split("|")[2].strip() for line in lines] == [p for p in ("auto", "decay", "lru", "lfu", "hot",
                                                                          "optimal")
                                                             for _ in range(2)]
    # under the table, per size: the best online policy, the trace replayed and the margin (or a tie)
    rates = {(line.split("|")[2].strip(), line.split("|")[3].strip()): float(line.split("|")[4].split("%")[0])
             for line in lines}
    verdicts = [line for line in out.splitlines() if line.startswith("best at ")]
    assert len(verdicts) == 2
    for mb, line in zip(("677", "1354"), verdicts):
        online = sorted(((rates[(p, mb)], p) for p in ("auto", "decay", "lru", "lfu", "hot")), reverse=True)
        (first, p1), (second, _) = online[0], online[1]
        assert line.startswith(f"best at {mb} MiB replaying gemma.route.csv: ")
        assert (f"{p1} {first:.1f} %" in line) or first == second
        if abs(first - second - 1.0) > 0.1:  # printed figures are rounded: no verdict within 0.1 of the line
            assert ("they tie" in line) == (first - second < 1.0), line


def test_the_plot_draws_the_optimum_as_the_limit_with_the_gap(qtbot):
    from PySide6.QtWidgets import QApplication

    from shardscope.widgets.cacheability_plot import CacheabilityPlot

    plot = CacheabilityPlot()
    qtbot.addWidget(plot)
    plot.resize(600, 400)
    plot.show()
    plot.set_curves({"decay": [(100, 0.30), (200, 0.50)], "lru": [(100, 0.20), (200, 0.45)],
                     "optimal": [(100, 0.55), (200, 0.75)]})
    plot.set_policy("decay")
    plot.set_current(190)  # the gap is written at the current size, read off both curves (issue 48)
    QApplication.processEvents()
    at, points = plot.gap()
    assert at == 190 and points == pytest.approx(25.0)
    assert plot.gap_note() == "decay 25.0 points below the optimum at 190 MiB"  # the title: over no curve
    names = [label.text for _, label in plot.legend.items]
    assert "optimal (limit)" in names
    plot.set_policy("lru")
    assert plot.gap() == (190, pytest.approx(30.5))  # lru 0.20→0.45, optimum 0.55→0.75: 0.425, 0.73 at 190
    plot.set_curves({"lru": [(100, 0.2)]})  # no optimum: nothing to shade, no text
    assert plot.gap() is None and plot.gap_note() == ""
