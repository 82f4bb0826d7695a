"""What-if sizing: how would a model too big to run here stream on a device?

It answers from a GGUF header (:func:`size_from_gguf_header`), from a routing trace's
header (engine/devices/sizing_trace.py: each layer's expert and dense bytes), or, as the
fallback, from a model's parameter counts (:func:`size_from_numbers`): how many bytes one token touches, how many of
those fit in the device's memory budget, how many must come from the SSD every
token, and what the roofline in :mod:`engine.devices.projection` makes of that.

The arithmetic, every step of it in bytes (units: see :mod:`engine.devices`)::

    W  = weight bytes          = total_params x bits_per_weight / 8
    A  = bytes touched / token = active_params x bits_per_weight / 8   (dense: A = W)
    G  = globals (embeddings, output head, final norm): always resident
    D  = layer bytes every token touches (attention, dense FFN, shared experts, norms)
    E  = routed-expert bytes; a token touches the fraction f of them,
         so A = G + D + f x E and W = G + D + E
    unit = the most bytes one layer touches for one token (max over layers of D_k + f E_k)

    budget   = device app limit - KV cache - compute buffers - runtime   (default)
    dense:   minimum  = G + 2 x unit with prefetch (the layer being computed + the one
                        being read), G + 1 x unit without; the unit is a whole layer
             cache C  = budget - minimum   (what may stay resident besides the globals)
    MoE:     expert streaming keeps G + D resident and streams the picks; its minimum and
             expert cache are engine/layout/budget_minimum.py's, the run's own:
             minimum  = G + D + 2 x P, P = one layer's k picked experts (the layer
                        computing + the next loading; the prompt goes in micro-batches)
             expert cache X = budget - G - D (the 2 x P of one step included)

    model fits (W <= budget): everything resident, nothing streams.
    pinned: pin D first (touched every token: each pinned byte saves one read per
            token), then experts (each pinned byte saves f reads per token);
            streamed = (D - D_pinned) + f x (E - E_pinned)
    lru:    layers are visited in the same order every token and the model does not
            fit, so LRU evicts every byte before it is used again:
            streamed = D + f x E (everything a token touches except the globals)

    expert hit rate h given (measured by an expert run, or replayed from a routing
    trace at the same share of the expert bytes): the expert cache serves a share h
    of the picked experts, whatever the policy; dense bytes are pinned first:
            streamed = (D - D_pinned) + (1 - h) x f x E
            and misses are waited for (reads do not overlap compute)

    s/token = roofline(ssd = streamed / ssd_bw, dram = (A - streamed) / dram_bw,
                       compute = compute_s_per_token, 0 unless given)

From numbers alone the D/E split is unknown, so a MoE is treated as all-routed
(D = 0, f = (A - G) / (W - G)): a pinned byte is then an expert byte hit with
probability f, i.e. routing is assumed uniform over experts. A GGUF header gives the
real split (tensors named ``*_exps*`` are routed experts; ``<arch>.expert_count`` and
``<arch>.expert_used_count`` give f).

Compute is not modelled unless ``compute_s_per_token`` is given (measure a smaller
model of the same family on the device), so the projected tok/s is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import ANY, POSITIVE, ZERO_OR_MORE, finite_number
from shardscope.engine.base.quantity_text import bytes_text, mib_text, plural, seconds_text
from shardscope.engine.devices.devices import MIB, Device, get_device, weight_budget_mb
from shardscope.engine.devices.projection import (
    Projection,
    RunMeasurement,
    moe_ssd_bytes_per_token,
    project_from_bandwidth,
)
from shardscope.engine.layout.budget_minimum import STEP_LAYERS, min_cache_for, whole_mb
from shardscope.engine.stream.ssd_rate_limiter import REQUEST_BYTES

__all__ = [
    "SizingInput",
    "SizingResult",
    "DEFAULT_OVERHEAD_MB",
    "DEFAULT_VOCAB",
    "POLICIES",
]

POLICIES = ("pinned", "lru")
POLICIES_AT_K = ("lru", "lfu", "decay", "auto")  # expert policies replay_at_k replays as replay_one does

# What the app holds besides weights when no budget is given: profiles/iphone-16-pro-tuned.toml's split.
DEFAULT_OVERHEAD_MB = {"kv_cache_mb": 256.0, "compute_buffers_mb": 256.0, "runtime_mb": 512.0}

# Unknown globals = 2 x vocab x hidden, hidden = sqrt(params per layer / 12) (a layer is ~12 h^2);
# how close that lands on real models is in docs/decisions.md.
DEFAULT_VOCAB = 128_000


# ---------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class SizingInput:
    """A model described by numbers only.

    ``active_params``: parameters one token uses (MoE); None means dense (= total).
    ``globals_fraction``: globals as a share of the bytes one token touches (of all
    weights for a dense model); ``globals_bytes`` gives them exactly instead. With
    neither they are estimated from the model's shape (see :data:`DEFAULT_VOCAB`)
    and the result says so.
    """

    total_params: float
    active_params: float | None
    bits_per_weight: float
    n_layers: int
    globals_fraction: float | None = None
    globals_bytes: float | None = None
    name: str = ""


@dataclass(frozen=True)
class ModelShape:
    """A model reduced to what streaming cares about (see the module doc's letters)."""

    label: str
    weight_bytes: float  # W
    globals_bytes: float  # G
    dense_layer_bytes: float  # D
    expert_bytes: float  # E
    expert_fraction: float  # f
    n_layers: int
    unit_bytes: float  # most bytes one layer touches per token
    n_params: float
    bits_per_weight: float
    assumptions: tuple[str, ...] = ()
    dense_resident_bytes: float = 0.0  # MoE: G + D as expert streaming holds them (whole pages from a file)
    layer_picks_bytes: float = 0.0  # MoE: P, the most bytes one layer's k picked experts book
    bytes_source: str = ""  # where the bytes per layer came from (GGUF header, trace header, parameter counts)
    # The run's own minimum where the layout is known (engine/layout/budget_minimum.py, as bench applies it)
    minimum_bytes: float = 0.0
    minimum_parts: str = ""
    # MoE: the trunk's bytes that stream by layer when the budget cannot hold them (its shards; 0: the
    # trunk stays resident) and its window (the largest trunk layer + the prefetched shards)
    trunk_bytes: float = 0.0
    trunk_window_bytes: float = 0.0
    n_expert: int = 0  # MoE: experts per layer and k (the prompt's micro-batches), 0 where unknown
    n_expert_used: int = 0
    # the fixed state of recurrent layers (KDA, gated delta net, deepseek4's compressors), booked with the KV
    # cache (engine/layout/recurrent_state.py), and what it is
    state_bytes: float = 0.0
    state_note: str = ""

    @property
    def active_bytes(self) -> float:
        return self.globals_bytes + self.dense_layer_bytes + self.expert_fraction * self.expert_bytes

    @property
    def is_moe(self) -> bool:
        return self.expert_bytes > 0 and self.expert_fraction < 1


# --------------------------------------------------------------------- results
@dataclass(frozen=True)
class SizingResult:
    """Everything the sizing worked out, in bytes and seconds, plus how it got there.

    ``resident_bytes`` = globals + pinned cache (memory kept across tokens);
    ``staging_bytes`` = the layer buffers streaming needs on top (within the budget);
    ``hit_rate`` = share of per-token layer bytes served from memory instead of disk.
    ``assumptions`` lists every number the sizing had to assume.
    """

    model: str
    device_id: str
    device_name: str
    ssd_mb_s: float
    dram_mb_s: float
    policy: str
    prefetch: bool
    weight_bytes: float
    n_params: float
    bits_per_weight: float
    n_layers: int
    bytes_per_layer: float
    globals_bytes: float
    active_bytes_per_token: float
    active_bytes_per_layer: float
    is_moe: bool
    budget_mb: float
    budget_bytes: float
    budget_note: str
    min_budget_bytes: float
    fits_in_memory: bool
    resident_bytes: float
    staging_bytes: float
    streamed_bytes_per_token: float
    hit_rate: float
    compute_s_per_token: float
    projection: Projection
    summary: str
    assumptions: tuple[str, ...] = field(default=(), hash=False)
    unverified: tuple[str, ...] = ()
    ssd_latency_us: float = 0.0  # the device's SSD model beyond its bandwidth
    ssd_queue_depth: int = 32
    dense_resident_bytes: float = 0.0  # MoE: G + D, resident for the whole run
    layer_picks_bytes: float = 0.0  # MoE: P, one layer's k picked experts
    expert_cache_bytes: float = 0.0  # MoE: budget - G - D, the one expert cache of this budget
    bytes_source: str = ""  # the model's bytes: from a GGUF header, a trace header or parameter counts
    minimum_parts: str = ""  # what the minimum is made of, where the run's own minimum was read
    # MoE with a streamed trunk (the budget cannot hold it): the split and what each side reads per token
    trunk_streams: bool = False
    trunk_bytes: float = 0.0  # every trunk byte that can stream
    trunk_hold_bytes: float = 0.0  # what the trunk's shards may keep resident (its window included)
    trunk_share: int = 0  # percent of the room above the minimum given to the trunk
    trunk_share_chosen: bool = True  # the engine's choice (budget_split.default_trunk_share)
    trunk_streamed_bytes: float = 0.0  # per token
    expert_streamed_bytes: float = 0.0  # per token
    prompt_tokens: int = 100  # the TTFT's prompt
    prompt_batch_tokens: int = 0  # per micro-batch (0: the whole prompt in one pass)
    ttft_s: float = 0.0  # the prompt's reads over the SSD (compute not modelled unless given)
    flash_model: str = ""  # the device's flash model in words (fitted from its probe where the preset has one)

    @property
    def tokens_per_s(self) -> float:
        return self.projection.tokens_per_s

    @property
    def s_per_token(self) -> float:
        return self.projection.s_per_token

    @property
    def bound(self) -> str:
        return self.projection.bound


def _larger_limit_hint(device: Device, larger_budget_mb: float | None, minimum: float) -> str:
    """Where the preset's larger limit would give a default budget that holds the minimum, the refusal
    names the flag that sizes with it (the headline, Kimi K3 on the iPhone, needs it)."""
    if larger_budget_mb is None or larger_budget_mb * MIB < minimum:
        return ""
    needs = f" ({device.extended_limit_requires})" if device.extended_limit_requires else ""
    return f"; --extended-limit sizes with the preset's {device.app_memory_limit_extended_mb:,.0f} MiB app limit{needs}"


def size_number(value, key: str, *, positive: bool = True, allow_zero: bool = False) -> float:
    sign = (ZERO_OR_MORE if allow_zero else POSITIVE) if positive else ANY
    return finite_number(value, "size", key, sign=sign)



# ------------------------------------------------------------------ the plan
def size_shape(
    shape: ModelShape,
    device: Device | str,
    *,
    budget_mb: float | None,
    policy: str,
    prefetch: bool,
    compute_s_per_token: float,
    ssd_mb_s: float | None,
    expert_hit_rate: float | None = None,
    expert_trace=None,
    expert_policy: str = "auto",
    trunk_share: int = 0,
    expert_trace_k: int | None = None,  # the run's k where it is not the trace's (size --trace --experts-used)
) -> SizingResult:
    if isinstance(device, str):
        device = get_device(device)
    if policy not in POLICIES:
        raise ShardscopeError(f"size: 'policy' must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not isinstance(prefetch, bool):
        raise ShardscopeError(f"size: 'prefetch' must be true or false, got {prefetch!r}")
    compute = size_number(compute_s_per_token, "compute_s_per_token", allow_zero=True)
    assumptions = list(shape.assumptions)
    unverified = set(device.unverified)
    if ssd_mb_s is not None:
        device = device.with_ssd(size_number(ssd_mb_s, "ssd_mb_s"))
        unverified.add("ssd_read_mb_s")

    larger_budget_mb = None  # a default budget under the preset's larger limit, where it has one
    if budget_mb is None:
        o = dict(DEFAULT_OVERHEAD_MB)
        o["kv_cache_mb"] = round(o["kv_cache_mb"] + shape.state_bytes / MIB)  # + the recurrent state
        budget_mb = weight_budget_mb(device, **o)
        extended = device.app_memory_limit_extended_mb
        if extended is not None and extended > device.app_memory_limit_mb:  # what --extended-limit would give
            larger_budget_mb = weight_budget_mb(device.with_extended_limit(), **o)
        if shape.state_bytes:
            assumptions.append(f"KV cache booked with the model's {shape.state_note}: "
                               f"{shape.state_bytes / MIB:,.0f} MiB (fixed, whatever the context length)")
        budget_note = (
            f"app limit {device.app_memory_limit_mb:g} MiB - KV cache {o['kv_cache_mb']:g} "
            f"- compute buffers {o['compute_buffers_mb']:g} - runtime {o['runtime_mb']:g}"
        )
        assumptions.append(
            f"KV cache + compute buffers + runtime assumed {sum(o.values()):g} MiB "
            "(as the built-in iPhone profile); pass --budget-mb to set the memory budget"
        )
    else:
        budget_mb = size_number(budget_mb, "budget_mb")
        if budget_mb > device.app_memory_limit_mb:
            raise ShardscopeError(
                f"size: budget {budget_mb:g} MiB exceeds the app memory limit of {device.name} "
                f"({device.app_memory_limit_mb:g} MiB), which must also hold the KV cache and runtime"
            )
        budget_note = f"given; app limit {device.app_memory_limit_mb:g} MiB"
    budget = budget_mb * MIB

    W, G, D, E, f = (shape.weight_bytes, shape.globals_bytes, shape.dense_layer_bytes,
                     shape.expert_bytes, shape.expert_fraction)
    A = shape.active_bytes
    moe = shape.is_moe
    n_units = STEP_LAYERS if moe else 2 if prefetch else 1
    T, window = shape.trunk_bytes, shape.trunk_window_bytes  # the trunk's streamable bytes (0: it stays resident)
    if moe:  # expert streaming: engine/layout/budget_minimum.py's rule, as the run applies it
        resident_dense, picks = shape.dense_resident_bytes or G + D, shape.layer_picks_bytes
        staging = min_cache_for(picks, speculation=False)
        minimum = shape.minimum_bytes or resident_dense - T + window + staging
        parts = shape.minimum_parts or (
            f"globals {mib_text(resident_dense - T)} + trunk window {mib_text(window)} + {n_units} x "
            f"{mib_text(picks)}: "
            "one layer's picked experts")
    else:
        staging = n_units * shape.unit_bytes
        minimum = shape.minimum_bytes or G + staging
        parts = shape.minimum_parts or (
            f"globals {mib_text(G)} + {n_units} x {mib_text(shape.unit_bytes)} that one layer touches per token")
        if shape.minimum_bytes:
            staging = minimum - G
    expert_cache = 0.0
    split = dict(trunk_bytes=T)

    if W <= budget:
        fits, resident, staging, streamed, overlap = True, W, 0.0, 0.0, prefetch
    elif budget < minimum:
        raise ShardscopeError(
            f"size: budget {budget_mb:,.0f} MiB is below the minimum of {whole_mb(minimum):,} MiB for "
            f"{shape.label} on {device.name} ({parts}){_larger_limit_hint(device, larger_budget_mb, minimum)}"
        )
    elif moe and T > 0 and budget < resident_dense + staging:
        # The budget cannot hold the trunk: it streams by layer beside the experts (budget_split.split_budget)
        fits, overlap = False, prefetch
        resident, streamed, expert_cache, split = _trunk_streamed(
            shape, budget, minimum, staging, trunk_share, expert_hit_rate, expert_trace, expert_policy, assumptions,
            expert_trace_k)
        if expert_hit_rate is not None or expert_trace is not None:
            overlap = False
    elif moe:
        fits, overlap = False, prefetch
        expert_cache = budget - resident_dense  # the run's expert cache of this budget: one figure
        if expert_hit_rate is not None or expert_trace is not None:
            hit, source = _expert_hit(expert_hit_rate, expert_trace, expert_policy, expert_cache / E, expert_trace_k)
            streamed = moe_ssd_bytes_per_token(0.0, f * E, hit)
            resident = resident_dense + expert_cache
            overlap = False
            assumptions.append(
                f"expert hit rate {hit:.1%} ({source}) on the {mib_text(expert_cache)} expert cache "
                f"({expert_cache / E:.3%} of the experts): per token (1 - {hit:.3g}) x {bytes_text(f * E)} of "
                "picked experts; misses are waited for, so reads do not overlap compute")
        elif policy == "pinned":  # the cache beyond one step's picks holds experts for good
            e_pinned = min(expert_cache - staging, E)
            streamed = f * (E - e_pinned)
            resident = resident_dense + e_pinned
        else:
            streamed = f * E
            resident = resident_dense + expert_cache - staging
            assumptions.append(
                "lru: every token visits the layers in the same order and the model does not fit, "
                "so each expert is evicted before its next use (pessimistic when the cache exceeds "
                "one token's picks)")
    else:
        fits = False
        cache = budget - minimum
        overlap = prefetch
        if policy == "pinned":
            d_pinned = min(cache, D)
            e_pinned = min(cache - d_pinned, E)
            streamed = (D - d_pinned) + f * (E - e_pinned)
            resident = G + d_pinned + e_pinned
        else:
            streamed = D + f * E
            resident = G + cache
            assumptions.append(
                "lru: every token visits the layers in the same order and the model does not fit, "
                "so each byte is evicted before its next use (exact for dense models, pessimistic "
                "for MoE when the cache exceeds one token's working set)"
            )
    touched_layers = A - G
    hit_rate = 1.0 - streamed / touched_layers if touched_layers > 0 else 1.0
    if shape.is_moe and not fits and expert_hit_rate is None and expert_trace is None:
        assumptions.append(
            f"expert hit rate not given: the cache serves picked experts only by its share of them "
            f"(uniform routing, {hit_rate:.2%} of a token's layer bytes); pass --expert-hit-rate or --trace "
            "for a measured or replayed one")

    prompt = _prompt_reads(shape, fits, split, expert_cache, streamed)
    measurement = RunMeasurement(
        ssd_bytes_per_token=streamed,
        resident_bytes_per_token=A - streamed,
        compute_s_per_token=compute,
        host_threads=1,
        prefetch=overlap,
        # the SSD model's latency term: streamed bytes in requests of up to REQUEST_BYTES (the
        # experts of a large model are far bigger), one batch per layer (a layer waits for its reads)
        ssd_requests_per_token=streamed / REQUEST_BYTES,
        ssd_batches_per_token=float(shape.n_layers) if streamed > 0 else 0.0,
    )
    projection = project_from_bandwidth(
        measurement, ssd_mb_s=device.ssd_read_mb_s, dram_mb_s=device.dram_mb_s,
        ssd_latency_s=device.ssd_latency_us * 1e-6, ssd_queue_depth=device.ssd_queue_depth,
        flash=device.flash_model,  # the preset's probe-fitted flash model (engine/devices/flash_model.py)
    )
    if compute == 0:
        assumptions.append("compute not modelled (0 s): the tok/s is an upper bound")
    ttft_s = prompt["bytes"] / (device.ssd_read_mb_s * 1e6) + compute * prompt["tokens"]

    summary = (
        f"{shape.label} on {device.name} at {device.ssd_read_mb_s / 1000:g} GB/s: "
        f"{seconds_text(projection.s_per_token)} per token ({projection.tokens_per_s:.3g} tok/s), "
        f"{projection.bound_text}; "
        + (
            "fits in memory, nothing streams"
            if fits
            else f"reads {bytes_text(streamed)} per token from the SSD, {mib_text(resident)} resident"
        )
    )
    return SizingResult(
        model=shape.label,
        device_id=device.id,
        device_name=device.name,
        ssd_mb_s=device.ssd_read_mb_s,
        dram_mb_s=device.dram_mb_s,
        policy=policy,
        prefetch=prefetch,
        weight_bytes=W,
        n_params=shape.n_params,
        bits_per_weight=shape.bits_per_weight,
        n_layers=shape.n_layers,
        bytes_per_layer=(W - G) / shape.n_layers,
        globals_bytes=G,
        active_bytes_per_token=A,
        active_bytes_per_layer=shape.unit_bytes,
        is_moe=shape.is_moe,
        budget_mb=float(budget_mb),
        budget_bytes=budget,
        budget_note=budget_note,
        min_budget_bytes=minimum,
        fits_in_memory=fits,
        resident_bytes=resident,
        staging_bytes=staging,
        streamed_bytes_per_token=streamed,
        hit_rate=hit_rate,
        compute_s_per_token=compute,
        projection=projection,
        summary=summary,
        assumptions=tuple(assumptions),
        unverified=tuple(sorted(unverified)),
        ssd_latency_us=device.ssd_latency_us,
        ssd_queue_depth=device.ssd_queue_depth,
        dense_resident_bytes=shape.dense_resident_bytes if moe else 0.0,
        layer_picks_bytes=shape.layer_picks_bytes if moe else 0.0,
        expert_cache_bytes=expert_cache,
        bytes_source=shape.bytes_source,
        flash_model=(f"{device.flash_model.describe()}, fitted from the preset's flash probe"
                     if device.flash_fit is not None else ""),
        minimum_parts=parts if shape.minimum_parts else "",
        prompt_tokens=prompt["tokens"],
        prompt_batch_tokens=prompt["batch"],
        ttft_s=ttft_s,
        **split,
    )


def _trunk_streamed(shape: ModelShape, budget: float, minimum: float, staging: float, trunk_share: int,
                    expert_hit_rate, expert_trace, expert_policy: str, assumptions: list,
                    expert_trace_k: int | None = None) -> tuple:
    """(resident, streamed per token, expert cache, the split's fields) where the trunk streams by
    layer: the room above the minimum goes ``trunk_share`` % to the trunk (0: the engine's choice,
    budget_split.default_trunk_share: the trunk first), the rest to the expert cache; the trunk's
    pinned layers are what it holds beyond its window (the run's pinned policy)."""
    from shardscope.engine.experts.budget_split import TRUNK_GAIN

    T, window, E, f = shape.trunk_bytes, shape.trunk_window_bytes, shape.expert_bytes, shape.expert_fraction
    chosen = not trunk_share
    share = trunk_share or (100 if TRUNK_GAIN >= f else 1)  # uniform routing: an expert is picked with chance k/n
    room = budget - minimum
    hold = window + min(T - window, room * share / 100)
    globals_ = (shape.dense_resident_bytes or shape.globals_bytes + shape.dense_layer_bytes) - T
    cache = budget - globals_ - hold
    pinned_trunk = T if hold >= T else max(0.0, hold - window)
    trunk_read = T - pinned_trunk
    if expert_hit_rate is not None or expert_trace is not None:
        hit, source = _expert_hit(expert_hit_rate, expert_trace, expert_policy, cache / E, expert_trace_k)
        expert_read = (1 - hit) * f * E
        held = cache
        assumptions.append(f"expert hit rate {hit:.1%} ({source}) on the {mib_text(cache)} expert cache")
    else:
        e_pinned = min(max(cache - staging, 0.0), E)  # the cache beyond one step's picks holds experts for good
        expert_read = f * (E - e_pinned)
        held = e_pinned
    assumptions.append(
        f"the trunk streams by layer: {mib_text(hold)} of its {mib_text(T)} held ({mib_text(pinned_trunk)} pinned "
        f"layers + a window of {mib_text(window)}), the rest read again every token")
    split = dict(trunk_streams=True, trunk_bytes=T, trunk_hold_bytes=hold, trunk_share=int(share),
                 trunk_share_chosen=chosen, trunk_streamed_bytes=trunk_read, expert_streamed_bytes=expert_read)
    return globals_ + pinned_trunk + held, trunk_read + expert_read, cache, split


def _prompt_reads(shape: ModelShape, fits: bool, split: dict, expert_cache: float, streamed: float) -> dict:
    """A 100-token prompt's reads: in micro-batches whose picks fit the expert cache (budget_minimum.
    prompt_batch_tokens), each batch reading the streamed trunk once and each layer's distinct picks
    (uniform routing: n x (1 - (1 - k/n)^m) experts of m tokens)."""
    tokens = 100
    if fits or streamed <= 0:
        return {"tokens": tokens, "batch": 0, "bytes": 0.0}
    n, k = shape.n_expert, shape.n_expert_used
    if not shape.is_moe or not n or not k:  # dense: the prompt reads the streamed layers once
        return {"tokens": tokens, "batch": 0, "bytes": streamed}
    unit = shape.layer_picks_bytes / k
    batch = int(expert_cache // (k * unit)) if expert_cache < n * unit else 0
    m = batch or tokens
    n_batches = -(-tokens // m)
    n_moe_layers = round(shape.expert_bytes / (n * unit)) if unit else shape.n_layers
    distinct = n * (1 - (1 - k / n) ** m)
    per_batch = split.get("trunk_streamed_bytes", 0.0) + n_moe_layers * distinct * unit
    return {"tokens": tokens, "batch": batch, "bytes": n_batches * per_batch}


def _expert_hit(given: float | None, trace, policy: str, share: float, k: int | None = None) -> tuple[float, str]:
    """The expert hit rate to plan with, and where it came from.

    A routing trace is replayed with a cache holding the same share of its model's
    expert bytes as the device's cache holds of the planned model's; at the run's ``k`` where it
    differs from the trace's (engine/devices/replay_at_k.py: below it the trace's top-k cut, above
    it the trace's miss rate with how far it may be off).
    """
    if given is not None:
        hit = size_number(given, "expert_hit_rate", allow_zero=True)
        if hit > 1:
            raise ShardscopeError(f"size: --expert-hit-rate must be between 0 and 1, got {hit:g}")
        return hit, "given"
    from shardscope.engine.experts.replay import min_cache_bytes, replay_one

    header = trace.header
    traced_experts = header.n_expert * sum(header.unit_bytes.values())
    cache = int(share * traced_experts)
    floor = min_cache_bytes(trace)
    if cache < floor:
        raise ShardscopeError(
            f"size: the device's expert cache is {share:.3%} of the experts; replayed on the trace's model that is "
            f"{cache / MIB:.2f} MiB, below the {floor / MIB:.2f} MiB one layer's picks need there (trace a "
            "model with smaller experts, or pass --expert-hit-rate)")
    # the optimum and a hot cache with no prompt pass to learn from (an oracle) replay only at the trace's k
    at_k_replays = policy in POLICIES_AT_K or (policy == "hot" and any(r.prompt for r in trace.records))
    if k is not None and k != header.n_expert_used and at_k_replays:
        from shardscope.engine.devices.replay_at_k import replay_at_k

        at_k = replay_at_k(trace, policy, cache, k)
        return at_k.hit, (f"replayed from the trace of {header.model or 'a run'}, {policy}, "
                          f"{plural(at_k.n_tokens, 'token')}, at k = {k}: {at_k.note}")
    row = replay_one(trace, policy, cache)
    return row.expert_hit_rate, (f"replayed from the trace of {header.model or 'a run'}, {policy}, "
                                 f"{plural(row.n_tokens, 'token')}")
