"""Synthetic qwen3next MoE files (Qwen3-Next-80B-A3B's shape): hybrid attention.

Three of every four layers are linear attention (a gated delta net: ``attn_qkv`` and ``attn_gate``
in, a causal ``ssm_conv1d``, per-value-head ``ssm_a`` / ``ssm_dt`` decay, ``ssm_ba`` for the
beta/alpha gates, ``ssm_norm``, ``ssm_out``), the fourth full attention whose ``attn_q`` also
yields an output gate (2 × heads × head dim). Every layer has the MoE FFN: 512 experts top-10 and
one shared expert gated by ``ffn_gate_inp_shexp``. llama.cpp keeps the linear layers' state in a
recurrent memory; the experts are streamed as in any other arch (picks at ``ffn_moe_topk-N``).
Tensor and key names from the llama-cpp-python 0.3.36 sources (src/models/qwen3next.cpp,
src/llama-arch.cpp); sizing, quantization, alignment, order from ``synth_gqa_moe``.
"""

from __future__ import annotations

import math

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import (
    attention_output,
    context_attention_gated,
    edge_globals,
    router_weight,
)
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

FULL_ATTENTION_INTERVAL = 4  # layers 3, 7, … attend fully (Qwen3-Next's full_attention_interval)
CONV_KERNEL = 4


def is_linear(layer: int) -> bool:
    return (layer + 1) % FULL_ATTENTION_INTERVAL != 0


def delta_net_heads(n_embd: int) -> tuple[int, int]:
    """(key heads, value heads) of HEAD_DIM: Qwen3-Next's key width = n_embd, value width = 2 n_embd."""
    n_k = max(1, n_embd // HEAD_DIM)
    return n_k, 2 * n_k


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    q, kv, s = shape.n_head * HEAD_DIM, shape.n_head_kv * HEAD_DIM, spec.shared_experts * f
    n_k, n_v = delta_net_heads(e)
    key, value = n_k * HEAD_DIM, n_v * HEAD_DIM
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."

        def vec(name, size, ones=True):  # F32: a norm (ones) or zeros (decay rates: no decay, no drift)
            return Tensor(p + name, 1, size, False, 0.0, random_f32=not ones)

        layer = [vec("attn_norm.weight", e), vec("post_attention_norm.weight", e)]
        if is_linear(i):
            layer += [Tensor(p + "attn_qkv.weight", 2 * key + value, e, True, s_e),
                      Tensor(p + "attn_gate.weight", value, e, True, s_e),
                      Tensor(p + "ssm_conv1d.weight", 2 * key + value, CONV_KERNEL, False, 0.5, random_f32=True),
                      vec("ssm_dt.bias", n_v, ones=False), Tensor(p + "ssm_a", 1, n_v, False, 0.0, random_f32=True),
                      Tensor(p + "ssm_ba.weight", 2 * n_v, e, True, s_e),
                      vec("ssm_norm.weight", HEAD_DIM),
                      attention_output(p + "ssm_out.weight", e, value, s_res / math.sqrt(value))]
        else:
            layer += [Tensor(p + "attn_q.weight", 2 * q, e, True, s_e),  # queries and their output gate
                      Tensor(p + "attn_k.weight", kv, e, True, s_e),
                      Tensor(p + "attn_v.weight", kv, e, True, s_e),
                      attention_output(p + "attn_output.weight", e, q, s_res / math.sqrt(q)),
                      vec("attn_q_norm.weight", HEAD_DIM), vec("attn_k_norm.weight", HEAD_DIM)]
        layer = context_attention_gated(layer, spec, shape, i, FULL_ATTENTION_INTERVAL - 1, arch.rope_fraction)
        layer += [router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
                  Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                  Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                  Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_res / math.sqrt(f), n_expert=x,
                          qtype=down_q),
                  Tensor(p + "ffn_gate_inp_shexp.weight", 1, e, False, s_e, random_f32=True),
                  Tensor(p + "ffn_gate_shexp.weight", s, e, True, s_e),
                  Tensor(p + "ffn_up_shexp.weight", s, e, True, s_e),
                  Tensor(p + "ffn_down_shexp.weight", e, s, True, 2.0 * s_res / math.sqrt(s))]
        out += sorted(layer, key=lambda t: t.name)
    return out + tail


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    """gqa's count rounded up to whole groups of four, so the file has full-attention layers."""
    n = gqa.default_n_layers(size_mb, arch)
    return -(-n // FULL_ATTENTION_INTERVAL) * FULL_ATTENTION_INTERVAL


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    if n_layers < FULL_ATTENTION_INTERVAL:
        # measured: llama.cpp 0.3.36 aborts the process (GGML_ASSERT(buffer), an empty KV cache) on such a file
        raise ShardscopeError(f"{where}: a qwen3next model needs at least {FULL_ATTENTION_INTERVAL} layers "
                              f"(every {FULL_ATTENTION_INTERVAL}th is the full-attention one), got {n_layers}")
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """gqa's keys plus the delta net's (src/models/qwen3next.cpp load_arch_hparams)."""
    gqa.add_metadata(writer, shape, spec, arch)
    a = arch.gguf_arch
    n_k, n_v = delta_net_heads(shape.n_embd)
    writer.add_uint32(f"{a}.expert_shared_feed_forward_length", spec.shared_experts * shape.n_ff)
    writer.add_uint32(f"{a}.ssm.conv_kernel", CONV_KERNEL)
    writer.add_uint32(f"{a}.ssm.inner_size", n_v * HEAD_DIM)
    writer.add_uint32(f"{a}.ssm.state_size", HEAD_DIM)
    writer.add_uint32(f"{a}.ssm.time_step_rank", n_v)
    writer.add_uint32(f"{a}.ssm.group_count", n_k)
    writer.add_uint32(f"{a}.full_attention_interval", FULL_ATTENTION_INTERVAL)


__all__ = ["tensors", "plan", "add_metadata", "is_linear", "default_n_layers"]
