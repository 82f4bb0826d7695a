"""Kimi- and DeepSeek-V3-shaped synthetic models: llama.cpp's ``deepseek2`` architecture at small scale.

``--arch kimi-k2`` and ``--arch deepseek3`` are rows of ``synth_arch_specs`` (this llama.cpp has no
arch of either name: both run as deepseek2). DeepSeek-V3 differs from Kimi K2 where the graph
sees it: 256 experts routed in 8 groups (the best 4 groups by their top-2 scores, then top-8 of
those: ``expert_group_count`` / ``expert_group_used_count``), 3 leading dense layers, a routed
scale of 2.5. Without shared experts llama.cpp does not load a deepseek2 file: refused first.

Kimi K2 (and DeepSeek-V3) run in llama.cpp as ``deepseek2``; the 1.56 TB case the
README sizes is of that shape, so the engine must stream one, not only Mixtral-style
files. What makes the shape, and what this writes:

- MLA attention (low-rank Q and a compressed KV latent), in the tensor form recent
  llama.cpp reads: ``attn_q_a`` [n_embd → q_lora], ``attn_q_a_norm``, ``attn_q_b``
  [q_lora → n_head·(nope+rope)], ``attn_kv_a_mqa`` [n_embd → kv_lora+rope],
  ``attn_kv_a_norm``, ``attn_k_b`` (ne [nope, kv_lora, n_head]), ``attn_v_b``
  (ne [kv_lora, v, n_head]), ``attn_output`` [n_head·v → n_embd];
- the first ``leading_dense_block_count`` layers have a dense FFN (Kimi: 1);
- the other layers: router ``ffn_gate_inp`` (F32) with a per-expert bias
  ``exp_probs_b.bias`` (Kimi's load-balancing bias, added to the sigmoid scores
  before top-k), shared experts ``ffn_*_shexp`` and routed experts ``ffn_*_exps``;
- a sigmoid router (``expert_gating_func`` = 2), the picked weights normalised
  (``expert_weights_norm``) and scaled (``expert_weights_scale``, Kimi K2: 2.827).

Kimi K2's ratios (config.json of moonshotai/Kimi-K2-Instruct): 384 routed experts,
8 used, 1 shared, 61 layers of which the first is dense, n_embd 7168, expert FFN 2048
(0.286 n_embd), dense FFN 18432 (2.57 n_embd), q_lora 1536, kv_lora 512, rope 64.
At a few hundred MB the same ratios give narrow matrices; head dims are kept at 64.

The llama.cpp keys read for this arch (``load_hparams``) that have no default make it
throw or abort when missing; ``engine.layout.moe_layout`` refuses such files first.
"""

from __future__ import annotations

import math

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import (
    attention_output,
    context_mla,
    edge_globals,
    router_bias,
    router_weight,
)
from shardscope.engine.synth.synth_shapes import (
    MIB,
    Q8_BLOCK,
    Q8_BYTES,
    SIZE_TOLERANCE,
    Shape,
    Tensor,
    align_up,
    global_bytes,
    header_bytes,
    q8,
)

ARCH = "deepseek2"
GATING_SIGMOID = 2  # LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
KIMI_K2 = {"experts": 384, "experts_used": 8, "shared_experts": 1}
NOPE = ROPE = V_HEAD = 64  # per-head dims (Kimi: 128 / 64 / 128), 64 keeps small models valid
_PAGE = 4096


def tensors_per_layer(spec) -> int:
    return 18 if spec.shared_experts else 15


def default_n_layers(size_mb: float, row) -> int:
    """As the other MoE shapes (sqrt(size)/3), plus the dense leading layers; never 26 or 27
    (llama.cpp takes those depths for DeepSeek-V2-Lite, which has no q_lora)."""
    n = int(min(64, max(2 + row.dense_lead, round(math.sqrt(size_mb) / 3) + row.dense_lead)))
    return 28 if n in (26, 27) else n


def mla_dims(n_embd: int) -> tuple[int, int, int]:
    """(n_head, q_lora, kv_lora) at Kimi's ratios, multiples of 32 (Q8_0 rows need that)."""
    n_head = max(1, n_embd // 128)
    q_lora = max(64, int(round(n_embd * 1536 / 7168 / 32)) * 32)
    kv_lora = max(64, int(round(n_embd * 512 / 7168 / 32)) * 32)
    return n_head, q_lora, kv_lora


def dense_ff(n_embd: int, row) -> int:
    return max(32, int(round(n_embd * row.dense_ff_ratio / 32)) * 32)


def _attention_bytes(e: int) -> int:
    h, q, kv = mla_dims(e)
    return (2 * align_up(4 * e) + align_up(4 * q) + align_up(4 * kv) + align_up(q8(q, e))
            + align_up(q8(h * (NOPE + ROPE), q)) + align_up(q8(kv + ROPE, e)) + align_up(4 * h * kv * NOPE)
            + align_up(4 * h * kv * V_HEAD) + align_up(q8(e, h * V_HEAD)))


def _expert_types(spec):
    """(gate/up, down) block formats of the routed experts: --quant's scheme (q8_0 unless told)."""
    return SCHEMES[spec.quant or "q8_0"]


def _moe_layer_bytes(e: int, f: int, spec) -> int:
    x, s = spec.experts, spec.shared_experts * f
    gate_q, down_q = _expert_types(spec)
    shared = 3 * align_up(q8(s, e)) if s else 0
    routed = 2 * align_up(x * f * gate_q.row_bytes(e)) + align_up(x * e * down_q.row_bytes(f))
    return _attention_bytes(e) + align_up(4 * x * e) + align_up(4 * x) + shared + routed


def _dense_layer_bytes(e: int, row) -> int:
    return _attention_bytes(e) + 3 * align_up(q8(dense_ff(e, row), e))


def _ff_base(spec) -> int:
    """n_ff steps every format takes: Q8_0's 32 (shared experts) and the down experts' block."""
    return math.lcm(Q8_BLOCK, _expert_types(spec)[1].block)


def _ff_step(e: int, spec) -> int:
    """Smallest n_ff step that keeps one expert's gate/up and down slices whole 4 KiB pages."""
    gate_q, down_q = _expert_types(spec)
    base = _ff_base(spec)
    for k in range(1, _PAGE + 1):
        f = k * base
        if (f * gate_q.row_bytes(e)) % _PAGE == 0 and (e * down_q.row_bytes(f)) % _PAGE == 0:
            return f
    return base


def plan(size_mb: float, n_layers: int, spec, row, vocab, where: str) -> Shape:
    """n_embd and the expert n_ff that hit the size, n_ff near the model's ratio (Kimi: 0.286 n_embd)."""
    lead = row.dense_lead
    if n_layers <= lead:
        raise ShardscopeError(f"{where}: a {row.name} model needs more than {lead} layer(s) "
                              f"(the first {lead} are dense), got {n_layers}")
    if n_layers in (26, 27):  # read as DeepSeek-V2-Lite (no q_lora); measured: "blk.0.attn_q.weight not found"
        raise ShardscopeError(f"{where}: a {row.name} model of {n_layers} layers is read by llama.cpp as "
                              f"DeepSeek-V2-Lite (no q_lora) and does not load; ask for another layer count")
    target = int(size_mb * MIB)
    fixed = header_bytes(n_layers, vocab, tensors_per_layer(spec))
    best, best_key = None, None
    gate_q, down_q = _expert_types(spec)
    e_step = math.lcm(64, gate_q.block)  # gate/up blocks run along n_embd
    for aligned in (True, False):
        for e in range(max(128, e_step), 8192 + 1, e_step):
            base = fixed + global_bytes(e, vocab.n_vocab) + lead * _dense_layer_bytes(e, row)
            n_moe = n_layers - lead
            per_f = (3 * spec.shared_experts * Q8_BYTES / Q8_BLOCK + spec.experts * (
                2 * gate_q.bytes / gate_q.block + down_q.bytes / down_q.block)) * e
            f_lin = ((target - base) / n_moe - _moe_layer_bytes(e, 0, spec)) / per_f
            step = _ff_step(e, spec) if aligned else _ff_base(spec)
            f = max(step, int(round(f_lin / step)) * step)
            total = base + n_moe * _moe_layer_bytes(e, f, spec)
            if abs(total - target) > SIZE_TOLERANCE * target:
                continue
            # A page-aligned shape wins unless it is over 2x off Kimi's width ratio.
            key = abs(math.log(f / (row.expert_ff_ratio * e))) + (0 if aligned else math.log(2))
            if best_key is None or key < best_key:
                h, _, _ = mla_dims(e)
                best, best_key = Shape(n_layers, e, f, h, 1), key
    if best is None:
        raise ShardscopeError(
            f"{where}: cannot make a {size_mb:g} MB {row.name} model with {plural(n_layers, 'layer')} of "
            f"{spec.experts} experts within {SIZE_TOLERANCE:.0%}; ask for a larger size or fewer layers")
    return best


def tensors(shape: Shape, spec, row, n_vocab: int) -> list[Tensor]:
    e, f, n, x = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts
    h, q, kv = mla_dims(e)
    fd = dense_ff(e, row)
    s_e, s_res = 1.0 / math.sqrt(e), 1.0 / math.sqrt(2.0 * n)
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."
        attention = [
            Tensor(p + "attn_norm.weight", 1, e, False, 0.0),
            Tensor(p + "attn_q_a.weight", q, e, True, s_e),
            Tensor(p + "attn_q_a_norm.weight", 1, q, False, 0.0),
            Tensor(p + "attn_q_b.weight", h * (NOPE + ROPE), q, True, 1.0 / math.sqrt(q)),
            Tensor(p + "attn_kv_a_mqa.weight", kv + ROPE, e, True, s_e),
            Tensor(p + "attn_kv_a_norm.weight", 1, kv, False, 0.0),
            # ne [nope, kv_lora, n_head] and [kv_lora, v, n_head]: one matrix per head.
            Tensor(p + "attn_k_b.weight", kv, NOPE, False, 1.0 / math.sqrt(NOPE), n_expert=h, random_f32=True),
            Tensor(p + "attn_v_b.weight", V_HEAD, kv, False, 1.0 / math.sqrt(kv), n_expert=h, random_f32=True),
            attention_output(p + "attn_output.weight", e, h * V_HEAD, s_res / math.sqrt(h * V_HEAD)),
            Tensor(p + "ffn_norm.weight", 1, e, False, 0.0),
        ]
        out += context_mla(attention, spec, (e, h, q, kv, NOPE, ROPE, V_HEAD, n), i)
        if i < row.dense_lead:
            out += [
                Tensor(p + "ffn_gate.weight", fd, e, True, s_e),
                Tensor(p + "ffn_up.weight", fd, e, True, s_e),
                Tensor(p + "ffn_down.weight", e, fd, True, 2.0 * s_res / math.sqrt(fd)),
            ]
            continue
        out += [
            router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
            router_bias(p + "exp_probs_b.bias", spec, i, n),
        ]
        if spec.shared_experts:
            s = spec.shared_experts * f
            out += [
                Tensor(p + "ffn_gate_shexp.weight", s, e, True, s_e),
                Tensor(p + "ffn_up_shexp.weight", s, e, True, s_e),
                Tensor(p + "ffn_down_shexp.weight", e, s, True, 2.0 * s_res / math.sqrt(s)),
            ]
        # The routed output is scaled by weights_scale after the normalised weights: undo it here.
        gate_q, down_q = _expert_types(spec)
        out += [
            Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
            Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
            Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_res / math.sqrt(f) / row.weights_scale,
                    n_expert=x, qtype=down_q),
        ]
    return out + tail


def add_metadata(writer, shape: Shape, spec, row) -> None:
    """The deepseek2 hparams llama.cpp reads (names as convert_hf_to_gguf.py writes them)."""
    h, q, kv = mla_dims(shape.n_embd)
    writer.add_feed_forward_length(dense_ff(shape.n_embd, row))
    writer.add_head_count(h)
    writer.add_head_count_kv(1)  # MLA in its absorbed form is one shared latent "head"
    writer.add_rope_dimension_count(ROPE)
    writer.add_leading_dense_block_count(row.dense_lead)
    writer.add_q_lora_rank(q)
    writer.add_kv_lora_rank(kv)
    writer.add_key_length(kv + ROPE)
    writer.add_value_length(kv)
    writer.add_key_length_mla(NOPE + ROPE)
    writer.add_value_length_mla(V_HEAD)
    writer.add_expert_feed_forward_length(shape.n_ff)
    writer.add_expert_count(spec.experts)
    writer.add_expert_used_count(spec.experts_used)
    writer.add_expert_shared_count(spec.shared_experts)
    writer.add_expert_weights_scale(row.weights_scale)
    if row.expert_groups[0]:  # DeepSeek-V3: top-k groups by their best two scores, then top-k experts
        writer.add_expert_group_count(row.expert_groups[0])
        writer.add_expert_group_used_count(row.expert_groups[1])
    writer.add_expert_weights_norm(True)
    import gguf  # only the writer needs it

    writer.add_expert_gating_func(gguf.ExpertGatingFuncType(GATING_SIGMOID))


__all__ = ["ARCH", "KIMI_K2", "plan", "tensors", "add_metadata", "default_n_layers", "tensors_per_layer"]
