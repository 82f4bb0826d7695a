"""What the window says beside a projection (issue 48 item 2): the compute factor's basis, and
which term makes the run measured here and the projection differ by more than 1.5x."""

from __future__ import annotations

from conftest import blank_summary
from shardscope.app.devices.round_projection import project_round
from shardscope.engine.devices.devices import get_device
from shardscope.engine.devices.run_projection import compute_basis, differs_note, projection_for


def _kimi_like(**kw):
    # A 12 MiB-a-token MoE round measured at 13.5 tok/s here: it waited 60 ms a token for its reads.
    values = dict(model_filename="kimi.gguf", model_size_mb=400.0, read_mb_per_token=12.0, n_threads=1,
                  prefetch_depth=0, avg_ts=13.5, wait_ms_per_token=60.0, emulated_ssd_mb_s=200.0, ttft_ms=300.0)
    values.update(kw)
    return blank_summary(**values)


def test_an_uncalibrated_device_says_its_compute_is_this_hosts():
    assert compute_basis(get_device("iphone-16-pro")).startswith("assumed = this host × 1.0")


def test_a_projection_far_from_the_measured_run_names_the_reads_and_both_rates():
    s = _kimi_like()
    p = projection_for(s, "iphone-16-pro")
    assert p.tokens_per_s > 1.5 * s.avg_ts
    note = differs_note(s, p, "iphone-16-pro")
    assert "the reads differ" in note and "this host waited 60 ms a token for 12 MiB" in note
    assert "≈210 MB/s" in note and "emulated 200 MB/s" in note  # this host's rate for these requests
    assert f"{get_device('iphone-16-pro').ssd_read_mb_s:g} MB/s SSD" in note  # against the device's
    caption = project_round(s, "iphone-16-pro").caption()
    assert note in caption


def test_a_close_projection_says_nothing_more_and_a_compute_gap_names_the_compute():
    near = _kimi_like(read_mb_per_token=0.5, wait_ms_per_token=1.0, avg_ts=60.0)
    p = projection_for(near, "iphone-16-pro")
    if 1 / 1.5 <= p.tokens_per_s / near.avg_ts <= 1.5:
        assert differs_note(near, p, "iphone-16-pro") == ""
    slow = _kimi_like(read_mb_per_token=0.0, wait_ms_per_token=0.0, avg_ts=5.0, n_threads=8)
    p = projection_for(slow, "iphone-16-pro")  # 8 threads here, 2 performance cores there
    note = differs_note(slow, p, "iphone-16-pro")
    assert "the compute differs" in note and "assumed = this host × 1.0" in note
