"""Synthetic GLM5-Next (GLM-5.3-Flash) files: llama.cpp's ``glm5-next`` architecture at small scale.

src/models/glm5-next.cpp (llama-cpp-python 0.3.36) is a hybrid of pieces synth writes for other archs:
KDA layers (kimi-k3's, ``head_count_kv`` 0, but with a low-rank output gate ``ssm_g_a``/``ssm_g_b``),
NoPE MLA layers (``rope.dimension_count`` 0, the cache the latent alone, no output gate) each with a
DSA indexer that pools keys (``indexer.proj``/``attn_k``/``attn_q_b``, ``indexer.k_norm`` weight and
bias, ``indexer_compressor_gate``/``_ape`` as the k-pool; ``indexer.kpool`` > 1 dividing ``top_k``),
deepseek4's four hyper-connection streams (``hc_{attn,ffn}_{fn,base,scale}``, the output their mean),
and DeepSeek-style MoE (a dense layer 0, sigmoid + ``exp_probs_b``, a shared expert of the routed width).
The experts are picked at ``ffn_moe_topk-N`` as everywhere. GLM-5.3-Flash's config is not in the notes:
the row uses GLM-5's MoE counts (256 experts top-8 + 1 shared) and kimi-k3's layer pattern (3 KDA : 1
MLA, the last MLA). Sizing, alignment and name order: synth_gqa_moe's planner given this list.
"""

from __future__ import annotations

import math

from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_kimi_k3 import CONV_KERNEL, add_kda_moe_keys, is_kda, mla_dims
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import attention_output, edge_globals, router_bias, router_weight
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

KDA_HEAD = HEAD_DIM
NOPE, V_HEAD = 2 * HEAD_DIM, HEAD_DIM  # key_length_mla (all nope: the graph asserts n_rot 0), value_length_mla
HC = 4
HC_MIX = (2 + HC) * HC
SINKHORN_ITERS = 20
INDEXER_HEADS, INDEXER_DIM = 64, 128  # llama.cpp's fixture's (the fused kernels' sizes)
KPOOL, INDEXER_TOP_K = 4, 512
TENSORS_PER_LAYER = 40


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    return max(8, gqa.default_n_layers(size_mb, arch))


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x, h = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts, shape.n_head
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    q_lora, kv_lora = mla_dims(e)
    d_inner, hc_dim = h * KDA_HEAD, HC * e
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    fd, s = gqa.dense_ff(arch, e), spec.shared_experts * f
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."

        def vec(name, size, ones=True, sigma=0.0):
            return Tensor(p + name, 1, size, False, sigma, random_f32=not ones)

        def mat(name, rows, cols, sigma):
            return Tensor(p + name, rows, cols, True, sigma)

        layer = [vec("attn_norm.weight", e), vec("ffn_norm.weight", e)]
        for part in ("attn", "ffn"):  # small mixes: the four streams stay close to an even average
            layer += [Tensor(p + f"hc_{part}_fn.weight", HC_MIX, hc_dim, False, 0.1 * hc_dim ** -0.5, random_f32=True),
                      vec(f"hc_{part}_base.weight", HC_MIX, ones=False), vec(f"hc_{part}_scale.weight", 3)]
        if is_kda(i, n):
            layer += [Tensor(p + f"ssm_conv1d_{c}.weight", 1, CONV_KERNEL, False, 0.5, n_expert=d_inner,
                              random_f32=True) for c in "qkv"]
            layer += [mat("attn_q.weight", d_inner, e, s_e), mat("attn_k.weight", d_inner, e, s_e),
                      mat("attn_v.weight", d_inner, e, s_e),
                      mat("ssm_f_a.weight", KDA_HEAD, e, s_e),
                      mat("ssm_f_b.weight", d_inner, KDA_HEAD, KDA_HEAD ** -0.5),
                      mat("ssm_beta.weight", h, e, s_e),
                      mat("ssm_g_a.weight", KDA_HEAD, e, s_e),
                      mat("ssm_g_b.weight", d_inner, KDA_HEAD, KDA_HEAD ** -0.5),
                      Tensor(p + "ssm_a", 1, h, False, 0.0, random_f32=True), vec("ssm_dt.bias", d_inner, ones=False),
                      vec("ssm_norm.weight", KDA_HEAD),
                      attention_output(p + "attn_output.weight", e, d_inner, s_res / math.sqrt(d_inner))]
        else:
            layer += [mat("attn_q_a.weight", q_lora, e, s_e), vec("attn_q_a_norm.weight", q_lora),
                      mat("attn_q_b.weight", h * NOPE, q_lora, q_lora ** -0.5),
                      mat("attn_kv_a_mqa.weight", kv_lora, e, s_e), vec("attn_kv_a_norm.weight", kv_lora),
                      Tensor(p + "attn_k_b.weight", kv_lora, NOPE, False, NOPE ** -0.5, n_expert=h, random_f32=True),
                      Tensor(p + "attn_v_b.weight", V_HEAD, kv_lora, False, kv_lora ** -0.5, n_expert=h,
                              random_f32=True),
                      attention_output(p + "attn_output.weight", e, h * V_HEAD, 2.0 * s_res / math.sqrt(h * V_HEAD)),
                      vec("indexer.k_norm.weight", INDEXER_DIM), vec("indexer.k_norm.bias", INDEXER_DIM, ones=False),
                      mat("indexer.proj.weight", INDEXER_HEADS, e, s_e),
                      mat("indexer.attn_k.weight", INDEXER_DIM, e, s_e),
                      mat("indexer.attn_q_b.weight", INDEXER_HEADS * INDEXER_DIM, q_lora, q_lora ** -0.5),
                      mat("indexer_compressor_gate.weight", INDEXER_DIM, e, s_e),
                      Tensor(p + "indexer_compressor_ape.weight", KPOOL, INDEXER_DIM, False, 0.02, random_f32=True)]
        if i < arch.dense_lead:
            layer += [mat("ffn_gate.weight", fd, e, s_e), mat("ffn_up.weight", fd, e, s_e),
                      mat("ffn_down.weight", e, fd, 2.0 * s_res / math.sqrt(fd))]
        else:
            layer += [router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
                      router_bias(p + "exp_probs_b.bias", spec, i, n),
                      Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_res / math.sqrt(f), n_expert=x,
                              qtype=down_q),
                      mat("ffn_gate_shexp.weight", s, e, s_e), mat("ffn_up_shexp.weight", s, e, s_e),
                      mat("ffn_down_shexp.weight", e, s, 2.0 * s_res / math.sqrt(s))]
        out += sorted(layer, key=lambda t: t.name)
    return out + tail


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """The keys src/models/glm5-next.cpp load_arch_hparams reads."""
    a, e, n = arch.gguf_arch, shape.n_embd, shape.n_layers
    q_lora, kv_lora = mla_dims(e)
    writer.add_uint32(f"{a}.feed_forward_length", gqa.dense_ff(arch, e))
    writer.add_uint32(f"{a}.expert_feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", shape.n_head)
    writer.add_array(f"{a}.attention.head_count_kv", [0 if is_kda(i, n) else 1 for i in range(n)])
    writer.add_uint32(f"{a}.attention.key_length", kv_lora)
    writer.add_uint32(f"{a}.attention.value_length", kv_lora)
    writer.add_uint32(f"{a}.attention.key_length_mla", NOPE)
    writer.add_uint32(f"{a}.attention.value_length_mla", V_HEAD)
    writer.add_uint32(f"{a}.attention.q_lora_rank", q_lora)
    writer.add_uint32(f"{a}.attention.kv_lora_rank", kv_lora)
    writer.add_uint32(f"{a}.rope.dimension_count", 0)
    add_kda_moe_keys(writer, a, spec, arch, KDA_HEAD)
    writer.add_uint32(f"{a}.attention.indexer.head_count", INDEXER_HEADS)
    writer.add_uint32(f"{a}.attention.indexer.key_length", INDEXER_DIM)
    writer.add_uint32(f"{a}.attention.indexer.top_k", INDEXER_TOP_K)
    writer.add_uint32(f"{a}.attention.indexer.kpool", KPOOL)
    writer.add_uint32(f"{a}.hyper_connection.count", HC)
    writer.add_uint32(f"{a}.hyper_connection.sinkhorn_iterations", SINKHORN_ITERS)
    writer.add_float32(f"{a}.hyper_connection.epsilon", 1e-6)


__all__ = ["tensors", "plan", "add_metadata", "default_n_layers", "TENSORS_PER_LAYER"]
