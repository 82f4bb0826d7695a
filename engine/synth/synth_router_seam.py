"""The weights that decide routing, as every synthetic MoE writer obtains them.

Which experts a token picks depends on a layer's router, its router bias (where the arch has one)
and, through the hidden state, on the token embedding and the attention that writes into it.
Every arch writer (synth_moe, synth_deepseek2, synth_gqa_moe, synth_gemma4, synth_qwen3next) asks
these functions for those tensors, so the choice of router is made here, once, for every arch:

- ``spec.routing == "real"`` (the default): engine/synth/synth_router.py's router (popularity
  growing with depth, a recency-weighted context written by layer 0's attention head 0, a token
  part); its module docstring is the contract.
- ``"flat"``: the same without the popularity term and with zero router biases: every expert's expected
  share is equal (a router trained flat, as Kimi K3's quantile balancing trains it), reuse kept.
- ``"uniform"``: random F32 router rows (optionally skewed per ``MoeSpec.routing_skew``), a small
  random bias, random attention.

Where the context head goes, per attention kind (``context_attention`` / ``context_mla``):
- standard GQA (llama, qwen2moe, qwen3moe, gpt-oss, glm4moe, llama4, gemma4): layer 0's q/k/v/o.
  Q/K norms (qwen3moe, gemma4) leave the head's query and key the same constant vectors, only
  the kernel's scale changes; gemma4 scores without 1/sqrt(head_dim), which its writer undoes in
  layer 0's Q/K norm weights (``QK_NORM_GEMMA4``); its graph also scales embeddings by
  sqrt(n_embd) and RMS-normalises every attention and FFN output before the residual add
  (``embedding(scale=)``, ``post_norm_gemma4``). Sliding windows (gpt-oss 128, gemma4 1024) only
  cut the tail of a recency average. glm4moe's half-rotary head reads the constant block in its
  rotated dims only (``context_attention(rope_fraction=)``).
- MLA (kimi-k2, deepseek3, deepseek2): layer 0's MLA head in the same form (synth_router.context_mla).
- qwen3next: its layer 0 is linear attention (a gated delta net, no softmax over positions), so
  the head is its first full-attention layer's (3, ``context_attention_gated``): routers of
  layers 0–2 get popularity + token part only.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from shardscope.engine.synth import synth_router
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Tensor, edge_tensors

BIAS_SIGMA = 0.02  # a router bias: small next to the unit-scale logits, as a trained one is
# gemma4 scores q·k without 1/sqrt(head_dim) and RMS-normalises q and k per head: layer 0's Q/K
# norm weight w makes the context head's per-pair score 2·w², so w = sqrt(KERNEL_S / 2) gives the
# kernel synth_router is calibrated for.
QK_NORM_GEMMA4 = (synth_router.KERNEL_S / 2.0) ** 0.5


def is_real(spec) -> bool:
    """real or flat: both write the context head and the embedding's blocks (flat only drops popularity)."""
    return getattr(spec, "routing", "real") in ("real", "flat")


def is_flat(spec) -> bool:
    return getattr(spec, "routing", "real") == "flat"


def router_scale(spec, layer: int) -> tuple[float, ...]:
    """Per-expert router row scales: the first max(2, n/8) experts (rotated per layer) win more
    often by up to 1 + routing_skew; () leaves the rows as they are."""
    if spec.routing_skew <= 0:
        return ()
    n_hot = max(2, spec.experts // 8)
    scale = [1.0] * spec.experts
    for rank in range(n_hot):
        scale[(layer * n_hot + rank) % spec.experts] = 1.0 + spec.routing_skew * (n_hot - rank) / n_hot
    return tuple(scale)


def embedding(t: Tensor, spec, scale: float = 1.0) -> Tensor:
    """``token_embd``: with the constant block (popularity) and an empty context block under real.
    ``scale``: gemma4's graph multiplies embeddings by sqrt(n_embd); its writer passes the inverse so
    the residual stream holds the blocks at the scales synth_router is calibrated for."""
    if not is_real(spec):
        return t
    real = synth_router.real_embedding(t)
    if scale == 1.0:
        return real
    return replace(real, fill=lambda rng: real.fill(rng) * scale)


def edge_globals(n_vocab: int, n_embd: int, spec, embed_scale: float = 1.0) -> tuple[list[Tensor], list[Tensor]]:
    """The globals before the first layer and after the last (synth_shapes.edge_tensors) as every
    MoE writer needs them: the token embedding and the output head of ``embedding`` and
    ``output_head`` (real routing's blocks and the successor head, or random ones)."""
    head, tail = edge_tensors(n_vocab, n_embd)
    return [embedding(head[0], spec, scale=embed_scale)], output_head(tail, spec)


def output_head(tail: list[Tensor], spec) -> list[Tensor]:
    """The globals after the last layer, ``output.weight`` with the successor pull under real
    routing (the text does not fall into short loops that would make routing periodic)."""
    if not is_real(spec):
        return tail
    return [synth_router.real_output(t) if t.name == "output.weight" else t for t in tail]


def router_weight(name: str, spec, layer: int, n_embd: int, n_layers: int) -> Tensor:
    """The router ``ffn_gate_inp.weight`` (F32, ne [n_embd, n_expert]). uniform: logits of unit
    scale, so picks depend on the token, not on noise; the skew's row scales apply to both."""
    t = Tensor(name, spec.experts, n_embd, False, n_embd ** -0.5, random_f32=True,
                row_scale=router_scale(spec, layer))
    return synth_router.real_router(t, layer, n_layers, flat=is_flat(spec)) if is_real(spec) else t


def router_bias(name: str, spec, layer: int, n_layers: int) -> Tensor:
    """A per-expert F32 bias (``exp_probs_b.bias`` or ``ffn_gate_inp.bias``); under real it grows with depth."""
    t = Tensor(name, 1, spec.experts, False, BIAS_SIGMA, random_f32=True)
    return synth_router.real_router_bias(t, layer, n_layers, flat=is_flat(spec)) if is_real(spec) else t


def attention_output(name: str, n_embd: int, n_in: int, sigma: float) -> Tensor:
    """``attn_output.weight`` (Q8_0, ne [n_in, n_embd]) of standard deviation ``sigma`` (layers
    other than the context head's; ``context_attention`` replaces layer 0's)."""
    return Tensor(name, n_embd, n_in, True, sigma)


def context_attention(tensors: list[Tensor], spec, shape, layer: int, rope_fraction: float = 1.0) -> list[Tensor]:
    """A GQA layer's tensors with layer 0's attn_q/k/v/output made the context head under real;
    any other layer, or uniform, unchanged. Order is kept (writers sort by name).

    ``rope_fraction`` < 1 (glm4moe's half-rotary heads): the unrotated dims would only add a
    constant score (softmax ignores it) while the rotated ones alone give a kernel half as tall,
    an average over many more tokens (measured: lag-1 − lag-8 2.6 points instead of ≥ 4); head 0's
    query and key then read the constant block in the rotated dims only, scaled to the full
    head's peak score."""
    if layer != 0 or not is_real(spec):
        return tensors
    weights = [t for t in tensors if t.name.endswith(".weight")]  # biases (gpt-oss, glm4moe) stay random
    real = synth_router.real_context_attention(weights, shape)
    if rope_fraction < 1.0:
        real = [_rotated_only(t, rope_fraction) if t.name.endswith(("attn_q.weight", "attn_k.weight")) else t
                for t in real]
    done = dict(zip((t.name for t in weights), real))
    return [done.get(t.name, t) for t in tensors]


def _rotated_only(t: Tensor, fraction: float) -> Tensor:
    head_dim = HEAD_DIM
    n_rot = int(head_dim * fraction)
    inner = t.fill

    def fill(rng):
        w = inner(rng)
        w[n_rot:head_dim] = 0.0
        w[:n_rot] *= (head_dim / n_rot) ** 0.5  # q·k over the rotated dims: the full head's peak
        return w

    return replace(t, fill=fill)


def context_attention_gated(tensors: list[Tensor], spec, shape, layer: int, at_layer: int,
                            rope_fraction: float) -> list[Tensor]:
    """qwen3next's first full-attention layer (``at_layer``) as the context head under real.

    Its attn_q yields, per head, 64 query rows then 64 output-gate rows; the head's gate rows are
    zero (sigmoid 0.5 at every token, so attn_output's context block is doubled) and its query and
    key read the constant block in the rotated dims only (a quarter of the head). Routers of the
    layers before it read no context."""
    if layer != at_layer or not is_real(spec):
        return tensors
    weights = [t for t in tensors if t.name.endswith(".weight")]
    real = {t.name: t for t in synth_router.real_context_attention(
        [t for t in weights if not t.name.endswith("attn_q.weight")], shape)}
    for t in weights:
        if t.name.endswith("attn_q.weight"):
            real[t.name] = replace(t, fill=partial(_query_and_gate, shape))
        elif t.name.endswith("attn_output.weight"):
            real[t.name] = replace(real[t.name], fill=partial(_doubled_context, real[t.name].fill, shape))
    for name in [n for n in real if n.endswith(("attn_q.weight", "attn_k.weight"))]:
        real[name] = _rotated_only(real[name], rope_fraction)
    return [real.get(t.name, t) for t in tensors]


def _query_and_gate(shape, rng) -> np.ndarray:
    q = synth_router.context_attention(shape.n_embd, shape.n_head, shape.n_head_kv, HEAD_DIM, shape.n_layers, rng)["q"]
    gate = rng.standard_normal(q.shape, dtype=np.float32) * shape.n_embd ** -0.5
    gate[:HEAD_DIM] = 0.0
    out = np.empty((2 * q.shape[0], q.shape[1]), dtype=np.float32)
    for h in range(shape.n_head):
        out[2 * h * HEAD_DIM:(2 * h + 1) * HEAD_DIM] = q[h * HEAD_DIM:(h + 1) * HEAD_DIM]
        out[(2 * h + 1) * HEAD_DIM:(2 * h + 2) * HEAD_DIM] = gate[h * HEAD_DIM:(h + 1) * HEAD_DIM]
    return out


def _doubled_context(inner, shape, rng) -> np.ndarray:
    o = inner(rng)
    o[synth_router.context_dims(shape.n_embd, HEAD_DIM), :HEAD_DIM] *= 2.0  # the head's sigmoid(0) gate
    return o


def context_mla(tensors: list[Tensor], spec, dims: tuple, layer: int) -> list[Tensor]:
    """The same for an MLA layer (deepseek2 family); ``dims`` as synth_router.context_mla's."""
    if layer != 0 or not is_real(spec):
        return tensors
    return synth_router.real_context_mla(tensors, dims)


def qk_norm_gemma4(t: Tensor, spec, layer: int) -> Tensor:
    """gemma4 layer 0's attn_q_norm / attn_k_norm: constant QK_NORM_GEMMA4 under real, ones otherwise."""
    if layer != 0 or not is_real(spec):
        return t
    return replace(t, fill=lambda rng: _constant(t.cols, QK_NORM_GEMMA4))


def post_norm_gemma4(t: Tensor, spec, layer: int, n_layers: int) -> Tensor:
    """gemma4's post_attention_norm (layers after 0) and post_ffw_norm under real: 1/sqrt(2 n_layers)
    instead of ones. Those norms give every layer's attention and FFN output unit RMS, two unit
    vectors a layer into the residual stream (other archs add about 1/sqrt(2 n_layers) each), which
    buried the constant block: measured with ones, hottest-8 share 23.3 → 28.0 % first → last third,
    105 of 128 distinct. Layer 0's post_attention_norm stays 1: its output is the context block."""
    if not is_real(spec) or (layer == 0 and "post_attention_norm" in t.name):
        return t
    return replace(t, fill=lambda rng: _constant(t.cols, (2.0 * n_layers) ** -0.5))


def _constant(n: int, value: float):
    return np.full((1, n), value, dtype=np.float32)


__all__ = ["router_weight", "router_bias", "attention_output", "router_scale", "embedding", "context_attention",
           "context_mla", "context_attention_gated", "qk_norm_gemma4", "post_norm_gemma4", "is_real", "QK_NORM_GEMMA4"]
