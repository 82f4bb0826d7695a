"""Synthetic MiniMax-M3 files: llama.cpp's ``minimax-m3`` architecture at small scale.

MiniMax-M3 (src/models/minimax-m3.cpp in llama-cpp-python 0.3.36) is GQA attention with per-head Q/K
norms and partial rotary (MiniMax-M2's), DeepSeek-V3-style MoE (leading dense layers, a sigmoid router +
``exp_probs_b``, a shared expert of the routed width, routed scaling), the swigluoai activation, and
MiniMax Sparse Attention: every MoE layer has an indexer (``indexer.q_proj`` / ``k_proj`` and their norms)
that picks ``attention.indexer.top_k`` blocks of ``block_size`` tokens (plus ``local_blocks`` recent ones)
for the layer's attention; the blocks and indexer keys live in llama.cpp's own cache
(llama-kv-cache-msa), not in the weights. For a streamer it is a GQA MoE with a few more dense tensors
per layer; the routed experts are picked at ``ffn_moe_topk-N`` as everywhere.

synth_gqa_moe writes the attention, MoE and dense layers (its row in synth_arch_specs); this adds the
indexer tensors and keys. The indexer has one head per KV head (llama.cpp asserts "one indexer head per GQA group") and
keys of ``INDEXER_DIM`` (at least the rotary dims, which it ropes too), as llama.cpp's own test fixture
(tests/test-llama-archs.cpp).
"""

from __future__ import annotations

from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

INDEXER_DIM = HEAD_DIM
BLOCK_SIZE = 64  # attention.indexer.block_size: tokens per MSA block
TOP_K_BLOCKS = 16
LOCAL_BLOCKS = 1
default_n_layers = gqa.default_n_layers


def _indexer(prefix: str, e: int, n_head: int) -> list[Tensor]:
    s_e = e ** -0.5
    return [Tensor(prefix + "indexer.k_norm.weight", 1, INDEXER_DIM, False, 0.0),
            Tensor(prefix + "indexer.k_proj.weight", INDEXER_DIM, e, True, s_e),
            Tensor(prefix + "indexer.q_norm.weight", 1, INDEXER_DIM, False, 0.0),
            Tensor(prefix + "indexer.q_proj.weight", n_head * INDEXER_DIM, e, True, s_e)]


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    """gqa's tensors with each MoE layer's indexer added among its own (name order)."""
    layers: dict[int, list[Tensor]] = {}
    head, tail = [], []
    for t in gqa.tensors(shape, spec, arch, n_vocab):
        if t.name.startswith("blk."):
            layers.setdefault(int(t.name.split(".")[1]), []).append(t)
        elif layers:
            tail.append(t)
        else:
            head.append(t)
    out = list(head)
    for i in sorted(layers):
        extra = _indexer(f"blk.{i}.", shape.n_embd, shape.n_head_kv) if gqa.is_moe_layer(arch, i) else []
        out += sorted(layers[i] + extra, key=lambda t: t.name)
    return out + tail


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    gqa.add_metadata(writer, shape, spec, arch)
    a = arch.gguf_arch
    writer.add_uint32(f"{a}.attention.indexer.head_count", shape.n_head_kv)
    writer.add_uint32(f"{a}.attention.indexer.key_length", INDEXER_DIM)
    writer.add_uint32(f"{a}.attention.indexer.top_k", TOP_K_BLOCKS)
    writer.add_uint32(f"{a}.attention.indexer.block_size", BLOCK_SIZE)
    writer.add_uint32(f"{a}.attention.indexer.local_blocks", LOCAL_BLOCKS)


TENSORS_PER_LAYER = gqa.TENSORS_PER_LAYER + 4
__all__ = ["tensors", "plan", "add_metadata", "default_n_layers", "TENSORS_PER_LAYER"]
