"""What-if sizing from numbers alone (total and active parameters, bits, layers): the model's shape
is inferred as all-routed experts (see engine/devices/sizing.py), then sized the same way."""

from __future__ import annotations

import math

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import bytes_text
from shardscope.engine.devices.devices import Device
from shardscope.engine.devices.sizing import (
    DEFAULT_VOCAB,
    ModelShape,
    SizingInput,
    SizingResult,
    size_number,
    size_shape,
)


def _shape_from_numbers(inp: SizingInput) -> ModelShape:
    total = size_number(inp.total_params, "total_params")
    bits = size_number(inp.bits_per_weight, "bits_per_weight")
    if bits > 32:
        raise ShardscopeError(f"size: 'bits_per_weight' must be at most 32, got {bits:g}")
    if isinstance(inp.n_layers, bool) or not isinstance(inp.n_layers, int):
        raise ShardscopeError(f"size: 'n_layers' must be a whole number, got {inp.n_layers!r}")
    if inp.n_layers < 1:
        raise ShardscopeError(f"size: 'n_layers' must be at least 1, got {inp.n_layers}")
    active = total if inp.active_params is None else size_number(inp.active_params, "active_params")
    if active > total:
        raise ShardscopeError(
            f"size: 'active_params' ({active:g}) exceeds 'total_params' ({total:g}); "
            "a token cannot use more parameters than the model has"
        )
    weight = total * bits / 8
    active_bytes = active * bits / 8
    assumptions: list[str] = []
    if inp.globals_bytes is not None and inp.globals_fraction is not None:
        raise ShardscopeError("size: give 'globals_bytes' or 'globals_fraction', not both")
    if inp.globals_bytes is not None:
        globals_ = size_number(inp.globals_bytes, "globals_bytes", allow_zero=True)
    else:
        if inp.globals_fraction is None:
            hidden = math.sqrt(active / inp.n_layers / 12)
            estimate = 2 * DEFAULT_VOCAB * hidden * bits / 8
            fraction = min(estimate / active_bytes, 0.5)
            assumptions.append(
                f"globals (embeddings + output head) estimated as 2 x {DEFAULT_VOCAB // 1000}k vocab x "
                f"~{hidden:,.0f} hidden = {bytes_text(fraction * active_bytes)}; pass globals_bytes to set them"
            )
        else:
            fraction = size_number(inp.globals_fraction, "globals_fraction", allow_zero=True)
            if fraction >= 1:
                raise ShardscopeError(f"size: 'globals_fraction' must be below 1, got {fraction:g}")
        globals_ = fraction * active_bytes
    if globals_ >= active_bytes:
        raise ShardscopeError(
            f"size: globals ({bytes_text(globals_)}) must be smaller than the bytes a token touches "
            f"({bytes_text(active_bytes)}); no layer weights would be left"
        )
    layer_total = weight - globals_
    touched_layer = active_bytes - globals_
    if active < total:
        dense, experts, f = 0.0, layer_total, touched_layer / layer_total
        assumptions.append(
            f"MoE from numbers: all layer bytes treated as routed experts with uniform routing "
            f"(a token touches {f:.3g} of them); a GGUF header gives the real split"
        )
    else:
        dense, experts, f = layer_total, 0.0, 1.0
    label = inp.name or f"{bytes_text(weight)} model"
    return ModelShape(
        label=label,
        weight_bytes=weight,
        globals_bytes=globals_,
        dense_layer_bytes=dense,
        expert_bytes=experts,
        expert_fraction=f,
        n_layers=inp.n_layers,
        unit_bytes=touched_layer / inp.n_layers,
        # all routed (D = 0): the resident part is the globals, one layer's picks what a layer touches
        dense_resident_bytes=globals_ + dense,
        layer_picks_bytes=(touched_layer - dense) / inp.n_layers,
        n_params=total,
        bits_per_weight=bits,
        assumptions=tuple(assumptions),
        bytes_source=("parameter counts (total, active, bits, layers): no GGUF header or trace header with "
                      "layer bytes was given"),
    )


def size_from_numbers(
    inp: SizingInput,
    device: Device | str,
    budget_mb: float | None = None,
    policy: str = "pinned",
    prefetch: bool = True,
    *,
    compute_s_per_token: float = 0.0,
    ssd_mb_s: float | None = None,
    expert_hit_rate: float | None = None,
    expert_trace=None,
    expert_policy: str = "auto",
) -> SizingResult:
    """Plan a model given by its size (see the module doc for every formula).

    ``budget_mb`` None takes the device's app limit minus :data:`DEFAULT_OVERHEAD_MB`.
    ``ssd_mb_s`` replaces the device's disk for a what-if (marked unverified).
    Refuses sizes no model has and budgets below the minimum, saying the minimum.
    """
    return size_shape(
        _shape_from_numbers(inp),
        device,
        budget_mb=budget_mb,
        policy=policy,
        prefetch=prefetch,
        compute_s_per_token=compute_s_per_token,
        ssd_mb_s=ssd_mb_s,
        expert_hit_rate=expert_hit_rate,
        expert_trace=expert_trace,
        expert_policy=expert_policy,
    )


