"""The pure rules a search decides by (issue 48 item 1) and a round's stalls (item 2): milliseconds."""

from __future__ import annotations

import math

from conftest import blank_summary
from shardscope.engine.devices.run_projection import measurement_from_summary, round_stall
from shardscope.engine.measure import host_steal, token_stalls
from shardscope.engine.search.interval_decision import choose, cost_key, enough_rounds, interval, no_effect


def test_an_interval_is_the_mean_and_a_t_spread_never_narrower_than_the_floor():
    iv = interval([10.0, 12.0, 11.0])
    assert iv.mean == 11.0 and iv.n == 3 and iv.measured
    assert math.isclose(iv.half, 4.303 * 1.0 / math.sqrt(3), rel_tol=1e-3)
    same = interval([50.0, 50.0, 50.0])
    assert math.isclose(same.half, 1.5)  # the 3 % floor: rounds of one run agree closer than runs do
    one = interval([80.0])
    assert not one.measured and math.isclose(one.half, 2.4)  # one figure: the 3 % stand-in, said as such
    assert "spread not measured" in one.text()
    assert interval([math.nan]) is None and interval([]) is None


def test_a_candidate_stops_measuring_when_separated_or_narrow_and_never_past_the_maximum():
    best = interval([100.0, 101.0, 99.0])
    assert not enough_rounds([60.0, 70.0], best)  # fewer than the minimum
    assert enough_rounds([60.0, 75.0, 50.0], best)  # wide, but far below the best: separated
    assert not enough_rounds([150.0, 180.0, 120.0], best)  # separated above: it may lead, so it is measured on
    assert not enough_rounds([80.0, 120.0, 100.0], best)  # overlaps the best and still wide
    assert enough_rounds([100.0, 100.5, 99.5], None)  # narrow enough on its own
    assert enough_rounds([80.0, 120.0, 100.0] * 3, best, max_n=8)


def test_overlapping_intervals_tie_and_the_kept_then_default_then_cheapest_value_wins():
    ivs = {"auto": interval([75, 80, 85]), "lfu": interval([84, 88, 92]), "lru": interval([60, 61, 62])}
    c = choose(ivs, keep="auto", default="auto")
    assert c.top == "lfu" and set(c.ties) == {"lfu", "auto"} and c.pick == "auto" and c.why.startswith("tie")
    assert c.runner_up == "lru" and c.margin > 0.2 and c.gap > 0
    c = choose(ivs, keep="hot", default="auto")
    assert c.pick == "auto" and c.why == "tie: the default"
    c = choose({1: interval([20, 20.5, 19.5]), 2: interval([20.2, 20.4, 20.0])}, cost={1: cost_key(1), 2: cost_key(2)})
    assert c.pick == 1 and c.why == "tie: the cheapest"  # fewer threads when they do not differ
    clear = choose({"a": interval([100, 101, 99]), "b": interval([50, 51, 49])}, keep="b")
    assert clear.pick == "a" and clear.why == "clear" and clear.ties == ("a",)
    all_tied = choose({"a": interval([10, 11, 12]), "b": interval([10.5, 11, 11.5])})
    assert math.isnan(all_tied.margin) and all_tied.runner_up is None
    assert cost_key(False) < cost_key(True) and cost_key("auto", ("auto", "lru")) < cost_key("lru", ("auto", "lru"))


def test_a_read_side_knob_has_no_effect_when_compute_alone_sets_the_figure():
    # Overlapped and compute-bound: the ssd terms differ, the figure at one compute does not.
    bound = {"auto": [(0.004, 0.001, 0.012, True)] * 3, "lfu": [(0.006, 0.001, 0.0105, True)] * 3}
    assert no_effect(bound)
    # The same ssd terms combined serially (reads wait for compute) do move the figure.
    serial = {k: [(s, d, c, False) for s, d, c, _o in v] for k, v in bound.items()}
    assert not no_effect(serial)
    # ssd-bound: the knob's reads are the figure.
    assert not no_effect({"a": [(0.02, 0, 0.01, True)], "b": [(0.03, 0, 0.01, True)]})
    assert not no_effect({"a": [(0.02, 0, 0.01, True)]})  # one candidate: nothing to compare


def test_a_stalled_token_is_flagged_and_moves_neither_the_compute_nor_the_projection_input():
    clean = (0.02, 0.021, 0.019, 0.02, 0.022)
    waits = (0.005,) * 5
    stalled = (0.02, 0.021, 5.019, 0.02, 0.022)  # a 5-s SIGSTOP inside the third decoded token
    assert token_stalls.stalled_tokens(clean) == [] and token_stalls.stalled_tokens(stalled) == [2]
    assert math.isclose(token_stalls.robust_compute_s(stalled, waits), token_stalls.robust_compute_s(clean, waits),
                        rel_tol=0.05)
    # Others holding the CPU: wall times double, the decode thread's CPU time does not.
    contended = tuple(2 * x for x in clean)
    cpu = tuple(x - 0.005 for x in clean)
    assert math.isclose(token_stalls.robust_compute_s(contended, waits, cpu),
                        token_stalls.robust_compute_s(clean, waits),
                        rel_tol=0.05)
    assert "paused 5.0 s between tokens" in token_stalls.stall_text(clean, between_s=5.0)
    assert token_stalls.stall_text(clean, between_s=0.01) == ""
    assert token_stalls.stall_text(clean) == ""
    assert "host stalled 5.0 s (token 4)" in token_stalls.stall_text(stalled)
    assert "steal 30 %" in token_stalls.stall_text(clean, steal_share=0.3)
    assert "prompt pass stalled" in token_stalls.stall_text(clean, ttft_s=3.0, usual_ttft_s=0.2)

    def summary(times):
        s = blank_summary(model_filename="m.gguf", avg_ts=len(times) / sum(times), model_size_mb=100.0,
                          read_mb_per_token=1.0, n_threads=2, prefetch_depth=1, wait_ms_per_token=5.0, ttft_ms=200.0)
        s.token_s, s.token_wait_s = times, waits
        return s

    a, b = measurement_from_summary(summary(clean)), measurement_from_summary(summary(stalled))
    assert math.isclose(a.compute_s_per_token, b.compute_s_per_token, rel_tol=0.05)
    assert round_stall(summary(clean)) == "" and "host stalled" in round_stall(summary(stalled))
    # Without per-token times (a CSV row) the old mean rule stands, stall and all.
    csv_row = summary(stalled)
    del csv_row.token_s
    assert measurement_from_summary(csv_row).compute_s_per_token > 0.5


def test_host_steal_share_reads_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 0 0 0 50 0 0\n")
    before = host_steal.reading(str(stat))
    stat.write_text("cpu  200 0 100 900 0 0 0 150 0 0\n")
    assert math.isclose(host_steal.share(before, host_steal.reading(str(stat))), 100 / 350)
    assert math.isnan(host_steal.reading(str(tmp_path / "none"))[0])


def test_the_compute_window_takes_a_fast_tenth_of_the_recent_tokens_and_forgets_on_change():
    from shardscope.engine.measure.compute_window import ComputeWindow

    w = ComputeWindow(size=40)
    assert w.estimate() is None
    calm = [0.010] * 16
    w.add(calm, [0.002] * 16)
    assert math.isclose(w.estimate(), 0.008)
    busy = [0.020] * 16  # a round that others' runs slowed twofold
    w.add(busy, [0.002] * 16)
    assert math.isclose(w.estimate(), 0.008)  # the settings' own cost, not the host's slowdown
    w.add([0.010, 0.011, 5.0, 0.010], [0.002] * 4)  # a stalled token never enters
    assert max(w._tokens) < 1
    w.clear()
    assert w.estimate() is None


def test_the_sweep_ranking_names_a_tie_and_keeps_the_default():
    from conftest import blank_summary
    from shardscope.engine.search.search_noise import ranking_line

    def runs(*rates):
        return [blank_summary(avg_ts=r, projected_ts=r) for r in rates]

    groups = {"auto": runs(75, 80, 85, 78), "lfu": runs(84, 88, 92, 86), "lru": runs(50, 51, 49, 50)}
    line = ranking_line(groups, str, "fastest here", default="auto")
    assert line.startswith("fastest here: no clear winner: 2 settings' intervals overlap")
    assert "keep auto (the default)" in line and "lfu 87.5 [" in line  # each candidate's interval shown
    clear = ranking_line({"a": runs(100, 101, 99), "b": runs(50, 51, 49)}, str, "fastest here")
    assert clear.startswith("fastest here: 100 [") and "by 100 %" in clear
