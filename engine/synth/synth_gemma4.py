"""Synthetic gemma4 MoE files (Gemma-4-26B-A4B's shape), for llama.cpp's gemma4 graph.

Gemma 4's MoE layer is unlike the others: every layer runs a dense GELU FFN (``ffn_gate/up/down``,
the "shared expert", between ``ffn_norm`` and ``post_ffw_norm_1``) beside the routed experts
(``pre_ffw_norm_2`` … ``post_ffw_norm_2``); the router multiplies its own RMS-normed input by
``ffn_gate_inp.scale`` before ``ffn_gate_inp``; the experts' outputs may be scaled per expert
(``ffn_down_exps.scale``, F32 [n_expert]: dense bytes, resident). Attention: Q/K norms, a
``post_attention_norm``, five sliding-window layers to one full one (``sliding_window_pattern``,
an array of per-layer bools), and the full layers' ``rope_freqs``. The picks still come out of
build_moe_ffn as ``ffn_moe_topk-N``. Sizing, quantization, alignment and tensor order are those of
``synth_gqa_moe`` (its planner is given this tensor list).
"""

from __future__ import annotations

import math

from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import (
    attention_output,
    context_attention,
    edge_globals,
    post_norm_gemma4,
    qk_norm_gemma4,
    router_weight,
)
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

SWA_PERIOD = 6  # five sliding-window layers, then one full-attention layer


def is_swa(layer: int, n_layers: int) -> bool:
    """Every sixth layer and the last attend globally (Gemma-4-26B-A4B's 30: 5, 11, …, 29), so even a
    two-layer file has the full-attention layer that reads ``rope_freqs``."""
    return layer % SWA_PERIOD != SWA_PERIOD - 1 and layer != n_layers - 1


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    q, kv, fd = shape.n_head * HEAD_DIM, shape.n_head_kv * HEAD_DIM, gqa.dense_ff(arch, e)
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    # the graph multiplies embeddings by sqrt(n_embd): written 1/sqrt(n_embd) smaller under real routing
    out, tail = edge_globals(n_vocab, e, spec, embed_scale=e ** -0.5)
    # one rope_freqs for all full-attention layers (llama.cpp duplicates the first one's)
    out += [Tensor("rope_freqs.weight", 1, HEAD_DIM // 2, False, 0.0)]
    for i in range(n):
        p = f"blk.{i}."

        def norm(name, size=e):
            return Tensor(p + name, 1, size, False, 0.0)

        layer = [norm("attn_norm.weight"),
                 Tensor(p + "attn_q.weight", q, e, True, s_e),
                 Tensor(p + "attn_k.weight", kv, e, True, s_e),
                 Tensor(p + "attn_v.weight", kv, e, True, s_e),
                 attention_output(p + "attn_output.weight", e, q, s_res / math.sqrt(q)),
                 qk_norm_gemma4(norm("attn_q_norm.weight", HEAD_DIM), spec, i),
                 qk_norm_gemma4(norm("attn_k_norm.weight", HEAD_DIM), spec, i),
                 post_norm_gemma4(norm("post_attention_norm.weight"), spec, i, n),
                 norm("ffn_norm.weight"),
                 Tensor(p + "ffn_gate.weight", fd, e, True, s_e),
                 Tensor(p + "ffn_up.weight", fd, e, True, s_e),
                 Tensor(p + "ffn_down.weight", e, fd, True, s_res / math.sqrt(fd)),
                 post_norm_gemma4(norm("post_ffw_norm.weight"), spec, i, n),
                 router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
                 # the router's input is rms_norm(x) / sqrt(n_embd) · scale (ones): small logits, but
                 # top-k ranks them all the same, token by token
                 norm("ffn_gate_inp.scale"),
                 norm("pre_ffw_norm_2.weight"), norm("post_ffw_norm_1.weight"), norm("post_ffw_norm_2.weight"),
                 Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                 Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                 Tensor(p + "ffn_down_exps.weight", e, f, True, s_res / math.sqrt(f), n_expert=x, qtype=down_q),
                 norm("ffn_down_exps.scale", x)]
        out += sorted(context_attention(layer, spec, shape, i), key=lambda t: t.name)
    return out + tail


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    return gqa.default_n_layers(size_mb, arch)


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """gqa's keys plus those gemma4's loader requires (src/models/gemma4.cpp load_arch_hparams)."""
    gqa.add_metadata(writer, shape, spec, arch)
    a = arch.gguf_arch
    writer.add_array(f"{a}.attention.sliding_window_pattern",
                     [is_swa(i, shape.n_layers) for i in range(shape.n_layers)])
    writer.add_uint32(f"{a}.attention.key_length_swa", HEAD_DIM)
    writer.add_uint32(f"{a}.attention.value_length_swa", HEAD_DIM)
    writer.add_uint32(f"{a}.embedding_length_per_layer_input", 0)  # no per-layer embeddings (E2B/E4B have them)


__all__ = ["tensors", "plan", "add_metadata", "is_swa", "default_n_layers"]
