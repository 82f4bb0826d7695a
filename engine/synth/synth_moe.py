"""Mixture-of-experts shapes for the synthetic writer (``engine.synth`` writes the file).

Expert streaming needs MoE models that llama.cpp runs, of a chosen size, without
downloading any. Without shared experts the model is Mixtral-style (arch ``llama`` +
``llama.expert_count``/``expert_used_count``); shared experts need an architecture that
has them, so those models are ``qwen2moe``. Per layer the file holds, in this order:

    attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate_inp (router, F32),
    [ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp,]
    ffn_gate_exps, ffn_up_exps, ffn_down_exps          (Q8_0, [n_embd|n_ff, .., n_expert])

Widths are chosen, where the size allows, so that one expert's slice of each expert
tensor is a whole number of 4 KiB pages: an expert then loads and evicts without
touching its neighbours' pages.

The archs of real files (qwen3moe, gpt-oss, glm4moe, llama4, gemma4, qwen3next, kimi-k2,
deepseek3; ``MoeSpec.arch``) are rows of ``synth_arch_specs``, written by the module of their family
(``family_writer``); ``defaults_for`` gives a row's real expert counts, ``validate_spec`` refuses what
llama.cpp would not load before anything is written.


Routing: ``routing="real"`` (the default) writes a router, layer 0's attention and the
embedding so that llama.cpp's picks have real routing's reuse and popularity
(engine/synth/synth_router.py); ``"uniform"`` keeps random router rows.
Routing skew: random routers pick experts almost uniformly, the worst case for any
expert cache; real routers favour some experts. ``routing_skew`` S scales the router
rows of the first ``max(2, n_expert // 8)`` experts of each layer (rotated per layer) by
up to 1 + S, so those experts win more often; S = 0 leaves the router uniform.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.synth import synth_deepseek2 as deepseek2
from shardscope.engine.synth import synth_deepseek4 as deepseek4
from shardscope.engine.synth import synth_gemma4 as gemma4
from shardscope.engine.synth import synth_glm5_next as glm5_next
from shardscope.engine.synth import synth_gqa_moe as gqa
from shardscope.engine.synth import synth_kimi_k3 as kimi_k3
from shardscope.engine.synth import synth_minimax_m3 as minimax_m3
from shardscope.engine.synth import synth_qwen3next as qwen3next
from shardscope.engine.synth import synth_qwen35moe as qwen35moe
from shardscope.engine.synth import synth_router
from shardscope.engine.synth.synth_arch_specs import ARCH_SPECS, NOT_WRITTEN, ArchSpec
from shardscope.engine.synth.synth_quant import SCHEMES
from shardscope.engine.synth.synth_router_seam import context_attention, edge_globals, router_scale, router_weight
from shardscope.engine.synth.synth_shapes import (
    HEAD_DIM,
    MIB,
    Q8_BLOCK,
    Q8_BYTES,
    SIZE_TOLERANCE,
    Shape,
    Tensor,
    align_up,
    attention_tensors,
    global_bytes,
    header_bytes,
    kv_heads_for,
    q8,
)

MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS (1024 since Kimi K3 in this llama.cpp)
_PAGE = 4096


@dataclass(frozen=True)
class MoeSpec:
    experts: int = 64
    experts_used: int = 8
    shared_experts: int = 0
    routing_skew: float = 0.0
    # "real": a router with real routing's structure (engine.synth.synth_router); "uniform": random rows
    routing: str = "real"
    # "" picks llama (no shared experts) or qwen2moe; the others are rows of synth_arch_specs
    arch: str = ""
    quant: str = ""  # "" = the arch's default (q8_0; mxfp4 for gpt-oss); q4_k_m, mxfp4


ARCHES = ("", "llama", "qwen2moe", *ARCH_SPECS)
QUANTS = tuple(SCHEMES)


def arch_spec(spec: MoeSpec) -> ArchSpec | None:
    """The synth_arch_specs row of ``spec.arch``; None for the Mixtral / qwen2moe shapes."""
    return ARCH_SPECS.get(spec.arch)


def defaults_for(arch: str | None) -> MoeSpec:
    """The MoeSpec an --arch starts from: the real model's expert counts, before explicit flags."""
    if arch in NOT_WRITTEN:
        raise ShardscopeError(f"--arch {arch}: {NOT_WRITTEN[arch]}")
    row = ARCH_SPECS.get(arch or "")
    if arch == "qwen2moe":  # llama.cpp's qwen2moe reads ffn_*_shexp: one shared expert unless told
        return MoeSpec(shared_experts=1, arch=arch)
    if row is None:
        return MoeSpec(arch=arch or "")
    return MoeSpec(experts=row.experts, experts_used=row.experts_used, shared_experts=row.shared_experts, arch=row.name)


def validate_spec(spec: MoeSpec, where: str) -> MoeSpec:
    for key in ("experts", "experts_used", "shared_experts"):
        value = getattr(spec, key)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ShardscopeError(f"{where}: {key} must be a whole number, got {value!r}")
    if spec.arch in NOT_WRITTEN:
        raise ShardscopeError(f"{where}: {NOT_WRITTEN[spec.arch]}")
    if spec.arch not in ARCHES:
        raise ShardscopeError(f"{where}: arch must be one of {', '.join(a for a in ARCHES if a)}, got {spec.arch!r}")
    if not 2 <= spec.experts <= MAX_EXPERTS:
        raise ShardscopeError(f"{where}: experts must be 2 to {MAX_EXPERTS}, got {spec.experts}")
    if not 1 <= spec.experts_used <= spec.experts:
        raise ShardscopeError(
            f"{where}: experts_used must be 1 to experts ({spec.experts}), got {spec.experts_used}")
    if spec.shared_experts < 0:
        raise ShardscopeError(f"{where}: shared_experts must be ≥ 0, got {spec.shared_experts}")
    if spec.arch == "llama" and spec.shared_experts:
        raise ShardscopeError(f"{where}: arch llama has no shared experts; use qwen2moe or deepseek2")
    if spec.arch == "qwen2moe" and not spec.shared_experts:
        raise ShardscopeError(f"{where}: arch qwen2moe needs shared_experts ≥ 1")
    row = arch_spec(spec)
    if row is not None:
        _check_row(spec, row, where)
    elif spec.quant not in ("", "q8_0"):
        raise ShardscopeError(f"{where}: quant {spec.quant} is written for the archs of real files "
                              f"({', '.join(ARCH_SPECS)}); arch {architecture(spec)} is written as q8_0 only")
    if spec.routing not in synth_router.MODES:
        raise ShardscopeError(f"{where}: routing must be one of {', '.join(synth_router.MODES)}, got {spec.routing!r}")
    skew = spec.routing_skew
    if isinstance(skew, bool) or not isinstance(skew, numbers.Real) or not math.isfinite(skew) or skew < 0:
        raise ShardscopeError(f"{where}: routing_skew must be a finite number ≥ 0, got {skew!r}")
    return spec


def _check_row(spec: MoeSpec, row: ArchSpec, where: str) -> None:
    """What llama.cpp's loader of the arch requires (a file without it does not load)."""
    if row.shared_experts and spec.shared_experts < 1:
        raise ShardscopeError(f"{where}: arch {row.name} needs shared_experts ≥ 1 (llama.cpp requires the "
                              f"ffn_*_shexp tensors of {row.gguf_arch})")
    if not row.shared_experts and spec.shared_experts:
        raise ShardscopeError(f"{where}: arch {row.name} has no shared experts; give --shared-experts 0")
    if row.name == "llama4" and spec.shared_experts != 1:
        raise ShardscopeError(f"{where}: arch llama4 has exactly one shared expert, got {spec.shared_experts}")
    if spec.quant and spec.quant not in row.quants:
        raise ShardscopeError(f"{where}: arch {row.name} is written as {' or '.join(row.quants)}, not {spec.quant}")
    groups, used = row.expert_groups
    if groups and (spec.experts % groups or spec.experts_used > (spec.experts // groups) * used):
        raise ShardscopeError(f"{where}: arch {row.name} routes in {groups} expert groups (top {used}): experts "
                              f"must be a multiple of {groups} and experts_used ≤ {used} groups' experts")


def family_writer(row: ArchSpec):
    """The module that writes the arch family's tensors and keys (plan, tensors, add_metadata)."""
    return {"gqa": gqa, "mla": deepseek2, "gemma4": gemma4, "qwen3next": qwen3next, "kimi-k3": kimi_k3,
            "deepseek4": deepseek4, "qwen35moe": qwen35moe,
            "minimax-m3": minimax_m3, "glm5-next": glm5_next}[row.family]


def architecture(spec: MoeSpec) -> str:
    row = arch_spec(spec)
    if row is not None:
        return row.gguf_arch
    return spec.arch or ("qwen2moe" if spec.shared_experts else "llama")


def alignment(spec: MoeSpec) -> int:
    """Real files' 32 bytes for the archs of synth_arch_specs but the MLA ones (as #18 wrote them);
    4096 (page-aligned experts) for the Mixtral / qwen2moe / deepseek2 shapes tests rely on."""
    row = arch_spec(spec)
    return gqa.ALIGNMENT if row is not None and not row.mla else 4096


def file_type(spec: MoeSpec) -> int:
    row = arch_spec(spec)
    return gqa.file_type(spec, row) if row is not None else 7


def default_n_layers(size_mb: float, spec: MoeSpec | None = None) -> int:
    """Fewer, wider layers than a dense model: 8 at 600 MB, so experts are not slivers."""
    row = arch_spec(spec) if spec is not None else None
    if row is not None:
        return family_writer(row).default_n_layers(size_mb, row)
    return int(min(64, max(2, round(math.sqrt(size_mb) / 3))))


def tensors_per_layer(spec: MoeSpec) -> int:
    row = arch_spec(spec)
    if row is not None:
        return deepseek2.tensors_per_layer(spec) if row.mla else getattr(family_writer(row), "TENSORS_PER_LAYER",
                                                                         gqa.TENSORS_PER_LAYER)
    return 10 + (4 if spec.shared_experts else 0)


def _ff_step(n_embd: int) -> int:
    """Smallest n_ff step that keeps one expert's Q8_0 slice page-aligned (and n_ff % 32 == 0)."""
    groups = n_embd // 64  # one row of n_embd Q8_0 weights = 68 bytes per 64 weights
    need = _PAGE // math.gcd(_PAGE, groups * 68)
    return math.lcm(Q8_BLOCK, need)


def layer_bytes(e: int, f: int, kv: int, spec: MoeSpec) -> int:
    dense = 2 * align_up(4 * e) + 2 * align_up(q8(e, e)) + 2 * align_up(q8(kv, e)) + align_up(4 * e * spec.experts)
    experts = 3 * align_up(spec.experts * q8(f, e))
    shared = 0
    if spec.shared_experts:
        s = spec.shared_experts * f
        shared = align_up(4 * e) + 3 * align_up(q8(s, e))
    return dense + experts + shared


def plan(size_mb: float, n_layers: int, spec: MoeSpec, vocab, where: str) -> Shape:
    """n_embd and the per-expert n_ff that hit the size, experts about as wide as real ones.

    Real MoE models have narrower experts the more of them there are (Mixtral 8 × 3.5
    n_embd, OLMoE 64 × 0.5, Qwen3 128 × 0.375): aim at n_ff ≈ 28 / n_expert × n_embd.
    """
    row = arch_spec(spec)
    if row is not None:
        return family_writer(row).plan(size_mb, n_layers, spec, row, vocab, where)
    target = int(size_mb * MIB)
    fixed = header_bytes(n_layers, vocab, tensors_per_layer(spec))
    ratio = min(3.5, max(0.25, 28.0 / spec.experts))
    aligned, aligned_key = _search(target, fixed, n_layers, spec, vocab, ratio, True)
    loose, loose_key = _search(target, fixed, n_layers, spec, vocab, ratio, False)
    # Page-aligned experts unless that forces a shape far from real ones (over 2x off the
    # width the unaligned search finds); small models may allow no aligned shape at all.
    best = aligned if aligned is not None and aligned_key <= loose_key + math.log(2) else loose
    if best is None:
        raise ShardscopeError(
            f"{where}: cannot make a {size_mb:g} MB model with {plural(n_layers, 'layer')} of "
            f"{plural(spec.experts, 'expert')} "
            f"within {SIZE_TOLERANCE:.0%}; ask for a larger size, fewer layers or fewer experts")
    return best


def plan_near(size_mb: float, n_layers: int, spec: MoeSpec, vocab, where: str) -> Shape:
    """``plan`` at the default depth ``n_layers``, else at the nearest depth (±4 layers) that has
    a shape within the size tolerance; the default's refusal when none has."""
    try:
        return plan(size_mb, n_layers, spec, vocab, where)
    except ShardscopeError as first:
        for delta in (-1, 1, -2, 2, -3, 3, -4, 4):
            if 2 <= n_layers + delta <= 64:
                try:
                    return plan(size_mb, n_layers + delta, spec, vocab, where)
                except ShardscopeError:
                    continue
        low, high = max(2, n_layers - 4), min(64, n_layers + 4)
        raise ShardscopeError(f"{first} (nor at {low} to {high} layers)") from None


def _search(target: int, fixed: int, n_layers: int, spec: MoeSpec, vocab, ratio: float, aligned: bool):
    best, best_key = None, None
    for e in range(128, 8192 + 1, 64):
        kv = kv_heads_for(e // HEAD_DIM) * HEAD_DIM
        budget = (target - fixed - global_bytes(e, vocab.n_vocab)) / n_layers
        per_f = 3 * spec.experts * e * Q8_BYTES / Q8_BLOCK
        if spec.shared_experts:
            per_f += 3 * spec.shared_experts * e * Q8_BYTES / Q8_BLOCK
        f_lin = (budget - layer_bytes(e, 0, kv, spec)) / per_f
        step = _ff_step(e) if aligned else Q8_BLOCK
        f = max(step, int(round(f_lin / step)) * step)
        total = fixed + global_bytes(e, vocab.n_vocab) + n_layers * layer_bytes(e, f, kv, spec)
        if abs(total - target) > SIZE_TOLERANCE * target:
            continue
        key = abs(math.log(f / (ratio * e)))
        if best_key is None or key < best_key:
            best, best_key = Shape(n_layers, e, f, e // HEAD_DIM, kv // HEAD_DIM), key
    return best, best_key


def tensors(shape: Shape, spec: MoeSpec, n_vocab: int) -> list[Tensor]:
    row = arch_spec(spec)
    if row is not None:
        return family_writer(row).tensors(shape, spec, row, n_vocab)
    e, f, kv, n, x = shape.n_embd, shape.n_ff, shape.n_embd_kv, shape.n_layers, spec.experts
    s_e, s_f = 1.0 / math.sqrt(e), 1.0 / math.sqrt(f)
    s_res = 1.0 / math.sqrt(2.0 * n)
    out, tail = edge_globals(n_vocab, e, spec)
    for i in range(n):
        p = f"blk.{i}."
        out += context_attention(attention_tensors(p, e, kv, n), spec, shape, i) + [
            router_weight(p + "ffn_gate_inp.weight", spec, i, e, n),
        ]
        if spec.shared_experts:
            s = spec.shared_experts * f
            out += [
                Tensor(p + "ffn_gate_inp_shexp.weight", 1, e, False, s_e, random_f32=True),
                Tensor(p + "ffn_gate_shexp.weight", s, e, True, s_e),
                Tensor(p + "ffn_up_shexp.weight", s, e, True, s_e),
                Tensor(p + "ffn_down_shexp.weight", e, s, True, 2.0 / math.sqrt(s) * s_res),
            ]
        out += [
            Tensor(p + "ffn_gate_exps.weight", f, e, True, s_e, n_expert=x),
            Tensor(p + "ffn_up_exps.weight", f, e, True, s_e, n_expert=x),
            Tensor(p + "ffn_down_exps.weight", e, f, True, 2.0 * s_f * s_res, n_expert=x),
        ]
    return out + tail


def add_metadata(writer, shape: Shape, spec: MoeSpec) -> None:
    row = arch_spec(spec)
    if row is not None:
        return family_writer(row).add_metadata(writer, shape, spec, row)
    writer.add_expert_count(spec.experts)
    writer.add_expert_used_count(spec.experts_used)
    if spec.shared_experts:
        writer.add_expert_feed_forward_length(shape.n_ff)
        writer.add_expert_shared_feed_forward_length(spec.shared_experts * shape.n_ff)


def like_kimi_k2(routing_skew: float = 0.0) -> MoeSpec:
    """Kimi K2's expert ratios (384 routed : 8 used : 1 shared, first layer dense) as deepseek2."""
    return MoeSpec(**deepseek2.KIMI_K2, routing_skew=routing_skew, arch=deepseek2.ARCH)


PRESETS = {"kimi-k2": like_kimi_k2}
__all__ = ["MoeSpec", "like_kimi_k2", "PRESETS", "validate_spec", "plan", "tensors", "add_metadata", "architecture",
           "default_n_layers", "defaults_for", "alignment", "file_type", "router_scale", "ARCHES", "QUANTS"]
