"""Device presets and the what-if sizing, checked against arithmetic done by hand."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import (
    DEVICES_DIR,
    MIB,
    builtin_devices,
    get_device,
    load_device,
    weight_budget_mb,
)
from shardscope.engine.devices.sizing import SizingInput
from shardscope.engine.devices.sizing_gguf import size_from_gguf_header
from shardscope.engine.devices.sizing_numbers import size_from_numbers
from shardscope.engine.devices.sizing_text import format_sizing

IPHONE_TOML = DEVICES_DIR / "iphone-16-pro.toml"


# ------------------------------------------------------------------- devices
def test_builtin_devices_load_with_the_notes_numbers():
    devices = builtin_devices()
    assert {"iphone-16-pro", "iphone-16-pro-internal", "laptop-16gb"} <= set(devices)
    iphone = devices["iphone-16-pro"]
    # shared/notes/device-presets.md: ~3 GB limit (6 GB with the entitlement), 8 GB RAM,
    # 2 P + 4 E cores, ~60 GB/s DRAM (derived), ~0.86 GB/s USB-C NVMe SSD.
    assert iphone.app_memory_limit_mb == 3072
    assert iphone.app_memory_limit_extended_mb == 6144
    assert "increased-memory-limit" in iphone.extended_limit_requires
    assert iphone.ram_mb == 8192
    assert iphone.ssd_read_mb_s == 860
    assert iphone.dram_mb_s == 60_000
    assert (iphone.performance_cores, iphone.efficiency_cores) == (2, 4)
    assert "Metal" in iphone.gpu
    assert {"ssd_read_mb_s", "dram_mb_s", "app_memory_limit_mb"} <= iphone.unverified
    assert iphone.is_verified("cpu") and iphone.is_verified("ram_mb")
    assert "notebookcheck" in iphone.sources["ssd_read_mb_s"]
    internal = devices["iphone-16-pro-internal"]
    assert internal.ssd_read_mb_s == 1600 and not internal.is_verified("ssd_read_mb_s")
    laptop = devices["laptop-16gb"]
    assert laptop.ssd_read_mb_s == 3000
    assert {"ssd_read_mb_s", "dram_mb_s", "cpu"} <= laptop.unverified


def test_get_device_unknown_lists_known_ids():
    with pytest.raises(ShardscopeError) as info:
        get_device("pixel-9")
    message = str(info.value)
    assert "pixel-9" in message and "iphone-16-pro" in message and "laptop-16gb" in message


def test_extended_limit_copy():
    iphone = get_device("iphone-16-pro").with_extended_limit()
    assert iphone.app_memory_limit_mb == 6144
    assert "increased memory limit" in iphone.name


def test_weight_budget_is_limit_minus_the_rest():
    iphone = get_device("iphone-16-pro")
    assert weight_budget_mb(iphone, 256, 256, 512) == 2048  # 3072 - 1024
    with pytest.raises(ShardscopeError, match=r"no memory left for weights.*= -128 MB"):
        weight_budget_mb(iphone, 1200, 1000, 1000)
    with pytest.raises(ShardscopeError, match="kv_cache_mb"):
        weight_budget_mb(iphone, -1, 0, 0)


def _write_variant(tmp_path: Path, edit) -> Path:
    text = IPHONE_TOML.read_text(encoding="utf-8")
    path = tmp_path / "device.toml"
    path.write_text(edit(text), encoding="utf-8")
    return path


def _drop_table(name: str):
    return lambda text: re.sub(rf"\[{name}\]\n(?:(?!\[).*\n)*", "", text)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (_drop_table("ssd_read_mb_s"), "missing key 'ssd_read_mb_s'"),
        (lambda t: t.replace("value = 860\n", 'value = "fast"\n'), "'ssd_read_mb_s.value' must be a number"),
        (lambda t: t.replace("value = 860\n", "value = -860\n"), "'ssd_read_mb_s.value' must be a positive number"),
        (lambda t: t.replace("value = 60000\n", "value = 0\n"), "'dram_mb_s.value' must be a positive number"),
        (lambda t: t.replace("performance_cores = 2", "performance_cores = 2.5"),
         "'cpu.performance_cores' must be a whole number"),
        (lambda t: t.replace("performance_cores = 2", "performance_cores = 0"),
         "'cpu.performance_cores' must be at least 1"),
        (lambda t: t.replace('id = "iphone-16-pro"\n', ""), "missing key 'id'"),
        (lambda t: t.replace("verified = true", 'verified = "yes"', 1), "'ram_mb.verified' must be true or false"),
        (lambda t: "ssd_speed = 5\n" + t, "unknown key 'ssd_speed'"),
        (lambda t: t.replace("value = 3072\n", "value = 3072\nconfidence = 3\n"),
         "unknown key 'app_memory_limit_mb.confidence'"),
        (lambda t: t + "\n[this is not toml\n", "not valid TOML"),
    ],
)
def test_bad_device_toml_names_file_and_key(tmp_path, edit, expected):
    path = _write_variant(tmp_path, edit)
    with pytest.raises(ShardscopeError) as info:
        load_device(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message
    assert "\n" not in message


def test_missing_device_file(tmp_path):
    with pytest.raises(ShardscopeError, match="no such device file"):
        load_device(tmp_path / "nope.toml")


def test_duplicate_ids_in_a_folder_are_refused(tmp_path):
    shutil.copy(IPHONE_TOML, tmp_path / "a.toml")
    shutil.copy(IPHONE_TOML, tmp_path / "b.toml")
    with pytest.raises(ShardscopeError, match="already used"):
        builtin_devices(tmp_path)


# ---------------------------------------------------------- sizing: numbers
DENSE = SizingInput(total_params=8e9, active_params=None, bits_per_weight=4, n_layers=32, globals_bytes=0.5e9)
# The iPhone preset's 150 µs request latency, paid once per layer that reads (its 32-deep queue
# hides every later 512 KiB request behind the transfers): 32 layers.
IPHONE_LATENCY_PER_TOKEN = 32 * 150e-6


def test_dense_pinned_arithmetic():
    r = size_from_numbers(DENSE, "iphone-16-pro", budget_mb=2048, policy="pinned", prefetch=True)
    # W = 8e9 x 4 / 8 = 4e9 bytes; layers = (4e9 - 0.5e9) / 32 = 109.375e6 bytes each.
    assert r.weight_bytes == pytest.approx(4e9)
    assert r.bytes_per_layer == pytest.approx(109.375e6)
    assert r.active_bytes_per_token == pytest.approx(4e9)
    # minimum = globals + 2 layers = 0.5e9 + 2 x 109.375e6 = 718.75e6 bytes.
    assert r.min_budget_bytes == pytest.approx(718.75e6)
    # budget 2048 MiB = 2,147,483,648 bytes; cache = 2,147,483,648 - 718,750,000 = 1,428,733,648.
    assert r.budget_bytes == 2_147_483_648
    assert r.resident_bytes == pytest.approx(0.5e9 + 1_428_733_648)
    assert r.staging_bytes == pytest.approx(218.75e6)
    # streamed = 3.5e9 layer bytes - 1,428,733,648 pinned = 2,071,266,352 bytes per token.
    assert r.streamed_bytes_per_token == pytest.approx(2_071_266_352)
    assert r.hit_rate == pytest.approx(1_428_733_648 / 3.5e9)
    # ssd 2,071,266,352 / 860e6 = 2.4085 s of bandwidth, plus the device's 150 µs request latency
    # once per layer (32 batches of 512 KiB requests: 32 in flight hide every later one behind
    # the 0.61 ms transfers) = 4.8 ms; dram (4e9 - 2.0713e9) / 60e9 = 0.0321 s.
    assert r.projection.terms["ssd"] == pytest.approx(2.408449247 + 32 * 150e-6, rel=1e-9)
    assert r.projection.ssd_latency_s == pytest.approx(32 * 150e-6, rel=1e-6)
    assert r.projection.terms["dram"] == pytest.approx(0.032145561, rel=1e-6)
    assert r.s_per_token == pytest.approx(2.408449247 + 32 * 150e-6, rel=1e-9)
    assert r.bound == "ssd" and r.projection.limit == "bandwidth"
    assert not r.fits_in_memory and not r.is_moe


def test_dense_lru_reads_every_layer_byte():
    r = size_from_numbers(DENSE, "iphone-16-pro", budget_mb=2048, policy="lru")
    # Cyclic scan larger than the cache: all 3.5e9 layer bytes each token; 3.5e9 / 860e6.
    assert r.streamed_bytes_per_token == pytest.approx(3.5e9)
    assert r.s_per_token == pytest.approx(4.069767442 + IPHONE_LATENCY_PER_TOKEN)
    assert r.hit_rate == pytest.approx(0.0)


def test_no_prefetch_needs_one_layer_and_adds_times():
    r = size_from_numbers(DENSE, "iphone-16-pro", budget_mb=2048, prefetch=False)
    assert r.min_budget_bytes == pytest.approx(0.5e9 + 109.375e6)
    # cache = 2,147,483,648 - 609,375,000 = 1,538,108,648; streamed = 3.5e9 - that = 1,961,891,352.
    assert r.streamed_bytes_per_token == pytest.approx(1_961_891_352)
    ssd = 1_961_891_352 / 860e6
    dram = (4e9 - 1_961_891_352) / 60e9
    assert r.s_per_token == pytest.approx(ssd + IPHONE_LATENCY_PER_TOKEN + dram)


def test_model_that_fits_streams_nothing():
    r = size_from_numbers(DENSE, "laptop-16gb", budget_mb=8192)
    assert r.fits_in_memory
    assert r.streamed_bytes_per_token == 0
    assert r.resident_bytes == pytest.approx(4e9)
    assert r.bound == "dram"
    assert r.s_per_token == pytest.approx(4e9 / 60e9)


def test_default_budget_is_limit_minus_documented_overhead():
    r = size_from_numbers(DENSE, "iphone-16-pro")
    assert r.budget_mb == 2048  # 3072 - 256 KV - 256 compute - 512 runtime
    assert any("1024 MiB" in a for a in r.assumptions)


def test_moe_pinned_arithmetic():
    inp = SizingInput(total_params=100e9, active_params=10e9, bits_per_weight=8, n_layers=10, globals_bytes=1e9)
    r = size_from_numbers(inp, get_device("iphone-16-pro").with_extended_limit(), budget_mb=4000)
    # W = 100e9, A = 10e9, G = 1e9; layer bytes 99e9 of which a token touches 9e9: f = 9/99.
    assert r.is_moe
    assert r.active_bytes_per_token == pytest.approx(10e9)
    assert r.active_bytes_per_layer == pytest.approx(0.9e9)
    assert r.min_budget_bytes == pytest.approx(2.8e9)  # 1e9 + 2 x 0.9e9
    # budget 4000 MiB = 4,194,304,000; cache = 1,394,304,000 pinned expert bytes.
    # streamed = 9/99 x (99e9 - 1,394,304,000) = 8,873,245,090.9
    assert r.streamed_bytes_per_token == pytest.approx(8_873_245_090.9)
    assert r.s_per_token == pytest.approx(8_873_245_090.9 / 860e6 + 10 * 150e-6)  # + latency once per layer
    assert r.bound == "ssd"


def test_ssd_what_if():
    r = size_from_numbers(DENSE, "iphone-16-pro", budget_mb=2048, policy="lru", ssd_mb_s=1750)
    assert r.s_per_token == pytest.approx(2.0 + IPHONE_LATENCY_PER_TOKEN)  # 3.5e9 / 1750e6 + latency
    assert r.ssd_mb_s == 1750 and "ssd_read_mb_s" in r.unverified


def test_dense_1_56_tb_is_half_an_hour_per_token_at_usb_speed():
    # The README's dense comparison: 1.56e12 bytes / 0.86e9 bytes/s = 1814 s = 30.2 min.
    from shardscope.engine.devices.projection import RunMeasurement, project_from_bandwidth

    p = project_from_bandwidth(RunMeasurement(1.56e12, 0, 0), ssd_mb_s=860)
    assert p.s_per_token == pytest.approx(1813.95, rel=1e-5)


def test_worked_example_numbers_in_docs():
    """The sizing from numbers on a 1.56 TB MoE of 61 layers, 48 B active at 8 bits (hand-checked figures;
    the docs now work K3's real shape: tests/test_k3_sizing.py holds them to the doc)."""
    inp = SizingInput(total_params=1.56e12, active_params=48e9, bits_per_weight=8, n_layers=61,
                    globals_bytes=2.35e9, name="1.56 TB MoE (1.56T params, 48B active, 8-bit)")
    iphone = get_device("iphone-16-pro")
    with pytest.raises(ShardscopeError, match="below the minimum of 3,669 MiB"):
        size_from_numbers(inp, iphone)
    r = size_from_numbers(inp, iphone.with_extended_limit())
    assert r.budget_mb == 5120
    assert r.streamed_bytes_per_token == pytest.approx(45.61e9, rel=1e-3)
    assert r.s_per_token == pytest.approx(53.03, rel=1e-3)
    assert r.bound == "ssd"
    # The request latency the docs quote (issue #28 item 10): with 32 requests of 512 KiB in
    # flight a request's 150 µs wait overlaps ~20 ms of transfers ahead of it, so each of the 61
    # layers exposes its first request's wait only: 61 x 150 µs, not one wait per 32 requests.
    assert r.projection.ssd_latency_s == pytest.approx(61 * 150e-6, rel=1e-3)
    laptop = size_from_numbers(inp, "laptop-16gb")
    assert laptop.s_per_token == pytest.approx(15.14, rel=1e-3)
    # The expert cache is the budget less the dense bytes (what the run uses), and the prompt
    # at the minimum the engine accepts: micro-batches of 2 tokens, each reading its own picks.
    from shardscope.engine.devices.sizing_prompt import project_prompt

    assert r.expert_cache_bytes / MIB == pytest.approx(5120 - 2.35e9 / MIB)
    at_min = size_from_numbers(inp, iphone.with_extended_limit(), budget_mb=3669)
    p = project_prompt(at_min, 100)
    assert (p.batch_tokens, p.n_batches) == (2, 50)
    assert p.read_bytes == pytest.approx(100 * 45.65e9, rel=1e-3)  # 100 tokens x one token's picks
    assert p.ttft_s == pytest.approx(5308, rel=1e-3)


@pytest.mark.parametrize(
    "inp, expected",
    [
        (SizingInput(1e9, 2e9, 4, 10), "'active_params' .* exceeds 'total_params'"),
        (SizingInput(-1e9, None, 4, 10), "'total_params' must be a positive number"),
        (SizingInput(0, None, 4, 10), "'total_params' must be a positive number"),
        (SizingInput(1e9, -1, 4, 10), "'active_params' must be a positive number"),
        (SizingInput(1e9, None, 4, 0), "'n_layers' must be at least 1"),
        (SizingInput(1e9, None, 4, 2.5), "'n_layers' must be a whole number"),
        (SizingInput(1e9, None, 0, 10), "'bits_per_weight' must be a positive number"),
        (SizingInput(1e9, None, 33, 10), "'bits_per_weight' must be at most 32"),
        (SizingInput(1e9, None, 4, 10, globals_bytes=-1), "'globals_bytes' must be 0 or more"),
        (SizingInput(1e9, None, 4, 10, globals_bytes=1e9), "globals .* must be smaller"),
        (SizingInput(1e9, None, 4, 10, globals_fraction=1.5), "'globals_fraction' must be below 1"),
        (SizingInput(1e9, None, 4, 10, globals_fraction=0.1, globals_bytes=1), "not both"),
    ],
)
def test_nonsense_inputs_are_refused(inp, expected):
    with pytest.raises(ShardscopeError, match=expected):
        size_from_numbers(inp, "iphone-16-pro")


def test_budget_below_minimum_says_the_minimum():
    with pytest.raises(ShardscopeError) as info:
        size_from_numbers(DENSE, "iphone-16-pro", budget_mb=500)
    # 718.75e6 bytes / 2^20 = 685.5 MiB, said rounded up: a budget of 685 MiB is refused too
    assert "below the minimum of 686 MiB" in str(info.value)


def test_budget_above_device_limit_and_bad_policy_are_refused():
    with pytest.raises(ShardscopeError, match="exceeds the app memory limit"):
        size_from_numbers(DENSE, "iphone-16-pro", budget_mb=4000)
    with pytest.raises(ShardscopeError, match="'policy' must be one of pinned, lru"):
        size_from_numbers(DENSE, "iphone-16-pro", policy="fifo")
    with pytest.raises(ShardscopeError, match="unknown device"):
        size_from_numbers(DENSE, "nokia-3310")


def test_format_sizing_shows_the_working():
    r = size_from_numbers(DENSE, "iphone-16-pro", budget_mb=2048)
    text = format_sizing(r)
    assert text.startswith("Plan: ")
    for needle in ("SSD 860 MB/s (unverified)", "minimum", "streamed", "ssd-bound", "2.41 s", "assumptions"):
        assert needle in text
    assert r.summary in text
    assert "iPhone 16 Pro" in r.summary and "2.41 s per token" in r.summary


# ------------------------------------------------------------- sizing: GGUF
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")


def _write_gguf(path: Path, *, experts: bool, counts: bool = True, layers: int = 3) -> Path:
    writer = gguf.GGUFWriter(str(path), "testarch")
    if experts and counts:
        writer.add_uint32("testarch.expert_count", 8)
        writer.add_uint32("testarch.expert_used_count", 2)
    writer.add_tensor("token_embd.weight", np.zeros((64, 32), np.float32))  # 8192 bytes
    for layer in range(layers):
        writer.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((32, 32), np.float32))  # 4096
        if experts:
            writer.add_tensor(f"blk.{layer}.ffn_up_exps.weight", np.zeros((8, 16, 32), np.float32))  # 16384
        else:
            writer.add_tensor(f"blk.{layer}.ffn_up.weight", np.zeros((64, 32), np.float32))  # 8192
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_dense_header(tmp_path):
    path = _write_gguf(tmp_path / "dense.gguf", experts=False)
    # The run's own minimum (issue 48 item 3): these 12,288-byte layers are below the shard plan's
    # smallest streamed tensor, so nothing streams and the minimum is every weight byte, as bench says.
    r = size_from_gguf_header(path, "iphone-16-pro", budget_mb=1, policy="pinned")
    assert r.weight_bytes == 8192 + 3 * 12288
    assert r.globals_bytes == 8192
    assert r.n_layers == 3
    assert r.bytes_per_layer == 12288
    assert not r.is_moe
    assert r.min_budget_bytes == 8192 + 3 * 12288 and r.fits_in_memory
    with pytest.raises(ShardscopeError, match="below the minimum of 1 MiB"):
        size_from_gguf_header(path, "iphone-16-pro", budget_mb=40_000 / MIB, policy="pinned")


def test_gguf_moe_header_uses_expert_counts(tmp_path):
    from shardscope.engine.experts.expert_run import cache_bytes_for
    from shardscope.engine.knobs.knob_refusal import KnobRefusal
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.layout.gguf_layout import read_layout
    from shardscope.engine.layout.moe_layout import read_moe_layout

    path = _write_gguf(tmp_path / "moe.gguf", experts=True)
    moe = read_moe_layout(read_layout(path))
    probe = size_from_gguf_header(path, "iphone-16-pro", budget_mb=1)  # fits: only the minimum is read
    # Expert streaming keeps the dense tensors (8192 + 3 x 4096 bytes, in whole pages) and needs two
    # layers' picks: 2 of 8 experts, each 2048 bytes of unaligned slices booked with their pages.
    assert probe.dense_resident_bytes >= 8192 + 3 * 4096
    assert probe.layer_picks_bytes >= 2 * 2048
    minimum = probe.dense_resident_bytes + 2 * probe.layer_picks_bytes
    assert probe.min_budget_bytes == minimum
    # the run accepts exactly that budget and refuses a byte less (what `bench` would say)
    settings = RunSettings(model_path=str(path), budget_mb=minimum / MIB)
    assert cache_bytes_for(moe, settings) == 2 * probe.layer_picks_bytes
    with pytest.raises(KnobRefusal):
        cache_bytes_for(moe, RunSettings(model_path=str(path), budget_mb=(minimum - 1) / MIB))

    budget = minimum + 1000
    r = size_from_gguf_header(path, "iphone-16-pro", budget_mb=budget / MIB)
    # Per layer: 4096 dense + 16384 experts, of which 2/8 are touched: 4096 + 4096 = 8192.
    assert r.is_moe and not r.fits_in_memory
    assert r.weight_bytes == 8192 + 3 * (4096 + 16384)
    assert r.active_bytes_per_layer == 8192
    assert r.active_bytes_per_token == 8192 + 3 * 8192
    # expert cache = budget - dense; beyond one step's 2 x picks, 1000 bytes hold experts for good;
    # dense bytes never stream: streamed = 0.25 x (49,152 - 1000).
    assert r.expert_cache_bytes == budget - r.dense_resident_bytes
    assert r.streamed_bytes_per_token == pytest.approx(0.25 * (49_152 - 1000))


def test_gguf_moe_without_counts_is_pessimistic(tmp_path):
    path = _write_gguf(tmp_path / "moe.gguf", experts=True, counts=False)
    r = size_from_gguf_header(path, "iphone-16-pro")
    assert r.active_bytes_per_token == r.weight_bytes
    assert any("expert_count" in a for a in r.assumptions)


def test_gguf_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(ShardscopeError, match=re.escape(str(missing))):
        size_from_gguf_header(missing, "iphone-16-pro")
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_bytes(b"hello, this is not a model" * 10)
    with pytest.raises(ShardscopeError, match=re.escape(str(not_gguf)) + ".*not a GGUF file"):
        size_from_gguf_header(not_gguf, "iphone-16-pro")


def test_gguf_split_parts_are_summed_and_missing_parts_named(tmp_path):
    first = _write_gguf(tmp_path / "big-00001-of-00002.gguf", experts=False)
    with pytest.raises(ShardscopeError, match="big-00002-of-00002.gguf is missing"):
        size_from_gguf_header(first, "iphone-16-pro")
    _write_gguf(tmp_path / "big-00002-of-00002.gguf", experts=False, layers=0)  # globals only
    r = size_from_gguf_header(first, "iphone-16-pro")
    assert r.weight_bytes == 2 * 8192 + 3 * 12288


def test_plan_stays_an_alias_of_size():
    import subprocess
    import sys

    args = ["--device", "iphone-16-pro", "--total-params", "8e9", "--bits", "4", "--layers", "32",
            "--globals-bytes", "0.5e9", "--budget-mb", "2048"]
    out = [subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", name, *args], capture_output=True,
                          text=True,
                          check=True).stdout for name in ("size", "plan")]
    assert out[0] == out[1] and out[0].startswith("Plan: ")


def test_the_old_names_plan_and_gguf_still_work_and_say_they_are_old(tmp_path, capsys):
    """`plan` (the old name of `size`) and `--gguf` (of `--model`): argparse lists an alias without
    saying what it is, so the help must; and the old spelling must give the new one's answer."""
    from shardscope.engine.cli.cli import build_parser, main

    top = " ".join(build_parser().format_help().split())
    assert "size (plan) what-if:" in top and "(plan: the old name, an alias)" in top
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert help_text.startswith("usage: shardscope size ")
    assert "'shardscope plan' is the old name of this command, kept as an alias" in help_text
    assert "--model GGUF, --gguf GGUF" in help_text and "--gguf: the old name, an alias" in help_text

    path = str(_write_gguf(tmp_path / "dense.gguf", experts=False))
    printed = []
    for argv in (["size", "--model", path], ["size", "--gguf", path], ["plan", "--gguf", path]):
        assert main(argv) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] == printed[2] and "dense.gguf" in printed[0]


def test_prompt_projection_counts_the_experts_tokens_share():
    """With the expert count known, a batch's union is n x (1 - (1 - k/n)^m) experts (uniform routing);
    a cache holding a layer's bank takes the prompt in one pass."""
    from shardscope.engine.devices.sizing_prompt import project_prompt

    inp = SizingInput(total_params=100e9, active_params=10e9, bits_per_weight=8, n_layers=10, globals_bytes=1e9)
    r = size_from_numbers(inp, get_device("iphone-16-pro").with_extended_limit(), budget_mb=4000)
    picks = r.layer_picks_bytes  # 0.9e9: one layer's k picks
    m = int(r.expert_cache_bytes // picks)
    p = project_prompt(r, 10, n_expert=64, n_expert_used=8)
    assert p.batch_tokens == m and p.n_batches == -(-10 // m)
    sizes = [m] * (10 // m) + ([10 % m] if 10 % m else [])
    union = sum(64 * (1 - (1 - 8 / 64) ** s) for s in sizes)  # experts per layer over the batches
    assert p.read_bytes == pytest.approx(10 * union * picks / 8)
    assert p.read_bytes < project_prompt(r, 10).read_bytes == pytest.approx(10 * 10 * picks)
    whole = project_prompt(r, 10, n_expert=2, n_expert_used=1)  # a bank of 2 x 0.9e9 fits the cache
    assert (whole.batch_tokens, whole.n_batches) == (10, 1)


def test_oneplus_15r_preset_is_their_published_probe():
    """profiles/devices/oneplus-15r.toml against BigMoeOnEdge's iobench-ceiling.md, converted by hand:
    2459.8 MiB/s x 1.048576 = 2579.3 MB/s; one lane's 2.21 ms per 4 MiB minus 4 MiB / 2459.8 MiB/s
    (1.626 ms) = 0.584 ms a request."""
    phone = builtin_devices()["oneplus-15r"]
    assert phone.ssd_read_mb_s == pytest.approx(2459.8 * 1.048576, abs=1)
    assert phone.ssd_latency_us == pytest.approx((2.21e-3 - 4 / 2459.8) * 1e6, abs=1)
    assert phone.ssd_queue_depth == 4 and phone.ram_mb == pytest.approx(11_366_276 / 1024, abs=1)
    assert phone.is_verified("ssd_read_mb_s") and not phone.is_verified("ssd_latency_us")
    assert all(phone.sources.get(q) for q in ("ssd_read_mb_s", "ssd_latency_us", "dram_mb_s", "app_memory_limit_mb"))
