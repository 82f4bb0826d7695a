"""Synthetic Kimi K3 files: llama.cpp's own ``kimi-k3`` architecture at small scale.

Kimi K3 is the headline's model (2.78 T parameters, 1.56 TB), and three things in its file are new
to a streamer (tensor and key names from llama-cpp-python 0.3.36's src/models/kimi-k3.cpp,
src/llama-arch.cpp and conversion/kimi_k3.py; the installed libllama loads and runs every file):

- **Two layer kinds.** KDA layers (Kimi Delta Attention: recurrent, a head_dim × head_dim state per
  head, marked by ``attention.head_count_kv`` = 0 for the layer) hold ``attn_q/k/v``, per-input causal
  convolutions ``ssm_conv1d_{q,k,v}``, the decay gate ``ssm_f_a``/``ssm_f_b`` + ``ssm_dt.bias`` +
  ``ssm_a``, ``ssm_beta``, the full-rank output gate ``ssm_g``, ``ssm_norm`` and ``attn_output``;
  gated MLA layers (every 4th and the last, ``head_count_kv`` = 1: MLA served as MQA over the
  latent) hold deepseek2's MLA tensors (absorbed ``attn_k_b``/``attn_v_b``), NoPE, plus the sigmoid
  output gate ``attn_gate``. llama.cpp keeps the KDA state in its recurrent memory and the MLA
  latent in a K-only cache.
- **A latent MoE.** Layer 0 is a dense SiTU MLP; every other layer projects the token down
  (``ffn_routed_down``, n_embd → ``expert_latent_length``), runs the routed experts there (so
  ``ffn_{gate,up,down}_exps`` are latent wide, not n_embd), RMS-norms the sum (``ffn_routed_norm``)
  and projects it back (``ffn_routed_up``); the router (F32, + ``exp_probs_b``) reads the full-width
  token, the two shared experts too (one MLP of 2 × the expert width).
- **Cross-layer residual attention** (AttnRes): checkpoints banked every ``attn_res.block_size`` layers,
  mixed by ``attn_res_score``/``ffn_res_score`` (written as zeros: an even mix) and ``output_res_score``.

Routed experts are MXFP4 unless told (K3 is trained so); q4_k_m and q8_0 are written too. The real
shape's ratios are kept (latent = n_embd / 2, expert width 3072/7168 n_embd, 96 heads × 128 as
1.71 n_embd of 64-wide heads, q_lora 1536, kv_lora 512 per 7168), head dims 64 at these sizes.
Routing: NoPE leaves no position for synth_router's context head, so ``real`` is popularity + the
token part, ``flat`` the token part alone (K3's router is trained flat); sizing, alignment (32) and
tensor order (name order within a layer) are synth_gqa_moe's, whose planner is given this list.
"""

from __future__ import annotations

import math

from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import attention_output, edge_globals, router_bias, router_weight
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

MLA_INTERVAL = 4  # layers 3, 7, … (and the last) are gated MLA, the rest KDA (3 KDA : 1 MLA)
CONV_KERNEL = 4
NOPE = ROPE = V_HEAD = HEAD_DIM  # per-head MLA dims (K3: 128 / 64 / 128); rope only sizes K (NoPE)
KDA_HEAD = HEAD_DIM  # kda.head_dim (K3: 128)
GATE_LOWER_BOUND = -5.0  # kda.gate_lower_bound: K3's decay-gate activation
SITU_BETA, SITU_LINEAR_BETA = 4.0, 25.0
RES_BLOCK = 4  # attn_res.block_size (K3: 12 of 93 layers; 4 so a file of 8 banks twice)
TENSORS_PER_LAYER = 32  # an upper bound, for the header estimate


def is_kda(layer: int, n_layers: int) -> bool:
    """A KDA (recurrent) layer; every MLA_INTERVAL-th and the last are gated MLA (K3: 69 and 24 of 93)."""
    return (layer + 1) % MLA_INTERVAL != 0 and layer != n_layers - 1


def latent_width(n_embd: int, arch: ArchSpec, block: int) -> int:
    """expert_latent_length: latent_ratio · n_embd in whole blocks of the experts' format."""
    return max(block, int(round(n_embd * arch.latent_ratio / block)) * block)


def mla_dims(n_embd: int) -> tuple[int, int]:
    """(q_lora, kv_lora) at K3's 1536 and 512 per 7168, multiples of 32 (Q8_0 rows)."""
    return (max(64, int(round(n_embd * 1536 / 7168 / 32)) * 32), max(64, int(round(n_embd * 512 / 7168 / 32)) * 32))


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    """gqa's count, at least 8: two MLA layers (3 and 7) among six KDA ones."""
    return max(2 * MLA_INTERVAL, gqa.default_n_layers(size_mb, arch))


def dims(shape: Shape, spec, arch: ArchSpec) -> dict:
    """Widths besides the shape's: the published model's (``shape.dims``, engine/synth/synth_published.py),
    else K3's ratios at this n_embd with 64-wide heads."""
    own = getattr(shape, "dims", None)
    if own:
        return dict(own)
    e = shape.n_embd
    gate_q, _ = SCHEMES[spec.quant or arch.quant]
    q_lora, kv_lora = mla_dims(e)
    return dict(latent=latent_width(e, arch, gate_q.block), q_lora=q_lora, kv_lora=kv_lora, nope=NOPE, rope=ROPE,
                v_head=V_HEAD, kda_head=KDA_HEAD, dense_ff=gqa.dense_ff(arch, e), res_block=RES_BLOCK)


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x, h = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts, shape.n_head
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    d = dims(shape, spec, arch)
    lat, q_lora, kv_lora, KDA_HEAD, NOPE, ROPE, V_HEAD = (d[k] for k in (
        "latent", "q_lora", "kv_lora", "kda_head", "nope", "rope", "v_head"))
    d_inner = h * KDA_HEAD
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    fd, s = d["dense_ff"], spec.shared_experts * f
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."

        def vec(name, size, ones=True):  # F32: a norm (ones) or zeros (scores: an even mix; decay terms)
            return Tensor(p + name, 1, size, False, 0.0, random_f32=not ones)

        def mat(name, rows, cols, sigma):
            return Tensor(p + name, rows, cols, True, sigma)

        layer = [vec("attn_norm.weight", e), vec("ffn_norm.weight", e),
                 vec("attn_res_score.weight", e, ones=False), vec("ffn_res_score.weight", e, ones=False)]
        if is_kda(i, n):
            # conv1d ne [d_conv, 1, d_inner]: one [1, d_conv] row per channel
            layer += [Tensor(p + f"ssm_conv1d_{c}.weight", 1, CONV_KERNEL, False, 0.5, n_expert=d_inner,
                              random_f32=True) for c in "qkv"]
            layer += [mat("attn_q.weight", d_inner, e, s_e), mat("attn_k.weight", d_inner, e, s_e),
                      mat("attn_v.weight", d_inner, e, s_e),
                      mat("ssm_f_a.weight", KDA_HEAD, e, s_e),
                      mat("ssm_f_b.weight", d_inner, KDA_HEAD, KDA_HEAD ** -0.5),
                      mat("ssm_beta.weight", h, e, s_e), mat("ssm_g.weight", d_inner, e, s_e),
                      Tensor(p + "ssm_a", 1, h, False, 0.0, random_f32=True), vec("ssm_dt.bias", d_inner, ones=False),
                      vec("ssm_norm.weight", KDA_HEAD),
                      attention_output(p + "attn_output.weight", e, d_inner, s_res / math.sqrt(d_inner))]
        else:
            layer += [mat("attn_q_a.weight", q_lora, e, s_e), vec("attn_q_a_norm.weight", q_lora),
                      mat("attn_q_b.weight", h * (NOPE + ROPE), q_lora, q_lora ** -0.5),
                      mat("attn_kv_a_mqa.weight", kv_lora + ROPE, e, s_e), vec("attn_kv_a_norm.weight", kv_lora),
                      # ne [nope, kv_lora, n_head] and [kv_lora, v, n_head]: one matrix per head
                      Tensor(p + "attn_k_b.weight", kv_lora, NOPE, False, NOPE ** -0.5, n_expert=h, random_f32=True),
                      Tensor(p + "attn_v_b.weight", V_HEAD, kv_lora, False, kv_lora ** -0.5, n_expert=h,
                              random_f32=True),
                      mat("attn_gate.weight", h * V_HEAD, e, s_e),
                      attention_output(p + "attn_output.weight", e, h * V_HEAD, 2.0 * s_res / math.sqrt(h * V_HEAD))]
        if i < arch.dense_lead:
            layer += [mat("ffn_gate.weight", fd, e, s_e), mat("ffn_up.weight", fd, e, s_e),
                      mat("ffn_down.weight", e, fd, 2.0 * s_res / math.sqrt(fd))]
        else:
            # the routed sum is RMS-normed before ffn_routed_up: its scale is set there, not in the experts
            layer += [router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
                      router_bias(p + "exp_probs_b.bias", spec, i, n),
                      mat("ffn_routed_down.weight", lat, e, s_e), vec("ffn_routed_norm.weight", lat),
                      mat("ffn_routed_up.weight", e, lat, 2.0 * s_res / math.sqrt(lat)),
                      Tensor(p + "ffn_gate_exps.weight", f, lat, True, lat ** -0.5, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_up_exps.weight", f, lat, True, lat ** -0.5, n_expert=x, qtype=gate_q),
                      Tensor(p + "ffn_down_exps.weight", lat, f, True, f ** -0.5, n_expert=x, qtype=down_q),
                      mat("ffn_gate_shexp.weight", s, e, s_e), mat("ffn_up_shexp.weight", s, e, s_e),
                      mat("ffn_down_shexp.weight", e, s, 2.0 * s_res / math.sqrt(s))]
        out += sorted(layer, key=lambda t: t.name)
    return out + [Tensor("output_res_score.weight", 1, e, False, 0.0, random_f32=True)] + tail


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def add_kda_moe_keys(writer, a: str, spec, arch: ArchSpec, kda_head: int) -> None:
    """The KDA layers' and the routed experts' keys, as kimi-k3 and glm5-next (KDA beside MLA) both write them."""
    writer.add_uint32(f"{a}.ssm.conv_kernel", CONV_KERNEL)
    writer.add_uint32(f"{a}.kda.head_dim", kda_head)
    writer.add_float32(f"{a}.kda.gate_lower_bound", GATE_LOWER_BOUND)
    writer.add_uint32(f"{a}.expert_count", spec.experts)
    writer.add_uint32(f"{a}.expert_used_count", spec.experts_used)
    writer.add_uint32(f"{a}.expert_shared_count", spec.shared_experts)
    writer.add_uint32(f"{a}.leading_dense_block_count", arch.dense_lead)
    writer.add_float32(f"{a}.expert_weights_scale", arch.weights_scale)
    writer.add_bool(f"{a}.expert_weights_norm", arch.weights_norm)
    writer.add_uint32(f"{a}.expert_gating_func", arch.gating)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """The keys src/models/kimi-k3.cpp load_arch_hparams reads (and the common ones it relies on)."""
    a = arch.gguf_arch
    n = shape.n_layers
    d = dims(shape, spec, arch)
    q_lora, kv_lora, NOPE, ROPE, V_HEAD, KDA_HEAD = (d[k] for k in ("q_lora", "kv_lora", "nope", "rope", "v_head",
                                                                     "kda_head"))
    writer.add_uint32(f"{a}.feed_forward_length", d["dense_ff"])
    writer.add_uint32(f"{a}.expert_feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{a}.expert_latent_length", d["latent"])
    writer.add_uint32(f"{a}.attention.head_count", shape.n_head)
    # 0 marks a KDA layer; an MLA layer is one latent "head" (MQA)
    writer.add_array(f"{a}.attention.head_count_kv", [0 if is_kda(i, n) else 1 for i in range(n)])
    writer.add_uint32(f"{a}.attention.key_length", kv_lora + ROPE)
    writer.add_uint32(f"{a}.attention.value_length", kv_lora)
    writer.add_uint32(f"{a}.attention.key_length_mla", NOPE + ROPE)
    writer.add_uint32(f"{a}.attention.value_length_mla", V_HEAD)
    writer.add_uint32(f"{a}.attention.q_lora_rank", q_lora)
    writer.add_uint32(f"{a}.attention.kv_lora_rank", kv_lora)
    writer.add_uint32(f"{a}.rope.dimension_count", ROPE)
    add_kda_moe_keys(writer, a, spec, arch, KDA_HEAD)
    writer.add_uint32(f"{a}.attn_res.block_size", d["res_block"])
    writer.add_float32(f"{a}.activation.situ_beta", SITU_BETA)
    writer.add_float32(f"{a}.activation.situ_linear_beta", SITU_LINEAR_BETA)


__all__ = ["tensors", "plan", "add_metadata", "is_kda", "add_kda_moe_keys", "latent_width", "default_n_layers",
           "TENSORS_PER_LAYER"]
