"""Synthetic DeepSeek V4 (Flash) files: llama.cpp's own ``deepseek4`` architecture at small scale.

What a streamer meets in it (names from llama-cpp-python 0.3.36's src/models/deepseek4.cpp and
conversion/deepseek.py; the installed libllama loads and runs every file synth writes):

- **Hash-routed layers.** The first ``hash_layer_count`` layers pick their experts by token id:
  ``ffn_gate_tid2eid`` (I32, ne [n_expert_used, n_vocab]) is one row of expert ids per token, taken
  with get_rows of the input tokens and handed to build_moe_ffn as the picks (still named
  ``ffn_moe_topk-N``; the router ``ffn_gate_inp`` only weights them, no ``exp_probs_b`` there). The
  picks are known as soon as the token is: engine/experts/hash_prefetch.py loads them before the
  layer. The table written here gives every token distinct experts drawn with a fixed generator.
- Every other layer: sqrt-softplus scores (gating 4) + ``exp_probs_b``, top-k; all layers MoE,
  with shared experts (``ffn_*_shexp``, n_ff_exp × n_shared wide), clamped SwiGLU.
- Attention: one shared KV head (``attn_kv``, MQA) of ``key_length``, low-rank Q (``attn_q_a`` →
  ``attn_q_b``), per-head sinks, a grouped low-rank output (``attn_output_a`` as [heads·dim/groups,
  o_lora·groups], ``attn_output_b``), a sliding window, and per layer a compression ratio (0, 4 or
  128): ratio-4 layers have a compressor and a lightning indexer, ratio-128 layers a compressor; the
  compressed rows live in llama.cpp's own cache (llama-kv-cache-dsv4), not in the weights.
- Hyper-connections: the residual is 4 streams; ``hc_{attn,ffn}_{fn,base,scale}`` per layer and
  ``output_hc_*`` mix them (F32, as the converter keeps them).

Routed experts MXFP4 unless told (V4 ships them so); dense matrices Q8_0; head dims 64. Routing:
the attention is not one synth_router's context head can live in, so ``real`` is popularity + the
token part in the scored layers, ``flat`` the token part alone. Sizing, alignment and tensor order
are synth_gqa_moe's (its planner is given this list).
"""

from __future__ import annotations

import math

import numpy as np

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import attention_output, edge_globals, router_bias, router_weight
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

HASH_LAYERS = 3  # hash_layer_count: DeepSeek V4 Flash's first three layers route by token id
ROPE = HEAD_DIM // 8  # rotary dims of a head (V4 Flash: 64 of 512)
HC = 4  # hyper_connection.count (the graph asserts 4)
HC_MIX = (2 + HC) * HC
SINKHORN_ITERS = 20
O_GROUPS = 8  # attention.output_group_count (n_head must divide by it); V4 Flash's
INDEXER_HEADS, INDEXER_DIM = 64, 128  # V4 Flash's (and test-llama-archs.cpp's fixture)
INDEXER_TOP_K = 512
SLIDING_WINDOW = 128
SWIGLU_CLAMP = 10.0
COMPRESS_ROPE_BASE = 160000.0
TID_SEED = 20261204  # the hash table's generator: fixed, so prefetch tests know the picks from the ids
TENSORS_PER_LAYER = 40  # an upper bound, for the header estimate


def compress_ratio(layer: int) -> int:
    """0 for the first two layers, then 4 and 128 in turn (the fixture's [0, 0, 4, 128] pattern)."""
    return 0 if layer < 2 else (4 if layer % 2 == 0 else 128)


def hash_layers(n_layers: int) -> int:
    return min(HASH_LAYERS, n_layers - 1)


def heads(arch: ArchSpec, n_embd: int) -> tuple[int, int]:
    """(n_head, 1): 64-wide query heads at the arch's width, a multiple of the output groups; one KV head."""
    return max(O_GROUPS, int(round(arch.q_ratio * n_embd / HEAD_DIM / O_GROUPS)) * O_GROUPS), 1


def default_n_layers(size_mb: float, arch: ArchSpec) -> int:
    """gqa's count, at least 6: three hash layers, three scored ones (both compression kinds)."""
    return max(2 * HASH_LAYERS, gqa.default_n_layers(size_mb, arch))


def tid2eid(n_vocab: int, n_expert: int, k: int, layer: int = 0) -> np.ndarray:
    """[n_vocab, k] distinct expert ids per token, one table per layer, the same for every file of that shape."""
    rng = np.random.default_rng([TID_SEED, layer])
    return np.argsort(rng.random((n_vocab, n_expert)), axis=1)[:, :k].astype(np.int32)


def dims(shape: Shape) -> dict:
    """Widths besides the shape's: the published model's (``shape.dims``, engine/synth/synth_published.py),
    else V4 Flash's ratios at this n_embd with 64-wide heads."""
    own = getattr(shape, "dims", None)
    if own:
        return dict(own)
    e = shape.n_embd
    return dict(head=HEAD_DIM, rope=ROPE, q_lora=max(64, int(round(e * 1024 / 4096 / 32)) * 32),
                o_lora=max(32, int(round(e * 1024 / 4096 / 32)) * 32))


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    e, f, n, x, h = shape.n_embd, shape.n_ff, shape.n_layers, spec.experts, shape.n_head
    gate_q, down_q = SCHEMES[spec.quant or arch.quant]
    dd = dims(shape)
    q_lora, o_lora = dd["q_lora"], dd["o_lora"]
    d, hc_dim = dd["head"], HC * e
    s_e, s_res = e ** -0.5, (2.0 * n) ** -0.5
    s = spec.shared_experts * f
    n_hash = hash_layers(n)
    out, tail = edge_globals(n_vocab, e, spec)

    def f32(name, rows, cols, sigma=0.0, ones=False):
        return Tensor(name, rows, cols, False, sigma, random_f32=not ones)

    for i in range(n):
        p = f"blk.{i}."

        def mat(name, rows, cols, sigma):
            return Tensor(p + name, rows, cols, True, sigma)

        layer = [f32(p + "attn_norm.weight", 1, e, ones=True), f32(p + "ffn_norm.weight", 1, e, ones=True),
                 f32(p + "attn_sinks.weight", 1, h, 0.5),
                 mat("attn_q_a.weight", q_lora, e, s_e), f32(p + "attn_q_a_norm.weight", 1, q_lora, ones=True),
                 mat("attn_q_b.weight", h * d, q_lora, q_lora ** -0.5),
                 mat("attn_kv.weight", d, e, s_e), f32(p + "attn_kv_a_norm.weight", 1, d, ones=True),
                 # the file's [heads·dim/groups, o_lora·groups]; llama.cpp reshapes it to 3-D
                 mat("attn_output_a.weight", o_lora * O_GROUPS, h * d // O_GROUPS, (h * d // O_GROUPS) ** -0.5),
                 attention_output(p + "attn_output_b.weight", e, O_GROUPS * o_lora,
                                  s_res / math.sqrt(O_GROUPS * o_lora))]
        for part in ("attn", "ffn"):  # small mixes: the four streams stay close to an even average
            layer += [f32(p + f"hc_{part}_fn.weight", HC_MIX, hc_dim, 0.1 * hc_dim ** -0.5),
                      f32(p + f"hc_{part}_base.weight", 1, HC_MIX), f32(p + f"hc_{part}_scale.weight", 1, 3, ones=True)]
        ratio = compress_ratio(i)
        if ratio:
            coff = 2 if ratio == 4 else 1
            layer += [mat("attn_compressor_kv.weight", coff * d, e, s_e),
                      mat("attn_compressor_gate.weight", coff * d, e, s_e),
                      f32(p + "attn_compressor_ape.weight", ratio, coff * d, 0.02),
                      f32(p + "attn_compressor_norm.weight", 1, d, ones=True)]
            if ratio == 4:
                layer += [mat("indexer.proj.weight", INDEXER_HEADS, e, s_e),
                          mat("indexer.attn_q_b.weight", INDEXER_HEADS * INDEXER_DIM, q_lora, q_lora ** -0.5),
                          mat("indexer_compressor_kv.weight", 2 * INDEXER_DIM, e, s_e),
                          mat("indexer_compressor_gate.weight", 2 * INDEXER_DIM, e, s_e),
                          f32(p + "indexer_compressor_ape.weight", ratio, 2 * INDEXER_DIM, 0.02),
                          f32(p + "indexer_compressor_norm.weight", 1, INDEXER_DIM, ones=True)]
        layer.append(router_weight(p + "ffn_gate_inp.weight", spec, i, e, n))
        if i < n_hash:
            table = Tensor(p + "ffn_gate_tid2eid.weight", n_vocab, spec.experts_used, False, 0.0,
                            fill=lambda rng, i=i: tid2eid(n_vocab, x, spec.experts_used, i), int32=True)
            layer.append(table)
        else:
            layer.append(router_bias(p + "exp_probs_b.bias", spec, i, n))
        layer += [Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                  Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x, qtype=gate_q),
                  Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_res / math.sqrt(f), n_expert=x, qtype=down_q),
                  mat("ffn_gate_shexp.weight", s, e, s_e), mat("ffn_up_shexp.weight", s, e, s_e),
                  mat("ffn_down_shexp.weight", e, s, 2.0 * s_res / math.sqrt(s))]
        out += sorted(layer, key=lambda t: t.name)
    head = [f32("output_hc_fn.weight", HC, hc_dim, 0.1 * hc_dim ** -0.5), f32("output_hc_base.weight", 1, HC),
            f32("output_hc_scale.weight", 1, 1, ones=True)]
    return out + head + tail


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    if n_layers < arch.min_layers:
        raise ShardscopeError(f"{where}: a deepseek4 model needs at least {arch.min_layers} layers "
                              f"({arch.min_layers_why}), got {n_layers}")
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors, heads_of=heads)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    """The keys src/models/deepseek4.cpp load_arch_hparams reads (names from src/llama-arch.cpp)."""
    a, n = arch.gguf_arch, shape.n_layers
    writer.add_uint32(f"{a}.feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{a}.expert_feed_forward_length", shape.n_ff)
    writer.add_uint32(f"{a}.attention.head_count", shape.n_head)
    writer.add_uint32(f"{a}.attention.head_count_kv", 1)
    dd = dims(shape)
    writer.add_uint32(f"{a}.attention.key_length", dd["head"])
    writer.add_uint32(f"{a}.attention.value_length", dd["head"])
    writer.add_uint32(f"{a}.rope.dimension_count", dd["rope"])
    writer.add_uint32(f"{a}.attention.q_lora_rank", dd["q_lora"])
    writer.add_uint32(f"{a}.attention.sliding_window", SLIDING_WINDOW)
    writer.add_uint32(f"{a}.expert_count", spec.experts)
    writer.add_uint32(f"{a}.expert_used_count", spec.experts_used)
    writer.add_uint32(f"{a}.expert_shared_count", spec.shared_experts)
    writer.add_float32(f"{a}.expert_weights_scale", arch.weights_scale)
    writer.add_bool(f"{a}.expert_weights_norm", arch.weights_norm)
    writer.add_uint32(f"{a}.expert_gating_func", arch.gating)
    writer.add_array(f"{a}.swiglu_clamp_exp", [SWIGLU_CLAMP] * n)
    writer.add_array(f"{a}.swiglu_clamp_shexp", [SWIGLU_CLAMP] * n)
    writer.add_uint32(f"{a}.attention.indexer.head_count", INDEXER_HEADS)
    writer.add_uint32(f"{a}.attention.indexer.key_length", INDEXER_DIM)
    writer.add_uint32(f"{a}.attention.indexer.top_k", INDEXER_TOP_K)
    writer.add_uint32(f"{a}.attention.output_group_count", O_GROUPS)
    writer.add_uint32(f"{a}.attention.output_lora_rank", dd["o_lora"])
    writer.add_array(f"{a}.attention.compress_ratios", [compress_ratio(i) for i in range(n)])
    writer.add_float32(f"{a}.attention.compress_rope_freq_base", COMPRESS_ROPE_BASE)
    writer.add_uint32(f"{a}.hyper_connection.count", HC)
    writer.add_uint32(f"{a}.hyper_connection.sinkhorn_iterations", SINKHORN_ITERS)
    writer.add_float32(f"{a}.hyper_connection.epsilon", 1e-6)
    writer.add_uint32(f"{a}.hash_layer_count", hash_layers(n))


__all__ = ["tensors", "plan", "add_metadata", "default_n_layers", "hash_layers", "tid2eid", "compress_ratio",
           "TENSORS_PER_LAYER"]
