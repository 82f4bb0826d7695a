"""GPU layers while the experts stream (issue #35).

On this CPU-only build (CI's too): n_gpu_layers with streamed experts is not refused, runs on
the CPU, says so in one line, and the CSV row carries what was asked and a GPU memory of 0. The
pieces that reach into llama.cpp's C API are checked without a GPU where that is possible (the
override array, the device-memory read of a tensor, the layer placement, the projection); the
runs that need a GPU skip with the reason where the build has none (bench/goals/gpu_split.py and
docs/benchmarks.md have them measured on an H200).
"""

from __future__ import annotations

import csv
import ctypes

import numpy as np
import psutil
import pytest

from conftest import drop_from_page_cache
from shardscope.engine.cli.cli import main
from shardscope.engine.devices.devices import get_device, load_device
from shardscope.engine.devices.projection import RunMeasurement, compute_factor_for, project
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.moe_layout import EXPERT_TENSORS
from shardscope.engine.measure.gpu_memory import gpu_memory_used_mb
from shardscope.engine.measure.metric_registry import BY_NAME, chart_curves, panel_rows, timeline_columns
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.stream import ggml_tensors
from shardscope.engine.stream.gpu_split import ExpertsOnCpu, is_expert_tensor, layers_on_gpu
from shardscope.engine.stream.llama_session import gpu_offload_supported

N_GEN = 6
needs_gpu = pytest.mark.skipif(not gpu_offload_supported(),
                               reason="this llama.cpp build has no GPU offload (CPU-only CI): measured on an H200 "
                                      "with bench/goals/gpu_split.py, docs/benchmarks.md")
cpu_only = pytest.mark.skipif(gpu_offload_supported(), reason="checks the CPU-only build's behaviour")


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("gpu-split") / "moe-100.gguf"
    write_synthetic_model(path, 100, moe=MoeSpec(16, 4, routing_skew=2.0), seed=3)
    return str(path)


# ------------------------------------------------------------------ what goes where
def test_the_override_pattern_keeps_every_streamed_expert_tensor_in_host_memory():
    for name in EXPERT_TENSORS:  # what the streamer loads and evicts (engine/layout/moe_layout.py)
        assert is_expert_tensor(f"blk.7.{name}.weight")
    assert is_expert_tensor("blk.0.ffn_gate_exps.bias")  # gpt-oss's expert biases follow their experts
    for name in ("blk.7.ffn_gate_shexp.weight", "blk.7.ffn_gate_inp.weight", "blk.7.attn_q.weight",
                 "output.weight", "blk.7.exp_probs_b.bias"):
        assert not is_expert_tensor(name)  # shared experts, router, attention, head: to the GPU


def test_the_override_array_is_null_terminated_and_names_the_cpu_buffer_type():
    overrides = ExpertsOnCpu()
    pattern, buft, end_pattern, end_buft = (ctypes.c_void_p * 4).from_address(overrides.pointer)
    assert ctypes.string_at(pattern) == rb"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
    assert buft and not end_pattern and not end_buft


@pytest.mark.parametrize("n_gpu_layers, expected", [
    (0, (range(48, 48), False)), (1, (range(48, 48), True)), (8, (range(41, 48), True)),
    (48, (range(1, 48), True)), (49, (range(0, 48), True)), (99, (range(0, 48), True)), (-1, (range(0, 48), True))])
def test_layers_go_to_the_gpu_as_llama_cpp_places_them(n_gpu_layers, expected):
    # src/llama-model.cpp: i_gpu_start = max(n_layer + 1 - n_gpu_layers, 0); the head is layer n_layer
    assert layers_on_gpu(n_gpu_layers, 48) == expected


class _FakeDeviceLib:
    """ggml_backend_* as seen from the eval callback for a node in device memory."""

    def __init__(self, data: np.ndarray):
        self.data, self.calls = data, []

    def ggml_backend_buffer_is_host(self, buffer):
        return False

    def ggml_get_data(self, tensor):
        raise AssertionError("a device pointer must not be read from the host")

    def ggml_backend_tensor_get(self, tensor, out, offset, size):
        self.calls.append((offset, size))
        ctypes.memmove(out, self.data.ctypes.data + offset, size)


def _fake_tensor(ne, nb) -> ctypes.Array:
    raw = (ctypes.c_int64 * 12)()
    raw[1] = 0xDEAD  # the buffer pointer: set, so not "no buffer"
    raw[2:6] = ne
    raw[6:10] = nb
    return raw


def test_router_picks_computed_on_the_gpu_are_copied_out_of_device_memory():
    # argsort of 16 experts per token, viewed as the top 4 (rows nb[1] = 64 bytes apart): 3 tokens
    argsort = np.arange(48, dtype=np.int32).reshape(3, 16)
    lib = _FakeDeviceLib(argsort)
    tensor = _fake_tensor([4, 3, 1, 1], [4, 64, 192, 192])
    ids = ggml_tensors.read_topk_ids(lib, ctypes.addressof(tensor))
    assert ids.tolist() == argsort[:, :4].tolist()
    assert lib.calls == [(0, 64 * 2 + 16)]  # one copy of the view's bytes, gaps included
    one = _fake_tensor([4, 1, 1, 1], [4, 64, 64, 64])
    assert ggml_tensors.read_topk_ids(lib, ctypes.addressof(one)).tolist() == [[0, 1, 2, 3]]


def test_the_router_input_row_is_copied_out_of_device_memory():
    rows = np.arange(24, dtype=np.float32).reshape(3, 8)
    lib = _FakeDeviceLib(rows)
    tensor = _fake_tensor([8, 3, 1, 1], [4, 32, 96, 96])
    assert ggml_tensors.read_last_row_f32(lib, ctypes.addressof(tensor)).tolist() == rows[2].tolist()
    assert lib.calls == [(64, 32)]


# ------------------------------------------------------------------ the figure
def test_gpu_memory_is_declared_once_and_reaches_csv_chart_and_panels():
    m = BY_NAME["gpu_mb"]
    assert (m.unit, m.plot, m.kind) == ("MiB", "memory", "")
    assert "gpu_mb" in timeline_columns()
    assert chart_curves()["gpu"] is m
    assert ("gpu_mb", "GPU memory", "MiB") in panel_rows("live")
    from shardscope.engine.experts.expert_run import ExpertRunSummary

    assert {"gpu_mb", "n_gpu_layers", "n_gpu_layers_requested", "gpu_compute_ms_per_token"} <= set(
        ExpertRunSummary.columns())


@cpu_only
def test_gpu_memory_is_zero_without_a_gpu():
    assert gpu_memory_used_mb() == 0.0


# ------------------------------------------------------------------ CPU-only build
@cpu_only
def test_gpu_layers_with_streamed_experts_run_on_the_cpu_and_say_so_once(small_moe, tmp_path, capsys):
    out = tmp_path / "rows.csv"
    code = main(["bench", "--model", small_moe, "--budget-mb", "60", "--n-gpu-layers", "99",
                 "--tokens", str(N_GEN), "--n-ctx", "128", "--csv", str(out)])
    assert code == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "no GPU offload" in line]
    assert len(said) == 1 and "99" in said[0]
    row = next(csv.DictReader(out.open()))
    assert int(row["n_prompt"]) > 0 and float(row["expert_hit_rate"]) >= 0  # an expert run's row
    assert (row["n_gpu_layers_requested"], row["n_gpu_layers"], float(row["gpu_mb"])) == ("99", "0", 0.0)
    assert float(row["gpu_compute_ms_per_token"]) == 0.0


@cpu_only
def test_a_cpu_build_streams_the_same_tokens_whatever_n_gpu_layers_asks(small_moe):
    """Each streamed run against llama.cpp's own greedy tokens with the whole model resident and no
    callback (the two runs, both forced to 0 GPU layers, were compared with each other)."""
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(small_moe, n_threads=2, n_ctx=128) as session:
        reference = session.generate(RunSettings().prompt, N_GEN).tokens
    tokens = []
    for ngl in (0, 99):
        with open_run(RunSettings(model_path=small_moe, budget_mb=60, n_gen=N_GEN, n_ctx=128, n_gpu_layers=ngl),
                      streams="experts") as run:
            summary = run.run()
            tokens.append(list(run.tokens))
        assert summary.n_gpu_layers == 0 and summary.n_gpu_layers_requested == ngl
    assert tokens == [reference, reference]


# ------------------------------------------------------------------ projection
def test_a_gpu_device_does_not_scale_gpu_compute_by_cpu_cores():
    m = RunMeasurement(0, 0, 0.020, host_threads=8, prefetch=False, gpu_compute_s_per_token=0.010)
    iphone, phone = get_device("iphone-16-pro"), get_device("oneplus-15r")
    assert iphone.gpu_compute and not phone.gpu_compute
    assert "gpu_compute_scale" in iphone.unverified  # the GPU's speed vs the host's is not recorded
    # iPhone: 2 performance cores for 8 host threads = 4x on the CPU's 10 ms, the GPU's 10 ms as is
    assert project(m, iphone).terms["compute"] == pytest.approx(0.010 * 4 + 0.010)
    # A CPU-only deployment computes the whole token on its cores, scaled as any CPU compute
    assert project(m, phone).terms["compute"] == pytest.approx(0.020 * compute_factor_for(m, phone))
    cpu_run = RunMeasurement(0, 0, 0.020, host_threads=8, prefetch=False)
    assert project(cpu_run, iphone).terms["compute"] == pytest.approx(0.020 * 4)


def test_a_preset_says_whether_its_deployment_computes_on_the_gpu(tmp_path):
    text = (get_device("iphone-16-pro").path and open(get_device("iphone-16-pro").path).read())
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("computes = true", 'computes = "yes"'))
    with pytest.raises(Exception, match="gpu.computes"):
        load_device(bad)
    scaled = tmp_path / "scaled.toml"
    scaled.write_text(text.replace("computes = true", "computes = true\ncompute_scale = 0.05"))
    device = load_device(scaled)
    assert device.gpu_compute_scale == 0.05 and "gpu_compute_scale" not in device.unverified


# ------------------------------------------------------------------ with a GPU
@needs_gpu
def test_dense_on_the_gpu_streams_the_experts_with_the_resident_runs_tokens(small_moe):
    runs = {}
    for label, budget in (("stream", 60), ("resident", 1024)):
        with open_run(RunSettings(model_path=small_moe, budget_mb=budget, n_gen=16, n_ctx=128, n_gpu_layers=99),
                      streams="experts") as run:
            runs[label] = (run.run(), list(run.tokens))
    summary, tokens = runs["stream"]
    assert summary.n_gpu_layers == 99 and summary.gpu_mb > 0
    assert summary.resident_weights_mb <= 60
    assert 0 < summary.gpu_compute_ms_per_token <= summary.compute_ms_per_token
    assert tokens == runs["resident"][1]


def test_dense_bytes_llama_cpp_left_unmapped_for_the_gpu_are_not_read(small_moe):
    """With GPU layers llama.cpp unmaps the file's ends that hold GPU tensors only (seen on the
    H200: the expert run's cold start then failed on "range … is not page-aligned inside the
    mapping"); the streamer reads the dense bytes that are still mapped and skips the rest."""
    import mmap
    import os

    from shardscope.engine.base.file_mapping import FileMapping
    from shardscope.engine.experts.expert_io import ExpertIO
    from shardscope.engine.layout.budget_minimum import dense_pages
    from shardscope.engine.layout.gguf_layout import read_layout
    from shardscope.engine.layout.moe_layout import read_moe_layout
    from shardscope.engine.stream import io_path
    from shardscope.engine.stream.ssd_rate_limiter import SsdRateLimiter

    moe = read_moe_layout(read_layout(small_moe))
    pages = dense_pages(moe)
    last_expert_end = max(off + per * moe.n_expert for layer in moe.layers for off, per in moe.expert_tensors[layer])
    cut = pages[-1][0]
    assert cut >= last_expert_end, "the small synth's file ends with dense tensors (its output head)"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                              ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(small_moe, os.O_RDONLY)
    address = libc.mmap(None, cut, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    try:
        mapping = FileMapping(small_moe, address, address + cut, 0)
        slots = io_path.open_slots(small_moe, mapping)
        io = ExpertIO(moe, mapping, fd, None if isinstance(slots, str) else slots, SsdRateLimiter())
        # The kernel's count, not the dense pages clipped again the way start() clips them: with the
        # file out of the page cache, what start() reads is what /proc/self/io counts, all of it
        # inside the mapping, and less than the dense pages that lie past its end would add.
        drop_from_page_cache(small_moe)
        before = psutil.Process().io_counters().read_bytes
        started = io.start()
        kernel = psutil.Process().io_counters().read_bytes - before
        assert 0 < started <= cut
        assert abs(kernel - started) <= 64 * 1024, (kernel, started)  # a page or two of readahead at most
        assert pages[-1][1] - pages[-1][0] > 0 and started < sum(hi - lo for lo, hi in pages)
    finally:
        libc.munmap(address, cut)
        os.close(fd)
