"""A router that routes like a trained one, written into the weights of a synthetic MoE.

A random router picks experts almost uniformly and independently token to token (lag-1
reuse ≈ k / n_expert), so every cache figure measured on it is its worst case; real
routers (Qwen3-30B-A3B, Gemma-4, gpt-oss traces) reuse 18–38 % of the previous token's
picks, keep a working set for many tokens, and favour a few experts more in deep layers.
llama.cpp still picks the experts here (top-k of the router logits, no hook): the
structure is in what the router reads. Router logits of layer L for expert x are

    logit = β_L · b_x            popularity: b_x ~ N(0, 1) per (layer, expert), β_L
                                 growing with depth (real: hottest-8 share rises)
          + γ · g_x · context    a slowly varying summary of the recent tokens
          + τ · z_x · token      the current token and whatever the layers made of it

in units of one residual dimension. Three blocks of the residual stream carry them:

- dims [0, CONST_DIMS): every token embedding holds EMBED_CONST there (a constant
  direction, so ``W·norm(h)`` over it is a fixed per-expert bias after the RMS norm);
- dims [CONST_DIMS, CONST_DIMS + head_dim): the *context* block, written only by
  layer 0's attention head 0. That head's query and key read the constant block, so
  they are the same vector at every position; RoPE then makes the score of a key Δ
  tokens back s·Σ_i cos(Δ·θ_i), which falls like -ln Δ: attention weight ∝ Δ^-α, a
  recency-weighted average of the tokens' values (weight about 0.32 on the current
  token, 0.18 on the previous one, 0.11 two back, a long tail). Its value reads the token part of the
  embedding; its output goes, through ``attn_output``, into the context block only;
- the remaining dims: the token-specific part (random embeddings, as before).

Contract (arch-agnostic, shapes in, float32 arrays out, deterministic for a given
``numpy.random.Generator``; matrices are [rows = output features, cols = n_embd inputs]
as GGUF stores them, i.e. ``W @ x``):

- ``token_embedding(n_vocab, n_embd, rng)`` → [n_vocab, n_embd]
- ``context_attention(n_embd, n_head, n_head_kv, head_dim, n_layers, rng)`` → dict of
  ``q``, ``k``, ``v``, ``o`` for a standard (GQA) attention layer, to be used as layer 0's;
  needs RoPE of the NORM or NEOX kind over the whole head (the score kernel is the same);
- ``router_weights(layer, n_layers, n_expert, n_embd, rng)`` → [n_expert, n_embd];
- ``router_bias(layer, n_layers, n_expert, rng)`` → [n_expert], for archs with
  ``exp_probs_b`` (deepseek2 / Kimi): a per-expert bias growing with depth (sigmoid
  routers add it to the scores before top-k), small next to the logits like a trained one;
- ``context_mla(n_embd, n_head, q_lora, kv_lora, nope, rope, v_head, n_layers, rng)`` →
  ``q_a``, ``q_b``, ``kv_a``, ``v_b``, ``o``: the same head for MLA attention (deepseek2).

The ``real_*`` functions at the end are the writers' glue: a synth_shapes tensor given its
weights from the above. Calibration and measurements: docs/synthetic-routing.md.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import numpy as np

from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

# "flat": real's context and token parts without the popularity term and with a zero bias, so every
# expert's expected share is the same: a router trained flat (Kimi K3's quantile balancing, no hot subset)
MODES = ("real", "uniform", "flat")
CONST_DIMS = 16
EMBED_CONST = 4.0
CONTEXT_GAIN = 2.0  # per-dim scale of the context block (other layers add noise of about 1 there)
# Attention score per RoPE pair between the constant query and key: s = q·k / sqrt(head_dim) per pair.
KERNEL_S = 0.3
# Logit scales in units of one residual dimension (calibrated: docs/synthetic-routing.md).
POPULARITY = (0.5, 1.8)  # β at the first and the last layer, linear in between
CONTEXT = 1.2  # γ
TOKEN = 0.6  # τ (0.8 before the successor head: a text that does not loop reuses less)
# The text: a random output head makes the next token mostly a function of the current one, a
# random map of the vocabulary whose cycles are short. A looping text routes periodically (lag-8
# reuse equals lag-1, the picks collapse onto the loop's experts): 7 of 21 default 128x8 models
# (sizes 120-1200 MB, seeds 0-2) missed issue 26's targets that way. Two terms of the output head,
# read from a fixed code each embedding holds in its first CODE_DIMS token dims, keep the text off
# loops while the layers still decide it: a pull of SUCCESSOR logits towards the token's successor
# on one cycle through the vocabulary, and RECENT logits (x the token's weight in the context
# block, which the context head now fills with the recent tokens' codes) against recent tokens.
# Calibration (140 runs, docs/synthetic-routing.md): 0 of 35 missed at these values.
CODE_DIMS = 64
CODE_SEED = 20261201  # fixed, not the file's seed: the embedding and the head are written apart
SUCCESSOR = 8.0
RECENT = 30.0  # logits off a token at weight 1 in the context (calibrated with SUCCESSOR: docs/synthetic-routing.md)
FIRST_ORDINARY_TOKEN = 3  # ids 0-2 are unk, bos, eos (engine.synth.synth_vocab)


def context_dims(n_embd: int, head_dim: int) -> slice:
    return slice(CONST_DIMS, CONST_DIMS + min(head_dim, n_embd - CONST_DIMS))


def _token_dims(n_embd: int, head_dim: int) -> np.ndarray:
    mask = np.ones(n_embd, dtype=bool)
    mask[:context_dims(n_embd, head_dim).stop] = False
    return mask


def code_dims(n_embd: int, head_dim: int = 64) -> slice:
    """The token dims holding each token's fixed code (the successor head reads them)."""
    start = context_dims(n_embd, head_dim).stop
    return slice(start, start + max(0, min(CODE_DIMS, n_embd - start)))


def token_code(n_vocab: int, width: int) -> np.ndarray:
    """[n_vocab, width] unit-normal codes, the same in every file (a fixed generator)."""
    return np.random.default_rng(CODE_SEED).standard_normal((n_vocab, width), dtype=np.float32)


def successors(n_vocab: int) -> np.ndarray:
    """next[i]: the preferred successor of token i, one cycle through every ordinary token
    (control tokens are neither on it nor anyone's successor; theirs is -1)."""
    order = FIRST_ORDINARY_TOKEN + np.random.default_rng(CODE_SEED + 1).permutation(n_vocab - FIRST_ORDINARY_TOKEN)
    nxt = np.full(n_vocab, -1, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def token_embedding(n_vocab: int, n_embd: int, rng: np.random.Generator, head_dim: int = 64) -> np.ndarray:
    """Random unit-scale embeddings with the constant block set, the context block empty and
    the fixed code in the first token dims."""
    emb = rng.standard_normal((n_vocab, n_embd), dtype=np.float32)
    emb[:, :CONST_DIMS] = EMBED_CONST
    emb[:, context_dims(n_embd, head_dim)] = 0.0
    code = code_dims(n_embd, head_dim)
    emb[:, code] = token_code(n_vocab, code.stop - code.start)
    return emb


def output_head(n_vocab: int, n_embd: int, sigma: float, rng: np.random.Generator, head_dim: int = 64) -> np.ndarray:
    """[n_vocab, n_embd]: random rows of ``sigma`` plus, on row next[i], token i's code scaled so
    that it adds about SUCCESSOR to that row's logit when i is the current token."""
    out = rng.standard_normal((n_vocab, n_embd), dtype=np.float32) * sigma
    code = code_dims(n_embd, head_dim)
    width = code.stop - code.start
    if width == 0:
        return out
    nxt = successors(n_vocab)
    mine = np.flatnonzero(nxt >= 0)
    codes = token_code(n_vocab, width)
    # The final norm divides by the residual's RMS, about the embedding's (layers add less).
    rms = _const_rms(n_embd, head_dim)
    out[nxt[mine], code] += codes[mine] * (SUCCESSOR * rms / width)
    # Recent tokens held back: the context block holds CONTEXT_GAIN / 0.45 x the recency-weighted
    # codes of the last tokens, so row j reading -code_j there lowers j's logit by about
    # RECENT x its weight in the context (0.32 for the current token, 0.18 the one before, ...).
    ctx = context_dims(n_embd, head_dim)
    n = min(ctx.stop - ctx.start, width)
    out[:, ctx.start:ctx.start + n] -= codes[:, :n] * (RECENT * rms / (n * CONTEXT_GAIN / 0.45))
    return out


def _const_rms(n_embd: int, head_dim: int = HEAD_DIM) -> float:
    """RMS of an embedding (constant block, empty context block, unit-scale rest): what layer 0's norm divides by."""
    return math.sqrt((CONST_DIMS * EMBED_CONST ** 2 + int(_token_dims(n_embd, head_dim).sum())) / n_embd)


def _read_code(rows: np.ndarray, n_embd: int, head_dim: int) -> None:
    """The context head's values are the tokens' codes (unit scale after layer 0's norm), so the
    output head knows what the context block holds and can hold recent tokens back."""
    code = code_dims(n_embd, head_dim)
    width = min(code.stop - code.start, rows.shape[0])
    rows[np.arange(width), code.start + np.arange(width)] = _const_rms(n_embd, head_dim)


def context_attention(n_embd: int, n_head: int, n_head_kv: int, head_dim: int, n_layers: int,
                      rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Layer 0's attention: head 0 averages the recent tokens into the context block."""
    s_e, s_res = 1.0 / math.sqrt(n_embd), 1.0 / math.sqrt(2.0 * n_layers)
    kv = n_head_kv * head_dim
    q = rng.standard_normal((n_head * head_dim, n_embd), dtype=np.float32) * s_e
    k = rng.standard_normal((kv, n_embd), dtype=np.float32) * s_e
    v = rng.standard_normal((kv, n_embd), dtype=np.float32) * s_e
    o = rng.standard_normal((n_embd, n_head * head_dim), dtype=np.float32) * (s_e * s_res)
    # Head 0's query and key: the first of each RoPE pair reads the constant block, so
    # q·k per pair is s·sqrt(head_dim) whatever the token. (NORM RoPE pairs (2i, 2i+1),
    # NEOX pairs (i, i + head_dim/2): both rotate dims 0..head_dim/2-1 by distinct θ_i
    # when every even dim, resp. the first half, holds the same value: fill both.)
    const_seen = CONST_DIMS * EMBED_CONST / _const_rms(n_embd)  # Σ over the block of norm(x)
    per_dim = math.sqrt(KERNEL_S * math.sqrt(head_dim)) / const_seen
    for w in (q, k):
        w[:head_dim] = 0.0
        # Every even dim: the first of each NORM pair (2i, 2i+1), all head_dim/2 frequencies;
        # under NEOX pairs (i, i + head_dim/2) it fills both dims of every other pair, the
        # same falling kernel from half the frequencies at twice the weight.
        w[0:head_dim:2, :CONST_DIMS] = per_dim
    ctx = context_dims(n_embd, head_dim)
    v[:head_dim] = 0.0
    _read_code(v[:head_dim], n_embd, head_dim)
    width = ctx.stop - ctx.start
    o[ctx, :] = 0.0  # only head 0 writes the context block ...
    o[:, :head_dim] = 0.0  # ... and head 0 writes nothing else
    # An average of unit vectors with these weights has per-dim std ≈ 0.45: scale it to CONTEXT_GAIN.
    o[ctx, :width] = np.eye(width, dtype=np.float32) * (CONTEXT_GAIN / 0.45)
    return {"q": q, "k": k, "v": v, "o": o}


def context_mla(n_embd: int, n_head: int, q_lora: int, kv_lora: int, nope: int, rope: int, v_head: int,
                n_layers: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The same context head for MLA attention (deepseek2: Kimi, DeepSeek-V3), layer 0's.

    Head 0 scores only by its RoPE part: q_a's first row reads the constant block (so
    q_a_norm's output holds a near-constant there), head 0's rope rows of q_b read only that
    dim, the shared rope key (the last ``rope`` rows of kv_a_mqa) reads the constant block;
    head 0's nope rows are zero. The values are the normalised latent (kv_a's first
    ``kv_lora`` rows, reading the token dims only), head 0's v_b maps it to ``v_head`` dims
    and attn_output writes those into the context block, and nothing else there.
    Returns ``q_a`` [q_lora, n_embd], ``q_b`` [n_head·(nope+rope), q_lora], ``kv_a``
    [kv_lora+rope, n_embd], ``v_b`` [n_head·v_head, kv_lora], ``o`` [n_embd, n_head·v_head].
    """
    s_e, s_res = 1.0 / math.sqrt(n_embd), 1.0 / math.sqrt(2.0 * n_layers)
    tok = _token_dims(n_embd, v_head)
    q_a = rng.standard_normal((q_lora, n_embd), dtype=np.float32) * s_e
    q_b = rng.standard_normal((n_head * (nope + rope), q_lora), dtype=np.float32) / math.sqrt(q_lora)
    kv_a = rng.standard_normal((kv_lora + rope, n_embd), dtype=np.float32) * s_e
    v_b = rng.standard_normal((n_head * v_head, kv_lora), dtype=np.float32) / math.sqrt(kv_lora)
    o = rng.standard_normal((n_embd, n_head * v_head), dtype=np.float32) * (s_res / math.sqrt(n_head * v_head))
    const_seen = CONST_DIMS * EMBED_CONST / _const_rms(n_embd)
    # Per RoPE pair q·k = s·sqrt(nope + rope): llama.cpp scales deepseek2 scores by 1/sqrt(nope + rope).
    pair = math.sqrt(KERNEL_S * math.sqrt(nope + rope))
    lead = 4.0  # q_a's constant dim, before q_a_norm; the other q_lora - 1 dims are about unit scale
    q_a[0] = 0.0
    q_a[0, :CONST_DIMS] = lead / const_seen
    after_norm = lead / math.sqrt((lead ** 2 + q_lora - 1) / q_lora)
    q_b[:nope + rope] = 0.0
    q_b[nope:nope + rope:2, 0] = pair / after_norm
    kv_a[kv_lora:] = 0.0
    kv_a[kv_lora::2, :CONST_DIMS] = pair / const_seen
    kv_a[:kv_lora, ~tok] = 0.0  # the latent (the values) reads the token dims only
    # Its first v_head dims are the codes (as the standard head's values), the rest random
    # and off the code dims; head 0's v_b passes those first dims on unchanged.
    code = code_dims(n_embd, v_head)
    kv_a[:kv_lora, code] = 0.0
    kv_a[:v_head] = 0.0
    _read_code(kv_a[:v_head], n_embd, v_head)
    v_b[:v_head] = 0.0
    v_b[np.arange(v_head), np.arange(v_head)] = 1.0
    ctx = context_dims(n_embd, v_head)
    width = ctx.stop - ctx.start
    o[ctx, :] = 0.0
    o[:, :v_head] = 0.0
    o[ctx, :width] = np.eye(width, dtype=np.float32) * (CONTEXT_GAIN / 0.45)
    return {"q_a": q_a, "q_b": q_b, "kv_a": kv_a, "v_b": v_b, "o": o}


def popularity(layer: int, n_layers: int) -> float:
    lo, hi = POPULARITY
    return lo + (hi - lo) * (layer / max(1, n_layers - 1))


def router_weights(layer: int, n_layers: int, n_expert: int, n_embd: int, rng: np.random.Generator,
                   head_dim: int = 64, flat: bool = False) -> np.ndarray:
    """[n_expert, n_embd]: popularity over the constant block, context and token parts; ``flat``: no
    popularity (the constant block reads 0), the same context and token parts."""
    ctx = context_dims(n_embd, head_dim)
    tok = _token_dims(n_embd, head_dim)
    w = np.zeros((n_expert, n_embd), dtype=np.float32)
    b = rng.standard_normal(n_expert).astype(np.float32)
    w[:, :CONST_DIMS] = (0.0 if flat else popularity(layer, n_layers)) * (b / (CONST_DIMS * EMBED_CONST))[:, None]
    width = ctx.stop - ctx.start
    # A model narrower than the constant and context blocks (n_embd ≤ 80, tiny files of many
    # experts) has no token part, and one of n_embd ≤ 16 no context block: those parts are left out.
    if width > 0:
        scale = CONTEXT / (CONTEXT_GAIN * math.sqrt(width))
        w[:, ctx] = rng.standard_normal((n_expert, width), dtype=np.float32) * scale
    if tok.any():
        w[:, tok] = rng.standard_normal((n_expert, int(tok.sum())), dtype=np.float32) * (TOKEN / math.sqrt(tok.sum()))
    return w


def router_bias(layer: int, n_layers: int, n_expert: int, rng: np.random.Generator, sigma: float = 0.02) -> np.ndarray:
    """A per-expert bias for ``exp_probs_b``, larger with depth (sigma at the first layer, 3× at the last)."""
    scale = sigma * (1.0 + 2.0 * layer / max(1, n_layers - 1))
    return (rng.standard_normal(n_expert) * scale).astype(np.float32)


# The writers' glue: a tensor of engine.synth.synth_shapes given its weights from the above.


def real_output(t: Tensor) -> Tensor:
    """output.weight with the successor pull (same random part's scale as before)."""
    return replace(t, fill=partial(output_head, t.rows, t.cols, t.sigma, head_dim=HEAD_DIM))


def real_embedding(t: Tensor) -> Tensor:
    """token_embd with the constant and context blocks the router reads."""
    return replace(t, fill=partial(token_embedding, t.rows, t.cols, head_dim=HEAD_DIM))


def _attention_part(name: str, shape: Shape, rng: np.random.Generator) -> np.ndarray:
    return context_attention(shape.n_embd, shape.n_head, shape.n_head_kv, HEAD_DIM, shape.n_layers, rng)[name]


def real_context_attention(attention: list[Tensor], shape: Shape) -> list[Tensor]:
    """Layer 0's attn_q/k/v/output (of synth_shapes.attention_tensors) from context_attention."""
    names = {"attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o"}
    return [replace(t, fill=partial(_attention_part, names[key], shape)) if (key := t.name.split(".")[-2]) in names
            else t for t in attention]


def _mla_part(name: str, dims: tuple, rng: np.random.Generator) -> np.ndarray:
    return context_mla(*dims, rng)[name]


def real_context_mla(attention: list[Tensor], dims: tuple) -> list[Tensor]:
    """Layer 0's attn_q_a/q_b/kv_a_mqa/v_b/output of a deepseek2 writer from context_mla;
    ``dims``: context_mla's arguments before ``rng``."""
    names = {"attn_q_a": "q_a", "attn_q_b": "q_b", "attn_kv_a_mqa": "kv_a", "attn_v_b": "v_b", "attn_output": "o"}
    return [replace(t, fill=partial(_mla_part, names[key], dims)) if (key := t.name.split(".")[-2]) in names
            else t for t in attention]


def real_router(t: Tensor, layer: int, n_layers: int, flat: bool = False) -> Tensor:
    """ffn_gate_inp ([n_expert, n_embd]) from router_weights; its row_scale (routing skew) still applies."""
    return replace(t, fill=partial(router_weights, layer, n_layers, t.rows, t.cols, head_dim=HEAD_DIM, flat=flat))


def real_router_bias(t: Tensor, layer: int, n_layers: int, flat: bool = False) -> Tensor:
    """exp_probs_b ([n_expert]) from router_bias, at the tensor's sigma for the first layer; ``flat``: zeros
    (a balanced router needs no correction)."""
    if flat:
        return replace(t, fill=lambda rng: np.zeros(t.cols, dtype=np.float32))
    return replace(t, fill=lambda rng: router_bias(layer, n_layers, t.cols, rng, t.sigma))


__all__ = ["real_output", "output_head", "successors", "token_code", "code_dims", "real_embedding",
           "real_context_attention", "real_context_mla", "context_mla", "real_router", "real_router_bias", "MODES",
           "token_embedding", "context_attention", "router_weights", "router_bias", "popularity"]
