"""What makes each MoE architecture ``synth --moe --arch A`` writes: one row per arch.

Users bring Qwen3-MoE, gpt-oss, GLM-4.5, Llama 4, Kimi K2 and DeepSeek-V3 files; the streaming
engine must meet each one's tensors (expert biases, shared experts, dense layers between MoE
layers, router biases, sinks). The flags below say which of llama.cpp's tensors and keys an arch
needs; they were read from llama.cpp's own loader in the llama-cpp-python 0.3.36 build
(src/models/<arch>.cpp ``load_arch_hparams`` / ``load_arch_tensors`` and the graph), and every
arch's file is loaded and run by that libllama in tests/test_arch_matrix.py.

Ratios (expert width, dense width, attention width per n_embd; expert counts) are the named real
model's config.json, so a small synthetic file has that model's proportions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchSpec:
    name: str  # the --arch value
    gguf_arch: str  # general.architecture llama.cpp dispatches on
    like: str  # the real model the ratios come from
    experts: int
    experts_used: int
    shared_experts: int = 0
    dense_lead: int = 0  # leading dense layers (leading_dense_block_count)
    moe_step: int = 1  # an MoE FFN on every moe_step-th layer, dense ones between (interleave_moe_layer_step)
    expert_ff_ratio: float = 0.375  # one expert's FFN width / n_embd
    dense_ff_ratio: float = 2.75  # a dense layer's FFN width / n_embd
    q_ratio: float = 1.0  # n_head · head_dim / n_embd
    kv_group: int = 4  # query heads per KV head
    qk_norm: bool = False  # attn_q_norm / attn_k_norm
    attn_bias: bool = False  # attn_q/k/v .bias
    out_bias: bool = False  # attn_output.bias
    post_attn_norm: bool = False  # the FFN's input norm is post_attention_norm (no ffn_norm)
    sinks: bool = False  # attn_sinks, one logit per head
    sliding_window: int = 0  # > 0: every other layer attends this many tokens (attention.sliding_window)
    expert_biases: bool = False  # ffn_{gate,up,down}_exps.bias: per-expert F32 biases, read with the experts
    router_bias: str = ""  # "exp_probs_b": added to the scores before top-k; "gate_inp": to the logits
    gating: int = 0  # expert_gating_func written (0: the arch's graph fixes it, key not written)
    weights_norm: bool = False
    weights_scale: float = 0.0  # 0: key not written
    rope_fraction: float = 1.0  # rotary dims / head dim
    expert_groups: tuple[int, int] = (0, 0)  # (expert_group_count, expert_group_used_count)
    quant: str = "q8_0"  # the --quant a file gets unless told
    quants: tuple[str, ...] = ("q8_0", "q4_k_m")
    family: str = "gqa"  # the writer module: gqa (synth_gqa_moe), mla (synth_deepseek2), gemma4, qwen3next, kimi-k3
    # > 0: a latent MoE (Kimi K3): the routed experts run at latent_ratio · n_embd (expert_latent_length)
    latent_ratio: float = 0.0
    # Fewer layers make a file llama.cpp 0.3.36 aborts on (bench/sweeps/synth_fuzz.py found them), and why.
    min_layers: int = 1
    min_layers_why: str = ""

    @property
    def mla(self) -> bool:
        return self.family == "mla"


ARCH_SPECS: dict[str, ArchSpec] = {s.name: s for s in (
    # Qwen3-30B-A3B: n_embd 2048, 128 experts top-8 of 768, 32 heads × 128 over 4 KV heads, QK norm
    ArchSpec("qwen3moe", "qwen3moe", "Qwen3-30B-A3B", 128, 8, expert_ff_ratio=768 / 2048,
             dense_ff_ratio=6144 / 2048, q_ratio=2.0, kv_group=8, qk_norm=True),
    # gpt-oss-20b: n_embd 2880, 32 experts top-4 of 2880 in MXFP4 with biases, router bias,
    # 64 heads × 64 over 8, q/k/v/o biases, attention sinks, a 128-token window on every other layer
    ArchSpec("gpt-oss", "gpt-oss", "gpt-oss-20b", 32, 4, expert_ff_ratio=1.0, dense_ff_ratio=1.0,
             q_ratio=4096 / 2880, kv_group=8, attn_bias=True, out_bias=True, post_attn_norm=True, sinks=True,
             sliding_window=128, expert_biases=True, router_bias="gate_inp", quant="mxfp4",
             quants=("mxfp4", "q8_0")),
    # GLM-4.5-Air: n_embd 4096, layer 0 dense (10944), 128 experts top-8 of 1408 + 1 shared,
    # sigmoid router with exp_probs_b, 96 heads × 128 over 8 with q/k/v biases, half-rotary
    ArchSpec("glm4moe", "glm4moe", "GLM-4.5-Air", 128, 8, shared_experts=1, dense_lead=1,
             expert_ff_ratio=1408 / 4096, dense_ff_ratio=10944 / 4096, q_ratio=3.0, kv_group=12,
             attn_bias=True, post_attn_norm=True, router_bias="exp_probs_b", gating=2, weights_norm=True,
             weights_scale=1.0, rope_fraction=0.5),
    # Llama-4-Maverick-17B-128E: n_embd 5120, MoE on every 2nd layer (128 experts top-1 of 8192
    # + 1 shared of the same width), dense FFN 16384 between, 40 heads × 128 over 8, sigmoid
    ArchSpec("llama4", "llama4", "Llama-4-Maverick-17B-128E", 128, 1, shared_experts=1, moe_step=2,
             expert_ff_ratio=8192 / 5120, dense_ff_ratio=16384 / 5120, q_ratio=1.0, kv_group=5, min_layers=4,
             min_layers_why="every 4th layer is a no-RoPE one; with 2 or 3 llama.cpp aborts: "
                            "GGML_ASSERT(buf != NULL && \"tensor buffer not set\")"),
    # Gemma-4-26B-A4B: n_embd 2816, every layer a dense GELU FFN (2112) beside 128 experts top-8 of
    # 704, 16 heads over 8, 5 sliding-window layers to 1 full; the router reads its own scaled norm
    ArchSpec("gemma4", "gemma4", "Gemma-4-26B-A4B", 128, 8, expert_ff_ratio=704 / 2816,
             dense_ff_ratio=2112 / 2816, q_ratio=16 * 256 / 2816, kv_group=2, qk_norm=True, post_attn_norm=True,
             sliding_window=1024, family="gemma4", min_layers=2,
             min_layers_why="a sliding-window layer and the full-attention one; with 1 llama.cpp aborts: "
                            "GGML_ASSERT(hparams.is_swa_any())"),
    # Qwen3-Next-80B-A3B: n_embd 2048, linear attention (gated delta net) on 3 of 4 layers, 512
    # experts top-10 of 512 + 1 shared of 512 on every layer, 16 heads × 256 over 2, quarter-rotary
    ArchSpec("qwen3next", "qwen3next", "Qwen3-Next-80B-A3B", 512, 10, shared_experts=1,
             expert_ff_ratio=512 / 2048, dense_ff_ratio=5120 / 2048, q_ratio=2.0, kv_group=8, qk_norm=True,
             post_attn_norm=True, rope_fraction=0.25, family="qwen3next"),
    # Qwen3.5-35B-A3B (qwen35moe): n_embd 2048, 3 gated delta-net layers to 1 full, 256 experts top-8 of 512 +
    # 1 shared of 512 on every layer, 16 heads × 256 over 2, quarter-rotary IMRoPE
    ArchSpec("qwen35moe", "qwen35moe", "Qwen3.5-35B-A3B", 256, 8, shared_experts=1,
             expert_ff_ratio=512 / 2048, dense_ff_ratio=512 / 2048, q_ratio=2.0, kv_group=8, qk_norm=True,
             post_attn_norm=True, rope_fraction=0.25, family="qwen35moe", quants=("q8_0", "q4_k_m", "mxfp4")),
    # MiniMax-M3 (minimax-m3): MiniMax-M2's attention (48 heads × 128 over 8 at n_embd 3072, Q/K norms, half
    # rotary) with DeepSeek-V3-style MoE (a leading dense layer, 256 experts top-8 of 1536 + 1 shared, sigmoid
    # router + exp_probs_b) and MiniMax Sparse Attention's indexer on the MoE layers. MiniMax-M3's own config
    # is not in the notes: these are M2's ratios with M3's added parts, as llama.cpp's loader reads them.
    ArchSpec("minimax-m3", "minimax-m3", "MiniMax-M3 (M2 ratios)", 256, 8, shared_experts=1, dense_lead=1,
             expert_ff_ratio=1536 / 3072, dense_ff_ratio=8192 / 3072, q_ratio=48 * 128 / 3072, kv_group=6,
             qk_norm=True, router_bias="exp_probs_b", gating=2, weights_norm=True, weights_scale=1.0,
             rope_fraction=0.5, family="minimax-m3", quants=("q8_0", "q4_k_m", "mxfp4")),
    # GLM-5.3-Flash (glm5-next): KDA + NoPE MLA with a k-pool DSA indexer, 4 hyper-connection streams, DeepSeek-style
    # MoE. Its config is not in the notes: GLM-5's MoE counts (256 experts top-8 + 1 shared, layer 0 dense),
    # kimi-k3's layer pattern and head ratio
    ArchSpec("glm5-next", "glm5-next", "GLM-5.3-Flash (GLM-5 counts)", 256, 8, shared_experts=1, dense_lead=1,
             expert_ff_ratio=2048 / 6144, dense_ff_ratio=12288 / 6144, q_ratio=1.0, kv_group=1,
             router_bias="exp_probs_b", gating=2, weights_norm=True, weights_scale=2.5, family="glm5-next",
             quants=("q8_0", "q4_k_m", "mxfp4"), min_layers=2, min_layers_why="the dense layer 0 and one MoE layer"),
    # Kimi-K2-Instruct (deepseek2 in llama.cpp): 384 experts top-8 + 1 shared, layer 0 dense, MLA
    ArchSpec("kimi-k2", "deepseek2", "Kimi-K2-Instruct", 384, 8, shared_experts=1, dense_lead=1,
             expert_ff_ratio=2048 / 7168, dense_ff_ratio=18432 / 7168, router_bias="exp_probs_b", gating=2,
             weights_norm=True, weights_scale=2.827, family="mla"),
    # DeepSeek-V3: as Kimi but 256 experts in 8 groups (top-4 groups, then top-8), 3 dense layers
    ArchSpec("deepseek3", "deepseek2", "DeepSeek-V3", 256, 8, shared_experts=1, dense_lead=3,
             expert_ff_ratio=2048 / 7168, dense_ff_ratio=18432 / 7168, router_bias="exp_probs_b", gating=2,
             weights_norm=True, weights_scale=2.5, expert_groups=(8, 4), family="mla"),
    # Kimi-K3 (its own arch in this llama.cpp): n_embd 7168, 93 layers, KDA linear attention on 69 and gated MLA
    # (96 heads) on every 4th and the last, layer 0 dense (33792), then a latent MoE: 896 experts top-16 of
    # 3072 at 3584 (half of n_embd), MXFP4, sigmoid router + exp_probs_b, two shared experts at full width.
    # expert_weights_scale: Kimi K2's 2.827 (K3's routed_scaling_factor is not in the notes; the writer
    # undoes it in the down weights, so it changes no figure).
    ArchSpec("kimi-k3", "kimi-k3", "Kimi-K3", 896, 16, shared_experts=2, dense_lead=1,
             expert_ff_ratio=3072 / 7168, dense_ff_ratio=33792 / 7168, q_ratio=96 * 128 / 7168, kv_group=1,
             router_bias="exp_probs_b", gating=2, weights_norm=True, weights_scale=2.827, quant="mxfp4",
             quants=("mxfp4", "q4_k_m", "q8_0"), family="kimi-k3", latent_ratio=3584 / 7168, min_layers=2,
             min_layers_why="the dense layer 0 and one MoE layer"),
    # DeepSeek-V4-Flash (deepseek4 in this llama.cpp; config.json): n_embd 4096, 43 layers all MoE, 256 experts
    # top-6 of 2048 + 1 shared, the first 3 layers hash-routed (tid2eid), sqrt-softplus scores (gating 4) +
    # exp_probs_b, routed scale 1.5; 64 heads × 512 over one KV head (8 n_embd), q_lora 1024, MXFP4 experts
    ArchSpec("deepseek4", "deepseek4", "DeepSeek-V4-Flash", 256, 6, shared_experts=1,
             expert_ff_ratio=2048 / 4096, dense_ff_ratio=2048 / 4096, q_ratio=64 * 512 / 4096, kv_group=1,
             router_bias="exp_probs_b", gating=4, weights_norm=True, weights_scale=1.5, quant="mxfp4",
             quants=("mxfp4", "q4_k_m", "q8_0"), family="deepseek4", min_layers=4,
             min_layers_why="three hash-routed layers and a scored one"),
    # --arch deepseek2: the deepseek2 graph with Kimi's shape unless told otherwise
    ArchSpec("deepseek2", "deepseek2", "Kimi-K2-Instruct", 64, 8, shared_experts=1, dense_lead=1,
             expert_ff_ratio=2048 / 7168, dense_ff_ratio=18432 / 7168, router_bias="exp_probs_b", gating=2,
             weights_norm=True, weights_scale=2.827, family="mla"),
)}

# Archs this llama.cpp knows that synth does not write yet, with the reason (refused before writing).
NOT_WRITTEN: dict[str, str] = {}


__all__ = ["ArchSpec", "ARCH_SPECS", "NOT_WRITTEN"]
