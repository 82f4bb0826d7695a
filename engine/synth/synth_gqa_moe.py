"""Synthetic MoE files of the grouped-query-attention archs: qwen3moe, gpt-oss, glm4moe, llama4.

One writer for the four, driven by their rows in ``synth_arch_specs`` (which tensors and keys
each arch has); what differs between them is data there, not code here. Files have real files'
byte layout: 32-byte alignment (``general.alignment`` absent: GGUF's default), tensors of a
layer in name order (as conversions from safetensors give them, so dense tensors such as the
router sit between expert tensors), layers in numeric order, expert slices of Q8_0 / Q4_K / Q6_K
/ MXFP4 blocks that are not page multiples. Head dims are 64 at these sizes.
"""

from __future__ import annotations

import math

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_quant import FILE_TYPES, Q8_0, SCHEMES
from shardscope.engine.synth.synth_router_seam import (
    attention_output,
    context_attention,
    edge_globals,
    router_bias,
    router_weight,
)
from shardscope.engine.synth.synth_shapes import HEAD_DIM, MIB, SIZE_TOLERANCE, Shape, Tensor, header_bytes

ALIGNMENT = 32  # GGUF's default, what real files use
TENSORS_PER_LAYER = 24  # an upper bound, for the header estimate


def is_moe_layer(arch: ArchSpec, layer: int) -> bool:
    return layer >= arch.dense_lead and (layer + 1) % arch.moe_step == 0


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    """As the other MoE shapes (about sqrt(size)/3 MoE layers, at least 2), plus the dense ones."""
    n_moe = int(min(48, max(2, round(math.sqrt(size_mb) / 3))))
    return arch.dense_lead + n_moe * arch.moe_step


def heads(arch: ArchSpec, n_embd: int) -> tuple[int, int]:
    """(n_head, n_head_kv) of 64-wide heads at the arch's attention width and grouping."""
    n_kv = max(1, round(arch.q_ratio * n_embd / HEAD_DIM / arch.kv_group))
    return n_kv * arch.kv_group, n_kv


def dense_ff(arch: ArchSpec, n_embd: int) -> int:
    return max(32, int(round(arch.dense_ff_ratio * n_embd / 32)) * 32)


def align_up(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    q, kv = shape.n_head * HEAD_DIM, shape.n_head_kv * HEAD_DIM
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    fd, s = dense_ff(arch, e), spec.shared_experts * f
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."

        def vec(name, size, sigma=0.0):  # F32: a norm (ones) or, with sigma, random biases
            return Tensor(p + name, 1, size, False, sigma, random_f32=sigma > 0)

        layer = [vec("attn_norm.weight", e),
                 Tensor(p + "attn_q.weight", q, e, True, s_e),
                 Tensor(p + "attn_k.weight", kv, e, True, s_e),
                 Tensor(p + "attn_v.weight", kv, e, True, s_e),
                 attention_output(p + "attn_output.weight", e, q, s_res / math.sqrt(q)),
                 vec("post_attention_norm.weight" if arch.post_attn_norm else "ffn_norm.weight", e)]
        if arch.attn_bias:
            layer += [vec("attn_q.bias", q, 0.02), vec("attn_k.bias", kv, 0.02), vec("attn_v.bias", kv, 0.02)]
        if arch.out_bias:
            layer.append(vec("attn_output.bias", e, 0.02))
        if arch.qk_norm:
            layer += [vec("attn_q_norm.weight", HEAD_DIM), vec("attn_k_norm.weight", HEAD_DIM)]
        if arch.sinks:
            layer.append(vec("attn_sinks.weight", shape.n_head, 0.5))
        layer = context_attention(layer, spec, shape, i, arch.rope_fraction)
        if not is_moe_layer(arch, i):
            layer += [Tensor(p + "ffn_gate.weight", fd, e, True, s_e), Tensor(p + "ffn_up.weight", fd, e, True, s_e),
                      Tensor(p + "ffn_down.weight", e, fd, True, 2.0 * s_res / math.sqrt(fd))]
        else:
            layer.append(router_weight(p + "ffn_gate_inp.weight", spec, i, e, n))
            if arch.router_bias == "exp_probs_b":
                layer.append(router_bias(p + "exp_probs_b.bias", spec, i, n))
            elif arch.router_bias == "gate_inp":
                layer.append(router_bias(p + "ffn_gate_inp.bias", spec, i, n))
            layer += [Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_res / math.sqrt(f), n_expert=x,
                              qtype=down_q)]
            if arch.expert_biases:  # F32 [width, n_expert]: dense bytes, resident, never streamed
                layer += [Tensor(p + "ffn_gate_exps.bias", x, f, False, 0.02, random_f32=True),
                          Tensor(p + "ffn_up_exps.bias", x, f, False, 0.02, random_f32=True),
                          Tensor(p + "ffn_down_exps.bias", x, e, False, 0.02, random_f32=True)]
            if s:
                layer += [Tensor(p + "ffn_gate_shexp.weight", s, e, True, s_e),
                          Tensor(p + "ffn_up_shexp.weight", s, e, True, s_e),
                          Tensor(p + "ffn_down_shexp.weight", e, s, True, 2.0 * s_res / math.sqrt(s))]
        out += sorted(layer, key=lambda t: t.name)
    return out + tail


def _total(shape: Shape, spec, arch: ArchSpec, vocab, build=None) -> int:
    fixed = header_bytes(shape.n_layers, vocab, TENSORS_PER_LAYER)
    return fixed + sum(align_up(t.nbytes) for t in (build or tensors)(shape, spec, arch, vocab.n_vocab))


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str, build=None,
         heads_of=None) -> Shape:
    """n_embd and the expert width that hit the size, the width nearest the real model's ratio.
    ``build``: the arch's tensor list (default this module's; synth_gemma4 passes its own);
    ``heads_of(arch, n_embd)``: its (n_head, n_head_kv) where they are not ``heads``'."""
    if n_layers < arch.min_layers:
        raise ShardscopeError(f"{where}: a {arch.name} model needs at least {arch.min_layers} layers "
                              f"({arch.min_layers_why}), got {n_layers}")
    if n_layers <= arch.dense_lead or not any(is_moe_layer(arch, i) for i in range(n_layers)):
        raise ShardscopeError(f"{where}: a {arch.name} model of {plural(n_layers, 'layer')} has no MoE layer "
                              f"(the first {arch.dense_lead} are dense, then every {arch.moe_step}. is MoE)")
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    e_step = math.lcm(64, gate_q.block, Q8_0.block)
    f_step = math.lcm(32, gate_q.block, down_q.block)
    target = int(size_mb * MIB)
    best, best_key = None, None
    for e in range(e_step, 8192 + 1, e_step):
        n_head, n_kv = (heads_of or heads)(arch, e)
        t1 = _total(Shape(n_layers, e, f_step, n_head, n_kv), spec, arch, vocab, build)
        t2 = _total(Shape(n_layers, e, 2 * f_step, n_head, n_kv), spec, arch, vocab, build)
        if t1 > target * (1 + SIZE_TOLERANCE):
            break
        f = max(f_step, int(round((f_step + (target - t1) * f_step / (t2 - t1)) / f_step)) * f_step)
        shape = Shape(n_layers, e, f, n_head, n_kv)
        if abs(_total(shape, spec, arch, vocab, build) - target) > SIZE_TOLERANCE * target:
            continue
        key = abs(math.log(f / (arch.expert_ff_ratio * e)))
        if best_key is None or key < best_key:
            best, best_key = shape, key
    if best is None:
        raise ShardscopeError(
            f"{where}: cannot make a {size_mb:g} MB {arch.name} model with {plural(n_layers, 'layer')} of "
            f"{spec.experts} experts within {SIZE_TOLERANCE:.0%}; ask for a larger size, fewer layers or fewer experts")
    return best


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """The keys llama.cpp's loader reads for the arch (names from src/llama-arch.cpp)."""
    a = arch.gguf_arch
    writer.add_uint32(f"{a}.feed_forward_length", dense_ff(arch, shape.n_embd))
    writer.add_uint32(f"{a}.expert_feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", shape.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", shape.n_head_kv)
    writer.add_uint32(f"{a}.attention.key_length", HEAD_DIM)
    writer.add_uint32(f"{a}.attention.value_length", HEAD_DIM)
    writer.add_uint32(f"{a}.rope.dimension_count", int(HEAD_DIM * arch.rope_fraction))
    writer.add_uint32(f"{a}.expert_count", spec.experts)
    writer.add_uint32(f"{a}.expert_used_count", spec.experts_used)
    if arch.shared_experts or spec.shared_experts:
        writer.add_uint32(f"{a}.expert_shared_count", spec.shared_experts)
    if arch.dense_lead:
        writer.add_uint32(f"{a}.leading_dense_block_count", arch.dense_lead)
    if arch.moe_step > 1 or a == "llama4":
        writer.add_uint32(f"{a}.interleave_moe_layer_step", arch.moe_step)
    if arch.sliding_window:
        writer.add_uint32(f"{a}.attention.sliding_window", arch.sliding_window)
    if arch.gating:
        writer.add_uint32(f"{a}.expert_gating_func", arch.gating)
    if arch.weights_norm:
        writer.add_bool(f"{a}.expert_weights_norm", True)
    if arch.weights_scale:
        writer.add_float32(f"{a}.expert_weights_scale", arch.weights_scale)


def file_type(spec, arch: ArchSpec) -> int:
    return FILE_TYPES[spec.quant or arch.quant]


__all__ = ["ALIGNMENT", "plan", "tensors", "add_metadata", "default_n_layers", "is_moe_layer", "file_type"]
