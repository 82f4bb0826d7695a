"""The roofline in engine/devices/projection.py, checked against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import Device, get_device
from shardscope.engine.devices.projection import (
    RunMeasurement,
    compute_factor_for,
    project,
    project_from_bandwidth,
)


def _device(**changes) -> Device:
    base = dict(
        id="test-device",
        name="Test device",
        app_memory_limit_mb=4096,
        ssd_read_mb_s=860,
        dram_mb_s=60_000,
        performance_cores=2,
        efficiency_cores=4,
        gpu="none",
    )
    base.update(changes)
    return Device(**base)


def test_860_mb_per_token_at_860_mb_s_is_one_second_ssd_bound():
    # 860e6 bytes / (860 x 10^6 bytes/s) = 1.0 s; compute 0.1 s hides under it.
    m = RunMeasurement(ssd_bytes_per_token=860e6, resident_bytes_per_token=0,
                       compute_s_per_token=0.1, host_threads=1, prefetch=True)
    p = project_from_bandwidth(m, ssd_mb_s=860)
    assert p.s_per_token == pytest.approx(1.0)
    assert p.tokens_per_s == pytest.approx(1.0)
    assert p.bound == "ssd"
    assert p.terms == pytest.approx({"ssd": 1.0, "dram": 0.0, "compute": 0.1})


def test_prefetch_overlaps_terms_and_no_prefetch_adds_the_read():
    # ssd 430e6 / 860e6 = 0.5 s; dram 6e9 / 60e9 = 0.1 s; compute 0.2 s.
    terms = dict(ssd_bytes_per_token=430e6, resident_bytes_per_token=6e9, compute_s_per_token=0.2)
    with_prefetch = project_from_bandwidth(RunMeasurement(**terms, prefetch=True), ssd_mb_s=860, dram_mb_s=60_000)
    without = project_from_bandwidth(RunMeasurement(**terms, prefetch=False), ssd_mb_s=860, dram_mb_s=60_000)
    assert with_prefetch.terms == pytest.approx({"ssd": 0.5, "dram": 0.1, "compute": 0.2})
    assert with_prefetch.s_per_token == pytest.approx(0.5)  # max(0.5, 0.1, 0.2)
    assert with_prefetch.overlapped
    # Without prefetch: the read, then max(dram, compute) = 0.5 + 0.2.
    assert without.s_per_token == pytest.approx(0.7)
    assert not without.overlapped
    assert without.bound == "ssd"


def test_zero_bytes_is_compute_bound():
    m = RunMeasurement(0, 0, compute_s_per_token=0.25)
    p = project_from_bandwidth(m, ssd_mb_s=860, dram_mb_s=60_000)
    assert p.bound == "compute"
    assert p.s_per_token == pytest.approx(0.25)
    assert p.tokens_per_s == pytest.approx(4.0)


def test_dram_bound_when_resident_bytes_dominate():
    # 12e9 bytes / 60e9 bytes/s = 0.2 s > compute 0.1 s > ssd 86e6/860e6 = 0.1 s.
    m = RunMeasurement(86e6, 12e9, 0.1)
    p = project_from_bandwidth(m, ssd_mb_s=860, dram_mb_s=60_000)
    assert p.bound == "dram"
    assert p.s_per_token == pytest.approx(0.2)


def test_no_dram_bandwidth_leaves_the_term_out():
    # Same-host projection (validation run with --ssd-mb-s): compute already holds memory time.
    p = project_from_bandwidth(RunMeasurement(100e6, 50e9, 0.05), ssd_mb_s=200)
    assert p.terms["dram"] == 0.0
    assert p.s_per_token == pytest.approx(0.5)  # 100e6 / 200e6


def test_ties_name_the_ssd():
    p = project_from_bandwidth(RunMeasurement(860e6, 0, 1.0), ssd_mb_s=860)
    assert p.bound == "ssd"


def test_compute_scales_with_usable_performance_cores():
    # Host used 8 threads; the device has 2 performance cores: 8 / 2 = 4x the time.
    device = _device(performance_cores=2)
    m = RunMeasurement(0, 0, compute_s_per_token=0.05, host_threads=8)
    assert compute_factor_for(m, device) == pytest.approx(4.0)
    p = project(m, device)
    assert p.terms["compute"] == pytest.approx(0.2)
    assert p.bound == "compute"
    # One host thread fits on one device core: unchanged.
    assert project(RunMeasurement(0, 0, 0.05, host_threads=1), device).s_per_token == pytest.approx(0.05)
    # compute_scale 2 (device cores twice as fast) halves it: 0.05 x 4 / 2 = 0.1.
    assert project(m, _device(compute_scale=2.0)).s_per_token == pytest.approx(0.1)


def test_project_uses_device_bandwidths_and_override():
    device = _device()
    m = RunMeasurement(860e6, 6e9, 0.01, host_threads=2)
    p = project(m, device)
    assert p.terms["ssd"] == pytest.approx(1.0)
    assert p.terms["dram"] == pytest.approx(0.1)
    faster = project(m, device, ssd_mb_s_override=1720)
    assert faster.terms["ssd"] == pytest.approx(0.5)


def test_project_onto_builtin_iphone():
    iphone = get_device("iphone-16-pro")
    p = project(RunMeasurement(860e6, 0, 0.01, host_threads=2), iphone)
    assert p.s_per_token == pytest.approx(1.0)
    assert p.bound == "ssd"
    assert "ssd-bound" in p.describe()


@pytest.mark.parametrize(
    "fields, key",
    [
        (dict(ssd_bytes_per_token=-1, resident_bytes_per_token=0, compute_s_per_token=0.1), "ssd_bytes_per_token"),
        (dict(ssd_bytes_per_token=0, resident_bytes_per_token=-5, compute_s_per_token=0.1), "resident_bytes_per_token"),
        (dict(ssd_bytes_per_token=0, resident_bytes_per_token=0, compute_s_per_token=-0.1), "compute_s_per_token"),
        (dict(ssd_bytes_per_token=math.nan, resident_bytes_per_token=0, compute_s_per_token=0.1),
         "ssd_bytes_per_token"),
        (dict(ssd_bytes_per_token="1", resident_bytes_per_token=0, compute_s_per_token=0.1), "ssd_bytes_per_token"),
        (dict(ssd_bytes_per_token=1, resident_bytes_per_token=0, compute_s_per_token=0.1, host_threads=0),
         "host_threads"),
        (dict(ssd_bytes_per_token=1, resident_bytes_per_token=0, compute_s_per_token=0.1, prefetch=2), "prefetch"),
    ],
)
def test_invalid_measurements_are_refused_naming_the_field(fields, key):
    with pytest.raises(ShardscopeError, match=key):
        project_from_bandwidth(RunMeasurement(**fields), ssd_mb_s=860)


@pytest.mark.parametrize("bad", [0, -860, math.inf, True, "860"])
def test_invalid_bandwidth_is_refused(bad):
    with pytest.raises(ShardscopeError, match="ssd_mb_s"):
        project_from_bandwidth(RunMeasurement(1e6, 0, 0.1), ssd_mb_s=bad)
    with pytest.raises(ShardscopeError, match="dram_mb_s"):
        project_from_bandwidth(RunMeasurement(1e6, 0, 0.1), ssd_mb_s=860, dram_mb_s=bad)


def test_nothing_to_project_is_refused():
    with pytest.raises(ShardscopeError, match="nothing to project"):
        project_from_bandwidth(RunMeasurement(0, 0, 0), ssd_mb_s=860)


def test_projection_names_latency_when_small_reads_bound_the_ssd():
    """Same bytes, same device bandwidth: many small waited-for reads are latency-bound."""
    from shardscope.engine.stream.ssd_rate_limiter import SsdModel

    big = RunMeasurement(100e6, 0, 0.001, prefetch=False, ssd_requests_per_token=200, ssd_batches_per_token=1)
    small = RunMeasurement(100e6, 0, 0.001, prefetch=False, ssd_requests_per_token=1000, ssd_batches_per_token=1000)
    kw = dict(ssd_mb_s=1000, ssd_latency_s=200e-6, ssd_queue_depth=32)
    p_big, p_small = project_from_bandwidth(big, **kw), project_from_bandwidth(small, **kw)
    assert (p_big.limit, p_small.limit) == ("bandwidth", "latency")
    assert "ssd-bound (latency)" in p_small.describe() and "latency" in p_small.describe()
    # the ssd term is the emulator's model: 1000 batches of one 10^5 B request = 1000 x (200 µs + 100 µs)
    assert p_small.terms["ssd"] == pytest.approx(1000 * SsdModel(1000, 200e-6, 32).batch_seconds([100_000]))
    assert p_small.terms["ssd"] == pytest.approx(0.3)
    assert p_big.terms["ssd"] == pytest.approx(0.1 + 200e-6)  # one latency, then back-to-back transfers
    compute = project_from_bandwidth(RunMeasurement(1e3, 0, 1.0, ssd_requests_per_token=1,
                                                    ssd_batches_per_token=1), **kw)
    assert compute.limit == "compute"
