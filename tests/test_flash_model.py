"""The flash model fitted from a device's probe, the serial time and the overlapped bound, and the hit
rate at another k: each against numbers worked by hand here (never the same function on both sides)."""

from __future__ import annotations

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import get_device
from shardscope.engine.devices.flash_model import FlashModel, ProbeRead, fit_flash_model
from shardscope.engine.devices.projection import RunMeasurement, project_from_bandwidth
from shardscope.engine.devices.replay_at_k import replay_at_k, replay_picks
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord

MIB = 2**20
KIB = 1024


def test_fit_through_two_one_reader_rows_and_two_saturated_sizes_by_hand():
    # one reader: 1 MiB at 1000 MiB/s = 1.000 ms a request; 4 MiB at 2000 MiB/s = 2.000 ms
    #   a = 1.000 - (2.000 - 1.000) / 3 x 1 = 0.6667 ms, b = 3 MiB / 1 ms = 3000 MiB/s
    # saturated (best of the rows with more readers): 1 MiB at 2500 -> 0.4 ms; 4 MiB at 3200 -> 1.25 ms
    #   1/B = (1.25 - 0.4) / 3 ms per MiB -> B = 3529.4 MiB/s, c = 0.4 - 0.8500 / 3 = 0.11667 ms
    reads = [ProbeRead(MIB, 1, 1000), ProbeRead(4 * MIB, 1, 2000), ProbeRead(MIB, 2, 2000), ProbeRead(MIB, 4, 2500),
             ProbeRead(4 * MIB, 2, 3200), ProbeRead(4 * MIB, 8, 3100)]
    f = fit_flash_model(reads, lanes=4)
    assert f.latency_s == pytest.approx(0.6667e-3, rel=1e-3)
    assert f.reader_mb_s == pytest.approx(3000 * 1.048576, rel=1e-6)
    assert f.mb_s == pytest.approx(3529.41 * 1.048576, rel=1e-4)
    assert f.request_s == pytest.approx(0.11667e-3, rel=1e-3)
    assert f.queue_depth == 4
    # steady state of 2 readers of 1 MiB: min(2 x 1 MiB / 1 ms, 1 MiB / 0.4 ms) = 2000 MiB/s
    assert f.rate_mb_s(MIB, 2) == pytest.approx(2000 * 1.048576, rel=1e-4)


def test_the_oneplus_preset_fits_its_probe_rows():
    # profiles/devices/oneplus-15r.toml: one reader 4 MiB in 4/1809.9 s = 2.2101 ms, 576 KiB in
    # 0.5625/967 s = 0.58170 ms -> 1/b = 1.6284 ms / 3.4375 MiB -> b = 2111.0 MiB/s, a = 315.2 us
    f = get_device("oneplus-15r").flash_model
    assert f.latency_s == pytest.approx(315.2e-6, rel=1e-3)
    assert f.reader_mb_s / 1.048576 == pytest.approx(2111.0, rel=1e-3)
    # the device follows each size's best row with more readers (iobench-ceiling.md's read-size sweep):
    # 1 MiB 2251.4 (8 lanes), 2 MiB 2155.4 (4 lanes), 4 MiB 2459.8 (the lane sweep's 2 lanes)
    for kib, best in ((1024, 2251.4), (2048, 2155.4), (4096, 2459.8)):
        assert kib * KIB / f.device_seconds(kib * KIB) / 1e6 / 1.048576 == pytest.approx(best, rel=1e-6)
    # 1.5 MiB: ln 1.5 / ln 2 = 0.58496 of the way from 2251.4 to 2155.4 -> 2195.24 MiB/s, below both ends'
    # line: a layout reading 1-2 MiB slices reads slower than its neighbours on either side
    assert 1.5 * MIB / f.device_seconds(1.5 * MIB) / 1e6 / 1.048576 == pytest.approx(2195.24, rel=1e-5)
    # 576 KiB at 2 in flight: min(2 x 967, 2180) = 1934 MiB/s, the probe's 1785 is 8 % below
    assert f.rate_mb_s(576 * KIB, 2) / 1.048576 == pytest.approx(1934.0, rel=1e-3)


def test_a_batch_is_scheduled_lane_by_lane():
    # a = 1 ms, c = 0.5 ms, b = B = 1e6 B/s (reader_mb_s 0 -> the same): a 1000-byte request waits
    # a - c = 0.5 ms in its lane, then holds the device c + 1 ms = 1.5 ms.
    # two requests on 2 lanes: both ready at 0.5 ms; the first done at 2.0, the second at 3.5 ms
    f = FlashModel(1.0, 1e-3, 2, request_s=0.5e-3)
    assert f.batch_seconds([1000, 1000]) == pytest.approx(3.5e-3)
    # on one lane the second waits for the first's lane: done 2.0, ready 2.5, done 4.0 ms
    assert FlashModel(1.0, 1e-3, 1, request_s=0.5e-3).batch_seconds([1000, 1000]) == pytest.approx(4.0e-3)
    # c = 0 is the emulator's model: latency 1 ms then 1 ms of bytes each, on one shared channel: 3 ms
    assert FlashModel(1.0, 1e-3, 2).batch_seconds([1000, 1000]) == pytest.approx(3.0e-3)


def test_reads_into_fresh_pages_cost_the_lane_its_first_touch():
    # as above (a = 1 ms, c = 0.5 ms, 1000 B at 1e6 B/s) plus 1 us a byte of first touch in the lane:
    # waits 0.5 + 1.0 ms, then 1.5 ms on the device: 3.0 ms; without it 2.0 ms
    assert FlashModel(1.0, 1e-3, 1, request_s=0.5e-3, fresh_page_s_per_byte=1e-6).batch_seconds([1000]) == \
        pytest.approx(3.0e-3)
    # the OnePlus preset: 422.7 us per MiB (fitted by bench/sweeps/phone_check.py), only on the cache's reads
    d = get_device("oneplus-15r")
    assert d.flash_model.fresh_page_s_per_byte == 0
    assert d.cache_flash_model.fresh_page_s_per_byte * MIB == pytest.approx(422.7e-6)


def test_a_probe_without_two_one_reader_sizes_is_one_line():
    with pytest.raises(ShardscopeError, match="one-reader rows"):
        fit_flash_model([ProbeRead(MIB, 1, 1000), ProbeRead(MIB, 2, 1500)], lanes=2, where="x.toml: [flash_probe]")


def test_serial_time_and_overlapped_bound_by_hand():
    # 100 MB at 1000 MB/s = 0.1 s of reads, 0.3 s of compute:
    #   serial = 0.1 + 0.3 = 0.4 s (2.5 tok/s), overlapped = max(0.1, 0.3) = 0.3 s (3.333 tok/s)
    m = RunMeasurement(ssd_bytes_per_token=100e6, resident_bytes_per_token=0, compute_s_per_token=0.3, prefetch=False)
    p = project_from_bandwidth(m, ssd_mb_s=1000)
    assert p.serial_tok_s == pytest.approx(2.5)
    assert p.overlapped_tok_s == pytest.approx(1 / 0.3)
    assert p.tokens_per_s == pytest.approx(2.5) and "waits for its reads" in p.engine_text
    q = project_from_bandwidth(RunMeasurement(100e6, 0, 0.3, prefetch=True), ssd_mb_s=1000)
    assert q.tokens_per_s == pytest.approx(1 / 0.3) and "best case" in q.engine_text


def _trace(k_t: int, picks: list[list[int]]) -> RoutingTrace:
    """One layer, experts of 1 MiB, decoded accesses in the router's order (weights falling)."""
    header = TraceHeader("m", n_expert=8, n_expert_used=k_t, unit_bytes={0: MIB})
    records = tuple(TraceRecord(t, 0, tuple(p), weights=tuple(1.0 - 0.1 * i for i in range(len(p))))
                    for t, p in enumerate(picks))
    return RoutingTrace(header, records)


def test_a_smaller_k_replays_the_routers_top_picks():
    # picks (k_t = 2): [0,1] [0,2] [0,3]; at k = 1 the run picks 0 each time: with a 2 MiB lru cache,
    # miss, hit, hit = 1 miss of 3 -> hit 2/3, missed 1 MiB over 3 tokens = 0.3333 MiB a token
    r = replay_picks(_trace(2, [[0, 1], [0, 2], [0, 3]]), "lru", 2 * MIB, 1)
    assert r.hit == pytest.approx(2 / 3)
    assert r.missed_mib_per_token == pytest.approx(1 / 3)
    assert "top 1 of the trace's 2" in r.note


def test_a_larger_k_keeps_the_traces_miss_rate_and_says_how_far_it_may_be_off():
    # k_t = 2, cache 2 MiB, picks [0,1] [0,2] [0,3]: at k = 2: miss 0,1; hit 0, miss 2; hit 0, miss 3 ->
    #   4 misses of 6 (m = 2/3), 4 MiB over 3 tokens; at k = 1: 1 miss of 3 (m = 1/3)
    # run at k = 3: bytes x 3/2 -> 4/3 x 1.5 = 2 MiB a token; the k=1..2 slope 1/3 a pick, x (3 - 2)
    #   = 1/3 over m = 2/3 -> may be off by 50 % of the misses
    r = replay_at_k(_trace(2, [[0, 1], [0, 2], [0, 3]]), "lru", 2 * MIB, 3)
    assert r.missed_mib_per_token == pytest.approx(2.0)
    assert r.hit == pytest.approx(1 / 3)
    assert r.may_be_off == pytest.approx(0.5)
    assert r.note.startswith("k=3 not in the trace")


def test_the_csv_columns_carry_both_figures():
    from types import SimpleNamespace

    from shardscope.engine.devices.run_projection import fill_device_columns

    # 100 MB at 1000 MB/s = 0.1 s, compute 0.3 s: serial 1 / 0.4 = 2.5, bound 1 / 0.3 = 3.3333 tok/s
    p = project_from_bandwidth(RunMeasurement(100e6, 0, 0.3, prefetch=False), ssd_mb_s=1000)
    summary = SimpleNamespace()
    fill_device_columns(summary, "oneplus-15r", p)
    assert summary.projected_serial_ts == 2.5 and summary.projected_overlapped_ts == 3.3333
    assert summary.projected_ts == 2.5  # the serial engine's own figure


def test_the_error_bar_is_read_from_what_the_check_wrote(tmp_path):
    from shardscope.engine.devices.projection_error import error_bar, error_text, write_errors

    path = write_errors({"serial_tok_s": (-0.124, 0.081)}, runs=17, device="OnePlus 15R", date="2026-12-04",
                        source="tests/data/published-phone-runs.csv", path=tmp_path / "e.json")
    bar = error_bar("serial_tok_s", path)
    assert (bar.low, bar.high, bar.runs) == (-0.124, 0.081, 17)
    assert error_text("serial_tok_s", path).startswith("published runs: \u221212 % to +8 % (17 OnePlus 15R runs")
    assert error_text("flash_s", path) == "no measured error (run bench/sweeps/phone_check.py)"


def test_size_prints_both_figures_with_the_measured_error():
    from pathlib import Path

    from shardscope.engine.devices.sizing_text import format_sizing
    from shardscope.engine.devices.sizing_trace import size_from_trace
    from shardscope.engine.experts.foreign_traces import load_trace

    trace_path = Path(__file__).parent / "data" / "route-traces" / "qwen.route.csv"
    text = format_sizing(size_from_trace(load_trace(trace_path), str(trace_path), "oneplus-15r", budget_mb=5000,
                                         compute_s_per_token=0.147))
    assert "serial" in text and "overlapped bound" in text and "published runs:" in text
    assert "fitted from the preset's flash probe" in text


def test_three_probed_sizes_are_followed_size_by_size_and_a_batch_holds_the_device_so():
    # one reader: 1 MiB at 1000 MiB/s (1 ms), 4 MiB at 2000 (2 ms) -> a = 2/3 ms, b = 3000 MiB/s
    # best with more readers: 1 MiB 2000, 2 MiB 1600, 4 MiB 3200 MiB/s -> R(s) follows them, no line
    reads = [ProbeRead(MIB, 1, 1000), ProbeRead(4 * MIB, 1, 2000), ProbeRead(MIB, 4, 2000),
             ProbeRead(2 * MIB, 4, 1600), ProbeRead(4 * MIB, 4, 3200)]
    f = fit_flash_model(reads, lanes=1)
    assert f.device_seconds(2 * MIB) == pytest.approx(1.25e-3, rel=1e-9)  # 2 MiB at 1600 MiB/s
    # 2 MiB on one lane: t1 = 2/3 + 2/3 = 1.3333 ms, S = 1.25 ms: waits 0.0833 ms, then 1.25 ms on the device
    assert f.batch_seconds([2 * MIB]) == pytest.approx(1.3333e-3, rel=1e-4)
    # beyond the probed sizes the end's rate: 8 MiB at 3200 MiB/s = 2.5 ms; 512 KiB at 2000 = 0.25 ms
    assert f.device_seconds(8 * MIB) == pytest.approx(2.5e-3, rel=1e-9)
    assert f.device_seconds(MIB // 2) == pytest.approx(0.25e-3, rel=1e-9)
    # two sizes only: the line c + s / B, as before
    assert not fit_flash_model(reads[:3] + reads[4:], lanes=1).device_rates
