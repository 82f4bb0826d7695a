"""Synthetic weights in users' block formats (Q8_0, Q4_K, Q6_K, MXFP4), checked with the gguf
package's own block sizes and dequantizer, and a Q4_K_M qwen3moe file read back by it."""

from __future__ import annotations

import numpy as np
import pytest

from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec
from shardscope.engine.synth.synth_quant import TYPES, random_blocks


@pytest.mark.parametrize("name", list(TYPES))
def test_block_sizes_are_ggmls(name):
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    qtype = TYPES[name]
    assert GGML_QUANT_SIZES[GGMLQuantizationType(qtype.ggml_type)] == (qtype.block, qtype.bytes)
    assert GGMLQuantizationType(qtype.ggml_type).name == name


@pytest.mark.parametrize("name", list(TYPES))
def test_random_blocks_dequantize_to_finite_weights_of_the_asked_scale(name):
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    qtype, sigma = TYPES[name], 0.05
    blocks = random_blocks(qtype, 512, sigma, np.random.SFC64(7))
    weights = dequantize(blocks.reshape(-1), GGMLQuantizationType(qtype.ggml_type)).astype(np.float64)
    assert weights.size == 512 * qtype.block and np.isfinite(weights).all()
    assert abs(weights.mean()) < 0.1 * sigma
    low, high = (0.7, 1.42) if name == "MXFP4" else (0.9, 1.1)  # MXFP4 scales are powers of two
    assert low * sigma < weights.std() < high * sigma


def test_q4_k_m_qwen3moe_experts_read_back_as_q4_k_and_q6_k(tmp_path):
    import gguf

    path = tmp_path / "q.gguf"
    info = write_synthetic_model(path, 100, moe=MoeSpec(128, 8, arch="qwen3moe", quant="q4_k_m"))
    reader = gguf.GGUFReader(path)
    types = {t.name.split(".", 2)[2]: t.tensor_type.name for t in reader.tensors if t.name.startswith("blk.0.ffn_")}
    assert (types["ffn_gate_exps.weight"], types["ffn_up_exps.weight"], types["ffn_down_exps.weight"]) == (
        "Q4_K", "Q4_K", "Q6_K")
    assert reader.alignment == 32 and reader.fields["general.file_type"].contents() == 15  # MOSTLY_Q4_K_M
    offsets = [t.data_offset for t in reader.tensors]
    assert all(o % 32 == 0 for o in offsets) and any(o % 4096 for o in offsets)
    starts = [int(t.data_offset) + e * (int(t.n_bytes) // 128) for t in reader.tensors if "_exps" in t.name
              for e in range(128)]
    assert sum(1 for s in starts if s % 4096) > len(starts) // 2  # most expert slices do not start on a page
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(info.path, n_threads=2, n_ctx=128) as session:
        assert len(session.generate("The printing press", 4).tokens) == 4


# qwen3moe too: its Q4_K_M expert slices mostly start off a page (the unaligned case of both I/O paths)
@pytest.mark.io_paths
@pytest.mark.parametrize("arch, size_mb", [("kimi-k2", 240), ("deepseek2", 100), ("qwen3moe", 100)])
def test_q4_k_m_reaches_the_mla_archs(tmp_path, arch, size_mb, io_path):
    """--quant q4_k_m on the deepseek2 family wrote Q8_0 experts under a Q4_K_M file type; now the
    gguf package reads its experts as Q4_K / Q6_K, and expert streaming gives llama.cpp's own tokens."""
    import gguf

    from shardscope.engine.experts.expert_run import ExpertRun
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.stream.llama_session import LlamaSession
    from shardscope.engine.synth.synth_moe import defaults_for

    path = tmp_path / f"{arch}.gguf"
    spec = defaults_for(arch)
    info = write_synthetic_model(path, size_mb, moe=MoeSpec(spec.experts, spec.experts_used, spec.shared_experts,
                                                            arch=arch, quant="q4_k_m"))
    reader = gguf.GGUFReader(path)
    kinds = {(t.name.split(".")[2], t.tensor_type.name) for t in reader.tensors if "_exps" in t.name}
    assert kinds == {("ffn_gate_exps", "Q4_K"), ("ffn_up_exps", "Q4_K"), ("ffn_down_exps", "Q6_K")}
    assert reader.fields["general.file_type"].contents() == 15
    with LlamaSession(info.path, n_threads=2, n_ctx=128) as session:
        expected = session.generate("The printing press", 6).tokens
    budget = int(info.size_bytes / 2**20 * 0.45)
    with ExpertRun(RunSettings(model_path=info.path, prompt="The printing press", n_gen=6, n_ctx=128,
                               budget_mb=budget)) as run, io_path.watch(info.path):
        summary = run.run()
        assert run.tokens == expected
    assert summary.expert_misses > 0  # it streamed
    io_path.check(summary.io_path)


def test_a_default_depth_without_a_shape_moves_to_a_neighbour(tmp_path):
    """Q4_K/Q6_K widths come in steps of 256: deepseek3 at 200 MiB has no shape within 5 % at its
    default 8 layers; without --layers synth takes the nearest depth that has one, with --layers
    it refuses in one line."""
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.synth.synth_moe import default_n_layers, defaults_for

    d = defaults_for("deepseek3")
    spec = MoeSpec(d.experts, d.experts_used, d.shared_experts, arch="deepseek3", quant="q4_k_m")
    default = default_n_layers(200, spec)
    with pytest.raises(ShardscopeError, match="cannot make a 200 MB deepseek3 model"):
        write_synthetic_model(tmp_path / "fixed.gguf", 200, n_layers=default, moe=spec)
    assert not (tmp_path / "fixed.gguf").exists()
    info = write_synthetic_model(tmp_path / "near.gguf", 200, moe=spec)
    assert info.n_layers != default and abs(info.n_layers - default) <= 4
    assert abs(info.size_bytes - 200 * 2**20) <= 0.05 * 200 * 2**20
