"""Synthetic qwen35moe files (Qwen3.5 / Qwen3.6-35B-A3B's shape): qwen3next's hybrid under its own keys.

Qwen3.5's MoE is the model most streamed on phones and laptops this year; llama.cpp runs it as its own
arch ``qwen35moe`` (src/models/qwen35moe.cpp in llama-cpp-python 0.3.36). It is qwen3next's layout
(three gated delta-net layers to one full-attention layer, a shared expert gated per token, the full
layers' attn_q carrying the output gate) with three differences a file must meet:

- the delta net's beta and alpha gates are two tensors, ``ssm_beta`` and ``ssm_alpha`` (ne [n_embd,
  value heads] each), not qwen3next's fused ``ssm_ba``;
- rotary embedding is IMRoPE (multi-section, interleaved): ``rope.dimension_sections`` (four counts of
  rotary pairs) is required; text tokens carry one position in every section, so it rotates as one
  rotary embedding over ``rope.dimension_count`` dims and synth_router's context head works as in
  qwen3next (at the first full-attention layer, its query's gate rows zero);
- Qwen3.5-35B-A3B's counts: 256 experts top-8 of 512 (0.25 n_embd) + one shared of 512.

llama.cpp keeps the delta net's state (conv + S per value head) in its recurrent memory. Sizing, order,
quantization: synth_qwen3next's (which uses synth_gqa_moe's planner).
"""

from __future__ import annotations

from dataclasses import replace

from shardscope.engine.synth import synth_qwen3next as qwen3next
from shardscope.engine.synth.synth_arch_specs import ArchSpec
from shardscope.engine.synth.synth_shapes import HEAD_DIM, Shape, Tensor

default_n_layers = qwen3next.default_n_layers


def tensors(shape: Shape, spec, arch: ArchSpec, n_vocab: int) -> list[Tensor]:
    """qwen3next's list with each ``ssm_ba`` split into ``ssm_beta`` and ``ssm_alpha`` (n_v rows each)."""
    out = []
    for t in qwen3next.tensors(shape, spec, arch, n_vocab):
        if t.name.endswith(".ssm_ba.weight"):
            prefix = t.name[: -len("ssm_ba.weight")]
            half = t.rows // 2
            out += [replace(t, name=prefix + "ssm_alpha.weight", rows=half),
                    replace(t, name=prefix + "ssm_beta.weight", rows=half)]
        else:
            out.append(t)
    return out


def plan(size_mb: float, n_layers: int, spec, arch: ArchSpec, vocab, where: str) -> Shape:
    if n_layers < qwen3next.FULL_ATTENTION_INTERVAL:
        from shardscope.engine.base.errors import ShardscopeError

        raise ShardscopeError(f"{where}: a qwen35moe model needs at least {qwen3next.FULL_ATTENTION_INTERVAL} layers "
                              f"(every {qwen3next.FULL_ATTENTION_INTERVAL}th is the full-attention one), "
                              f"got {n_layers}")
    from shardscope.engine.synth import synth_gqa_moe as gqa

    return gqa.plan(size_mb, n_layers, spec, arch, vocab, where, build=tensors)


def rope_sections(n_rot: int) -> list[int]:
    """IMRoPE's sections (rotary pairs for t, h, w and a fourth, unused): Qwen3.5's 11:11:10 of 32 pairs."""
    pairs = n_rot // 2
    t = round(pairs * 11 / 32)
    h = round(pairs * 11 / 32)
    return [t, h, pairs - t - h, 0]


def add_metadata(writer, shape: Shape, spec, arch: ArchSpec) -> None:
    qwen3next.add_metadata(writer, shape, spec, arch)
    writer.add_array(f"{arch.gguf_arch}.rope.dimension_sections", rope_sections(int(HEAD_DIM * arch.rope_fraction)))


__all__ = ["tensors", "plan", "add_metadata", "default_n_layers", "rope_sections"]
