"""What-if sizing from a routing trace's header: the model's bytes per layer as the trace gives them.

BigMoeOnEdge's ``route_trace v1`` header has, per layer, the bytes of one routed expert and the
layer's dense bytes (attention, norms, router: ``# layer=N expert_bytes=B dense_bytes=D``), plus
``n_expert`` and ``n_expert_used``. That is everything streaming needs but the globals
(embeddings, output head), which are estimated and said so unless ``--globals-bytes`` gives them.

    E_l  = n_expert x expert_bytes_l           routed experts of layer l
    D_l  = dense_bytes_l                      touched every token
    P_l  = k x expert_bytes_l                 a token's picks in layer l (k = --experts-used or the trace's)
    a token's picks = sum_l P_l               what streams per token with no cache
    G    = globals: given, else 2 x vocab x hidden x bytes/weight, hidden from the dense bytes
           of a layer taken as ~4 h^2 weights (q, k, v, o), at Q4_K_M's 4.85 bits

Then the arithmetic of engine/devices/sizing.py (expert cache = budget - G - D, hit replayed from
the same trace at that cache).
"""

from __future__ import annotations

import math
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import bytes_text, plural
from shardscope.engine.devices.devices import Device
from shardscope.engine.devices.sizing import DEFAULT_VOCAB, ModelShape, SizingResult, size_number, size_shape

ESTIMATE_BITS = 4.85  # Q4_K_M's nominal bits per weight: the quant the published traces ran
DENSE_WEIGHTS_PER_H2 = 4.0  # a layer's dense part ~ q, k, v, o projections: 4 h^2 weights (GQA makes it less)


def trace_picks_bytes(header, experts_used: int | None = None) -> float:
    """The bytes of one token's picks in every layer, from the header: k x sum of expert bytes."""
    k = header.n_expert_used if experts_used is None else experts_used
    return float(k * sum(header.unit_bytes.values()))


def estimated_globals_bytes(header) -> tuple[float, str]:
    """Embeddings + output head estimated from the dense bytes per layer, with the sentence saying how."""
    per_layer = sum(header.dense_bytes.values()) / max(len(header.dense_bytes), 1)
    bytes_per_weight = ESTIMATE_BITS / 8
    hidden = math.sqrt(per_layer / bytes_per_weight / DENSE_WEIGHTS_PER_H2)
    estimate = 2 * DEFAULT_VOCAB * hidden * bytes_per_weight
    return estimate, (
        f"globals (embeddings + output head) not in the trace header: estimated as 2 x {DEFAULT_VOCAB // 1000}k "
        f"vocab x ~{hidden:,.0f} hidden (a layer's {bytes_text(per_layer)} of dense bytes taken as "
        f"{DENSE_WEIGHTS_PER_H2:g} h^2 weights at {ESTIMATE_BITS:g} bits) = {bytes_text(estimate)}; "
        "pass --globals-bytes to set them (they change the budget's room, not the bytes streamed)")


def shape_from_trace(trace, where: str, *, experts_used: int | None = None,
                     globals_bytes: float | None = None) -> ModelShape:
    """The model as the trace header describes it; ``experts_used`` re-scales the trace's k."""
    header = trace.header
    if not header.has_layer_bytes:
        raise ShardscopeError(
            f"{where}: the trace header has no dense bytes per layer (only a route_trace v1 header's "
            "'# layer=N expert_bytes=B dense_bytes=D' lines or a '# dense_bytes=' line give them): "
            "give --model or the model's numbers as well")
    k = header.n_expert_used
    if experts_used is not None:
        whole = isinstance(experts_used, int) and not isinstance(experts_used, bool)
        if not whole or not 1 <= experts_used <= header.n_expert:
            raise ShardscopeError(f"--experts-used: must be a whole number from 1 to the trace's "
                                  f"n_expert ({header.n_expert}), got {experts_used!r}")
        k = experts_used
    layers = sorted(header.unit_bytes)
    dense = {layer: header.dense_bytes[layer] for layer in layers}
    experts = {layer: header.n_expert * header.unit_bytes[layer] for layer in layers}
    assumptions: list[str] = []
    if globals_bytes is None:
        g, sentence = estimated_globals_bytes(header)
        assumptions.append(sentence)
    else:
        g = size_number(globals_bytes, "globals_bytes", allow_zero=True)
    if k != header.n_expert_used:
        assumptions.append(
            f"k re-scaled to {k} (the trace ran {header.n_expert_used}): a token's picks are {k} x each layer's "
            "expert bytes; a replayed hit rate is "
            + (f"replayed with the trace's top {k} picks" if k < header.n_expert_used else
               f"the trace's own miss rate at k = {header.n_expert_used} (the hit says how far it may be off)"))
    D, E = float(sum(dense.values())), float(sum(experts.values()))
    f = k / header.n_expert
    name = Path(header.model).name or Path(where).name
    weight = g + D + E
    return ModelShape(
        label=f"{name} ({bytes_text(weight)}, from the trace header)",
        weight_bytes=weight,
        globals_bytes=g,
        dense_layer_bytes=D,
        expert_bytes=E,
        expert_fraction=f,
        n_layers=len(layers),
        unit_bytes=max(dense[layer] + k * header.unit_bytes[layer] for layer in layers),
        n_params=0.0,  # a trace header gives bytes, not parameters
        bits_per_weight=0.0,
        assumptions=tuple(assumptions),
        dense_resident_bytes=g + D,
        layer_picks_bytes=float(max(k * header.unit_bytes[layer] for layer in layers)),
        bytes_source=(f"the trace header of {where}: {plural(len(layers), 'layer')}, {header.n_expert} experts, "
                      f"k = {k}{'' if k == header.n_expert_used else f' (the trace ran {header.n_expert_used})'}, "
                      f"each layer's expert bytes ({bytes_text(min(header.unit_bytes.values()))}-"
                      f"{bytes_text(max(header.unit_bytes.values()))}) and dense bytes; a token's picks "
                      f"{bytes_text(trace_picks_bytes(header, k))}"),
    )


def size_from_trace(
    trace,
    where: str,
    device: Device | str,
    budget_mb: float | None = None,
    policy: str = "pinned",
    prefetch: bool = True,
    *,
    experts_used: int | None = None,
    globals_bytes: float | None = None,
    compute_s_per_token: float = 0.0,
    ssd_mb_s: float | None = None,
    expert_hit_rate: float | None = None,
    expert_policy: str = "auto",
    use_trace_hit: bool = True,
) -> SizingResult:
    """Plan the trace's own model from its header; the hit rate is replayed from the same trace
    (unless ``expert_hit_rate`` is given)."""
    return size_shape(
        shape_from_trace(trace, where, experts_used=experts_used, globals_bytes=globals_bytes),
        device,
        budget_mb=budget_mb,
        policy=policy,
        prefetch=prefetch,
        compute_s_per_token=compute_s_per_token,
        ssd_mb_s=ssd_mb_s,
        expert_hit_rate=expert_hit_rate,
        expert_trace=trace if use_trace_hit and expert_hit_rate is None else None,
        expert_policy=expert_policy,
        expert_trace_k=experts_used,
    )


__all__ = ["shape_from_trace", "size_from_trace", "trace_picks_bytes", "estimated_globals_bytes", "ESTIMATE_BITS"]
