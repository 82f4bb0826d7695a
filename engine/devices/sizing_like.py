"""What-if sizing of a published model's full shape, from its tensor shapes alone (no file, no
weights): ``shardscope size --like kimi-k3``.

Kimi K3 (Moonshot AI, 2026; llama.cpp arch ``kimi-k3``), as its model card and config give it:
93 layers, hidden 7168, vocab 163,840 (untied embedding and head); 69 KDA layers (Kimi Delta
Attention: q, k, v, an output gate and o at 96 heads x 128) and 24 gated MLA layers (q_lora 1536,
kv_lora 512, nope 128 + rope 64, v 128, a sigmoid output gate; every fourth layer and the last);
layer 0 a dense MLP (intermediate 33,792); layers 1-92 a latent MoE: an FP32 router [896 x 7168],
top-16 of 896 routed experts run at 3584 wide (intermediate 3072: 3 x 3584 x 3072 weights, MXFP4 at
0.53125 bytes a weight = 17,547,264 bytes an expert), the token projected down and up around them
(``ffn_routed_down`` / ``ffn_routed_up``), and shared experts at full width (one MLP, intermediate
6144). The trunk's matrices at 4 bits (the published ~27 GB of int4 projections), embedding and
head at 8 bits (~2.4 GB).

The trunk streams as the run streams it (engine/layout/shard_plan.py plan_trunk): each layer's
matrices and its router, cut into equal shards of at most --shard-mb; norms, embedding and head stay
resident. The minimum is engine/layout/budget_minimum.py's: globals + the largest trunk layer +
--prefetch-depth shards + two layers' picks.
"""

from __future__ import annotations

from shardscope.engine.base.units import MIB
from shardscope.engine.devices.sizing import ModelShape
from shardscope.engine.layout.budget_minimum import Minimum

LIKE = ("kimi-k3",)

# Kimi K3's published shape
H, VOCAB, N_LAYERS, N_EXPERT, K = 7168, 163_840, 93, 896, 16
EXPERT_BYTES = 3 * 3584 * 3072 * 17 // 32  # MXFP4: 17 bytes per 32 weights = 17,547,264
INT4, INT8, FP32 = 0.5, 1.0, 4.0
MLA_LAYERS = frozenset(range(3, N_LAYERS, 4)) | {N_LAYERS - 1}  # 3 KDA : 1 MLA, and the last layer


def _kda_params() -> int:
    heads = 96 * 128
    return 4 * H * heads + heads * H  # q, k, v, output gate; o


def _mla_params() -> int:
    q = H * 1536 + 1536 * 96 * (128 + 64)
    kv = H * (512 + 64) + 2 * 512 * 96 * 128  # kv_a (with the rope key); k_b, v_b
    return q + kv + 96 * 128 * H + H * 96 * 128  # o; the sigmoid output gate


def layer_trunk_bytes(layer: int) -> int:
    """One layer's streamed trunk bytes: attention, then the dense MLP (layer 0) or the MoE block's
    shared experts, latent projections and FP32 router."""
    attention = (_mla_params() if layer in MLA_LAYERS else _kda_params()) * INT4
    if layer == 0:
        return int(attention + 3 * H * 33_792 * INT4)
    shared = 3 * H * 6144 * INT4
    latent = 2 * H * 3584 * INT4
    router = N_EXPERT * H * FP32
    return int(attention + shared + latent + router)


def _pieces(n_bytes: int, limit: int) -> list[int]:
    """plan_shards' equal split of a layer larger than a shard."""
    n = max(1, -(-n_bytes // limit))
    return [-(-n_bytes // n)] * n


def shape_like(name: str, shard_mb: float = 64, depth: int = 2) -> ModelShape:
    if name != "kimi-k3":
        raise ValueError(name)
    globals_ = int(2 * VOCAB * H * INT8 + (4 * N_LAYERS + 1) * H * 4)  # embedding, head, norms (F32)
    layers = [layer_trunk_bytes(i) for i in range(N_LAYERS)]
    trunk = sum(layers)
    limit = int(shard_mb * MIB)
    shards = [p for b in layers for p in (_pieces(b, limit) if b > limit else [b])]
    window = min(max(layers) + depth * max(shards), trunk)
    experts = (N_LAYERS - 1) * N_EXPERT * EXPERT_BYTES
    picks = K * EXPERT_BYTES
    minimum = Minimum(globals_, window, 2 * picks, depth, K, False, "trunk layer")
    f = K / N_EXPERT
    n_params = (trunk - (N_LAYERS - 1) * N_EXPERT * H * FP32) / INT4 + (N_LAYERS - 1) * N_EXPERT * H \
        + 2 * VOCAB * H + experts / (17 / 32)
    weight = globals_ + trunk + experts
    return ModelShape(
        label=f"Kimi K3, full published shape ({weight / 1e12:.2f} TB)",
        weight_bytes=float(weight),
        globals_bytes=float(globals_),
        dense_layer_bytes=float(trunk),
        expert_bytes=float(experts),
        expert_fraction=f,
        n_layers=N_LAYERS,
        unit_bytes=float(max(b + (picks if i else 0) for i, b in enumerate(layers))),
        n_params=float(n_params),
        bits_per_weight=8 * weight / n_params,
        assumptions=(
            "Kimi K3's shape from its published config (no file read): trunk matrices at 4 bits, embedding and "
            "head at 8, routers FP32, routed experts MXFP4; a Q4_K trunk (4.5 bits) is 12 % larger",),
        dense_resident_bytes=float(globals_ + trunk),
        layer_picks_bytes=float(picks),
        bytes_source=(f"Kimi K3's published shape (--like kimi-k3): {N_LAYERS} layers (69 KDA, 24 gated MLA), "
                      f"{N_EXPERT} experts top-{K} of {EXPERT_BYTES:,} B (MXFP4) in {N_LAYERS - 1} layers, a token's "
                      f"picks {K * (N_LAYERS - 1) * EXPERT_BYTES / 1e9:.2f} GB; trunk {trunk / 1e9:.1f} GB "
                      f"in {len(shards)} shards of at most {shard_mb:g} MiB"),
        minimum_bytes=float(minimum.bytes),
        minimum_parts=minimum.parts(),
        trunk_bytes=float(trunk),
        trunk_window_bytes=float(window),
        n_expert=N_EXPERT,
        n_expert_used=K,
    )


def expert_picks_per_token() -> int:
    """A cold token's routed-expert bytes: 16 picks in each of the 92 MoE layers."""
    return K * (N_LAYERS - 1) * EXPERT_BYTES


__all__ = ["LIKE", "shape_like", "layer_trunk_bytes", "expert_picks_per_token"]
