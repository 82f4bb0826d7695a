"""Every arch synth writes gets its routing through engine/synth/synth_router_seam.py: under
``--routing real`` (the default) the file holds synth_router's structure (the embedding's constant
and empty context blocks, routers reading the constant block as a per-expert popularity, layer 0's
context head), under ``uniform`` random rows; and llama.cpp's own picks on a real-routed file of
each arch reuse experts token to token far above what independent picks would.

Read back with the gguf package (its reader and dequantizer, not the engine's), picks from
llama.cpp's ffn_moe_topk via the run's routing trace, statistics computed here by hand.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from shardscope.engine.experts.expert_io import resident_dense_bytes
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.budget_minimum import min_expert_cache_bytes as min_cache_bytes
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.synth import synth_router
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_arch_specs import ARCH_SPECS
from shardscope.engine.synth.synth_moe import defaults_for
from shardscope.engine.synth.synth_router_seam import QK_NORM_GEMMA4

CONST = synth_router.CONST_DIMS
SIZE_MB = {"qwen3next": 80}
ARCHES = ["qwen3moe", "gpt-oss", "glm4moe", "llama4", "gemma4", "qwen3next", "kimi-k2", "deepseek3"]


def _write(tmp_path, arch: str, routing: str):
    row = ARCH_SPECS[arch]
    path = tmp_path / f"{arch}-{routing}.gguf"
    write_synthetic_model(path, SIZE_MB.get(arch, 64), n_layers=row.dense_lead + 4 * row.moe_step,
                          moe=replace(defaults_for(arch), routing=routing), seed=3)
    return str(path)


def _tensors(path: str) -> dict[str, np.ndarray]:
    import gguf

    out = {}
    for t in gguf.GGUFReader(path).tensors:
        if (t.name == "token_embd.weight" or t.name.startswith(("blk.0.", "blk.3.attn"))
                or "ffn_gate_inp.weight" in t.name):
            out[t.name] = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
    return out


@pytest.mark.parametrize("arch", ARCHES)
def test_real_routing_structure_is_in_every_arch_file_and_uniform_is_not(tmp_path, arch):
    real, uniform = _tensors(_write(tmp_path, arch, "real")), _tensors(_write(tmp_path, arch, "uniform"))
    # gemma4's graph scales embeddings by sqrt(n_embd): its writer stores them that much smaller
    n_embd = real["token_embd.weight"].shape[1]
    const = synth_router.EMBED_CONST * (n_embd ** -0.5 if arch == "gemma4" else 1.0)
    emb = real["token_embd.weight"]
    assert np.allclose(emb[:, :CONST], const, rtol=0.01)
    assert not emb[:, CONST:CONST + 64].any()  # the context block: only layer 0's head writes it
    assert not np.allclose(uniform["token_embd.weight"][:, :CONST], const, rtol=0.1)
    router = next(name for name in sorted(real) if "ffn_gate_inp.weight" in name)
    w = real[router]
    assert np.allclose(w[:, :CONST], w[:, :1])  # the same weight over the constant block: a popularity
    assert w[:, 0].std() > 0 and not np.allclose(uniform[router][:, :CONST], uniform[router][:, :1])
    if arch == "qwen3next":  # layer 0 is linear attention: the head is layer 3's, rows [query 64, gate 64] per head
        q, k = real["blk.3.attn_q.weight"], real["blk.3.attn_k.weight"]
        assert "blk.0.attn_q.weight" not in real
        assert not q[:64, CONST:].any() and q[:16:2, :CONST].all() and not q[16:128].any()  # quarter-rotary, gate 0
        assert q[128:].any() and not k[16:64].any() and k[:16:2, :CONST].all()
        assert uniform["blk.3.attn_q.weight"][:64, CONST:].any()
    elif ARCH_SPECS[arch].mla:  # head 0's query comes from q_a's first row, which reads the constant block only
        assert real["blk.0.attn_q_a.weight"][0, CONST:].any() == False  # noqa: E712
        assert uniform["blk.0.attn_q_a.weight"][0, CONST:].any()
    else:  # head 0's query and key read the constant block only
        n_rot = int(64 * ARCH_SPECS[arch].rope_fraction)  # glm4moe: the rotated half only
        for name in ("blk.0.attn_q.weight", "blk.0.attn_k.weight"):
            assert not real[name][:64, CONST:].any() and real[name][:n_rot:2, :CONST].all(), name
            assert not real[name][n_rot:64].any(), name
            assert uniform[name][:64, CONST:].any()
    if arch == "gemma4":
        assert np.allclose(real["blk.0.attn_q_norm.weight"], QK_NORM_GEMMA4)
        assert np.allclose(uniform["blk.0.attn_q_norm.weight"], 1.0)
        # four layers: the FFN's post-norm at 1/sqrt(2·4), layer 0's attention post-norm (the context) at 1
        assert np.allclose(real["blk.0.post_ffw_norm.weight"], 8 ** -0.5)
        assert np.allclose(real["blk.0.post_attention_norm.weight"], 1.0)
        assert np.allclose(uniform["blk.0.post_ffw_norm.weight"], 1.0)


def _run(path: str, budget_mb: int):
    settings = RunSettings(model_path=path, budget_mb=budget_mb, n_gen=32, n_ctx=128,
                           prompt="The history of the printing press begins")
    with open_run(settings) as run:
        summary = run.run()
        trace = run.routing_records() if hasattr(run, "routing_records") else None
    return summary.text, trace


def _lag1(trace) -> tuple[float, float]:
    """(lag-1 reuse of llama.cpp's decode picks, averaged over layers; independent picks' k / n)."""
    picks: dict[int, dict[int, set]] = {}
    for r in trace.records:
        if not r.prompt:
            picks.setdefault(r.layer, {})[r.token] = set(r.experts)
    reuse = []
    for by_token in picks.values():
        seq = [by_token[t] for t in sorted(by_token)]
        reuse.append(sum(len(a & b) for a, b in zip(seq, seq[1:])) / sum(len(s) for s in seq[1:]))
    return float(np.mean(reuse)), trace.header.n_expert_used / trace.header.n_expert


@pytest.mark.parametrize("arch", ["gpt-oss", "gemma4", "qwen3next"])
def test_llama_cpp_picks_on_a_real_routed_file_reuse_experts(tmp_path, arch):
    """Three archs the context head meets differently (sinks + window, scale-free Q/K norms and
    post-norms, a gated quarter-rotary head after three linear-attention layers)."""
    path = _write(tmp_path, arch, "real")
    moe = read_moe_layout(read_layout(path))  # the engine's floor and half a layer more: experts stream
    budget = math.ceil((resident_dense_bytes(moe) + min_cache_bytes(moe, False)
                        + 0.5 * moe.n_expert * moe.max_unit_bytes) / 2 ** 20)
    text, trace = _run(path, budget)  # the trace holds llama.cpp's picks
    assert trace is not None and trace.n_decoded >= 31
    lag1, independent = _lag1(trace)
    assert lag1 >= 3 * independent, (lag1, independent)
    assert text == _run(path, 4096)[0]  # greedy text the same as llama.cpp with every expert resident
