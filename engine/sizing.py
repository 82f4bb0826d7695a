"""What-if sizing: how would a model too big to run here stream on a device?

It answers from a model's size alone (:func:`size_from_numbers`) or from a GGUF
header (:func:`size_from_gguf_header`): how many bytes one token touches, how many of
those fit in the device's memory budget, how many must come from the SSD every
token, and what the roofline in :mod:`engine.projection` makes of that.

The arithmetic, every step of it in bytes (units: see :mod:`engine.devices`)::

    W  = weight bytes          = total_params x bits_per_weight / 8
    A  = bytes touched / token = active_params x bits_per_weight / 8   (dense: A = W)
    G  = globals (embeddings, output head, final norm): always resident
    D  = layer bytes every token touches (attention, dense FFN, shared experts, norms)
    E  = routed-expert bytes; a token touches the fraction f of them,
         so A = G + D + f x E and W = G + D + E
    unit = the most bytes one layer touches for one token (max over layers of D_k + f E_k)

    budget   = device app limit - KV cache - compute buffers - runtime   (default)
    minimum  = G + 2 x unit with prefetch (the layer being computed + the one being
               read), G + 1 x unit without; for a dense model the unit is a whole layer
    cache C  = budget - minimum   (what may stay resident besides the globals)

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

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from shardscope.engine.devices import MIB, Device, get_device, weight_budget_mb
from shardscope.engine.errors import ShardscopeError
from shardscope.engine.finite import ANY, POSITIVE, ZERO_OR_MORE, finite_number
from shardscope.engine.projection import Projection, RunMeasurement, moe_ssd_bytes_per_token, project_from_bandwidth

__all__ = [
    "SizingInput",
    "SizingResult",
    "size_from_numbers",
    "size_from_gguf_header",
    "format_sizing",
    "DEFAULT_OVERHEAD_MB",
    "DEFAULT_VOCAB",
    "POLICIES",
]

POLICIES = ("pinned", "lru")

# What the app holds besides weights when no budget is given: profiles/iphone-16-pro.toml's split.
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
class _Shape:
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

    @property
    def tokens_per_s(self) -> float:
        return self.projection.tokens_per_s

    @property
    def s_per_token(self) -> float:
        return self.projection.s_per_token

    @property
    def bound(self) -> str:
        return self.projection.bound


# ------------------------------------------------------------------ formatting
def _bytes(n: float) -> str:
    """Decimal units (kB/MB/GB/TB = 10^3..10^12), like disk sizes and bandwidths."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def _mib(n: float) -> str:
    """Memory amounts in MB = MiB, the unit of budget_mb, so they compare with the budget."""
    if n < 10 * MIB:
        return f"{n / MIB:.3g} MiB"
    return f"{n / MIB:,.0f} MiB"


def _seconds(s: float) -> str:
    if s >= 7200:
        return f"{s:,.0f} s ({s / 3600:.1f} h)"
    if s >= 120:
        return f"{s:,.0f} s ({s / 60:.1f} min)"
    if s >= 1 or s == 0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def _rate(tokens_per_s: float) -> str:
    if tokens_per_s >= 0.1:
        return f"{tokens_per_s:.3g} tok/s"
    return f"{tokens_per_s:.2g} tok/s (one token every {_seconds(1 / tokens_per_s)})"


def _params(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def format_sizing(result: SizingResult) -> str:
    """The multi-line text ``shardscope plan`` prints: numbers, then how they were got."""
    r = result
    p = r.projection
    unver = set(r.unverified)

    def tag(quantity: str) -> str:
        return " (unverified)" if quantity in unver else ""

    lines = [f"Plan: {r.model} on {r.device_name}"]
    lines.append(
        f"  device      SSD {r.ssd_mb_s:g} MB/s{tag('ssd_read_mb_s')}, "
        f"DRAM {r.dram_mb_s:g} MB/s{tag('dram_mb_s')}"
    )
    kind = "MoE" if r.is_moe else "dense"
    lines.append(
        f"  weights     {_bytes(r.weight_bytes)} ({_params(r.n_params)} params x "
        f"{r.bits_per_weight:.3g} bits, {kind}), {r.n_layers} layers x {_bytes(r.bytes_per_layer)}, "
        f"globals {_bytes(r.globals_bytes)}"
    )
    share = r.active_bytes_per_token / r.weight_bytes
    lines.append(
        f"  per token   touches {_bytes(r.active_bytes_per_token)} ({share * 100:.3g}% of the weights)"
    )
    lines.append(f"  budget      {_mib(r.budget_bytes)} for weights ({r.budget_note})")
    lines.append(
        f"  minimum     {_mib(r.min_budget_bytes)} = globals {_mib(r.globals_bytes)} + "
        f"{2 if r.prefetch else 1} x {_mib(r.active_bytes_per_layer)} (one layer's bytes per token"
        + (": the layer computing and the one being read)" if r.prefetch else ")")
    )
    if r.fits_in_memory:
        lines.append(f"  residency   the whole model fits: {_mib(r.resident_bytes)} resident, nothing streams")
    else:
        lines.append(
            f"  residency   {r.policy}: {_mib(r.resident_bytes)} resident "
            f"(globals {_mib(r.globals_bytes)} + cache {_mib(r.resident_bytes - r.globals_bytes)}) "
            f"+ {_mib(r.staging_bytes)} layer buffers; {r.hit_rate:.2%} of a token's layer bytes "
            "served from memory"
        )
    lines.append(f"  streamed    {_bytes(r.streamed_bytes_per_token)} per token from the SSD")
    combine = (
        "max(ssd, dram, compute): prefetch overlaps reads with compute"
        if p.overlapped
        else "ssd + max(dram, compute): without prefetch, compute waits for each read"
    )
    lines.append(f"  projection  {_seconds(p.s_per_token)} per token = {_rate(p.tokens_per_s)}, {p.bound}-bound")
    lines.append(
        f"    ssd       {_seconds(p.terms['ssd'])} = {_bytes(r.streamed_bytes_per_token)} / "
        f"{r.ssd_mb_s / 1000:g} GB/s"
    )
    lines.append(
        f"    dram      {_seconds(p.terms['dram'])} = "
        f"{_bytes(r.active_bytes_per_token - r.streamed_bytes_per_token)} resident bytes touched / "
        f"{r.dram_mb_s / 1000:g} GB/s"
    )
    if r.compute_s_per_token > 0:
        lines.append(f"    compute   {_seconds(p.terms['compute'])} (given)")
    else:
        lines.append("    compute   not modelled (pass compute_s_per_token): tok/s is an upper bound")
    lines.append(f"    combined  {combine}")
    if r.assumptions:
        lines.append("  assumptions")
        lines.extend(f"    - {a}" for a in r.assumptions)
    lines.append(f"  summary     {r.summary}")
    lines.append("  units       memory in MiB (2^20 bytes, the unit of budget_mb); sizes and rates in decimal MB/GB/TB")
    return "\n".join(lines)


# ---------------------------------------------------------------- validation
def _number(value, key: str, *, positive: bool = True, allow_zero: bool = False) -> float:
    sign = (ZERO_OR_MORE if allow_zero else POSITIVE) if positive else ANY
    return finite_number(value, "plan", key, sign=sign)


def _shape_from_numbers(inp: SizingInput) -> _Shape:
    total = _number(inp.total_params, "total_params")
    bits = _number(inp.bits_per_weight, "bits_per_weight")
    if bits > 32:
        raise ShardscopeError(f"plan: 'bits_per_weight' must be at most 32, got {bits:g}")
    if isinstance(inp.n_layers, bool) or not isinstance(inp.n_layers, int):
        raise ShardscopeError(f"plan: 'n_layers' must be a whole number, got {inp.n_layers!r}")
    if inp.n_layers < 1:
        raise ShardscopeError(f"plan: 'n_layers' must be at least 1, got {inp.n_layers}")
    active = total if inp.active_params is None else _number(inp.active_params, "active_params")
    if active > total:
        raise ShardscopeError(
            f"plan: 'active_params' ({active:g}) exceeds 'total_params' ({total:g}); "
            "a token cannot use more parameters than the model has"
        )
    weight = total * bits / 8
    active_bytes = active * bits / 8
    assumptions: list[str] = []
    if inp.globals_bytes is not None and inp.globals_fraction is not None:
        raise ShardscopeError("plan: give 'globals_bytes' or 'globals_fraction', not both")
    if inp.globals_bytes is not None:
        globals_ = _number(inp.globals_bytes, "globals_bytes", allow_zero=True)
    else:
        if inp.globals_fraction is None:
            hidden = math.sqrt(active / inp.n_layers / 12)
            estimate = 2 * DEFAULT_VOCAB * hidden * bits / 8
            fraction = min(estimate / active_bytes, 0.5)
            assumptions.append(
                f"globals (embeddings + output head) estimated as 2 x {DEFAULT_VOCAB // 1000}k vocab x "
                f"~{hidden:,.0f} hidden = {_bytes(fraction * active_bytes)}; pass globals_bytes to set them"
            )
        else:
            fraction = _number(inp.globals_fraction, "globals_fraction", allow_zero=True)
            if fraction >= 1:
                raise ShardscopeError(f"plan: 'globals_fraction' must be below 1, got {fraction:g}")
        globals_ = fraction * active_bytes
    if globals_ >= active_bytes:
        raise ShardscopeError(
            f"plan: globals ({_bytes(globals_)}) must be smaller than the bytes a token touches "
            f"({_bytes(active_bytes)}); no layer weights would be left"
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
    label = inp.name or f"{_bytes(weight)} model"
    return _Shape(
        label=label,
        weight_bytes=weight,
        globals_bytes=globals_,
        dense_layer_bytes=dense,
        expert_bytes=experts,
        expert_fraction=f,
        n_layers=inp.n_layers,
        unit_bytes=touched_layer / inp.n_layers,
        n_params=total,
        bits_per_weight=bits,
        assumptions=tuple(assumptions),
    )


# ------------------------------------------------------------------ the plan
def _size(
    shape: _Shape,
    device: Device | str,
    *,
    budget_mb: float | None,
    policy: str,
    prefetch: bool,
    compute_s_per_token: float,
    ssd_mb_s: float | None,
    expert_hit_rate: float | None = None,
    expert_trace=None,
    expert_policy: str = "lru",
) -> SizingResult:
    if isinstance(device, str):
        device = get_device(device)
    if policy not in POLICIES:
        raise ShardscopeError(f"plan: 'policy' must be one of {', '.join(POLICIES)}, got {policy!r}")
    if not isinstance(prefetch, bool):
        raise ShardscopeError(f"plan: 'prefetch' must be true or false, got {prefetch!r}")
    compute = _number(compute_s_per_token, "compute_s_per_token", allow_zero=True)
    assumptions = list(shape.assumptions)
    unverified = set(device.unverified)
    if ssd_mb_s is not None:
        device = device.with_ssd(_number(ssd_mb_s, "ssd_mb_s"))
        unverified.add("ssd_read_mb_s")

    if budget_mb is None:
        budget_mb = weight_budget_mb(device, **DEFAULT_OVERHEAD_MB)
        o = DEFAULT_OVERHEAD_MB
        budget_note = (
            f"app limit {device.app_memory_limit_mb:g} MiB - KV cache {o['kv_cache_mb']:g} "
            f"- compute buffers {o['compute_buffers_mb']:g} - runtime {o['runtime_mb']:g}"
        )
        assumptions.append(
            f"KV cache + compute buffers + runtime assumed {sum(o.values()):g} MiB "
            "(as the built-in iPhone profile); pass budget_mb to set the weight budget"
        )
    else:
        budget_mb = _number(budget_mb, "budget_mb")
        if budget_mb > device.app_memory_limit_mb:
            raise ShardscopeError(
                f"plan: budget {budget_mb:g} MiB exceeds the app memory limit of {device.name} "
                f"({device.app_memory_limit_mb:g} MiB), which must also hold the KV cache and runtime"
            )
        budget_note = f"given; app limit {device.app_memory_limit_mb:g} MiB"
    budget = budget_mb * MIB

    W, G, D, E, f = (shape.weight_bytes, shape.globals_bytes, shape.dense_layer_bytes,
                     shape.expert_bytes, shape.expert_fraction)
    A = shape.active_bytes
    n_units = 2 if prefetch else 1
    staging = n_units * shape.unit_bytes
    minimum = G + staging

    if W <= budget:
        fits, resident, staging, streamed, overlap = True, W, 0.0, 0.0, prefetch
    elif budget < minimum:
        raise ShardscopeError(
            f"plan: budget {budget_mb:,.0f} MiB is below the minimum of {_mib(minimum)} for "
            f"{shape.label} on {device.name} (globals {_mib(G)} + {n_units} x "
            f"{_mib(shape.unit_bytes)} that one layer touches per token)"
        )
    else:
        fits = False
        cache = budget - minimum
        overlap = prefetch
        if shape.is_moe and (expert_hit_rate is not None or expert_trace is not None):
            d_pinned = min(cache, D)
            e_cached = min(cache - d_pinned, E)
            hit, source = _expert_hit(expert_hit_rate, expert_trace, expert_policy, e_cached / E)
            streamed = moe_ssd_bytes_per_token(D - d_pinned, f * E, hit)
            resident = G + d_pinned + e_cached
            overlap = False
            assumptions.append(
                f"expert hit rate {hit:.1%} ({source}) on {_mib(e_cached)} of expert cache "
                f"({e_cached / E:.3%} of the experts): per token {_bytes(D - d_pinned)} dense streamed + "
                f"(1 - {hit:.3g}) x {_bytes(f * E)} of picked experts; misses are waited for, "
                "so reads do not overlap compute")
        elif policy == "pinned":
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

    measurement = RunMeasurement(
        ssd_bytes_per_token=streamed,
        resident_bytes_per_token=A - streamed,
        compute_s_per_token=compute,
        host_threads=1,
        prefetch=overlap,
    )
    projection = project_from_bandwidth(
        measurement, ssd_mb_s=device.ssd_read_mb_s, dram_mb_s=device.dram_mb_s
    )
    if compute == 0:
        assumptions.append("compute not modelled (0 s): the tok/s is an upper bound")

    summary = (
        f"{shape.label} on {device.name} at {device.ssd_read_mb_s / 1000:g} GB/s: "
        f"{_seconds(projection.s_per_token)} per token ({projection.tokens_per_s:.3g} tok/s), "
        f"{projection.bound}-bound; "
        + (
            "fits in memory, nothing streams"
            if fits
            else f"reads {_bytes(streamed)} per token from the SSD, {_mib(resident)} resident"
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
    expert_policy: str = "lru",
) -> SizingResult:
    """Plan a model given by its size (see the module doc for every formula).

    ``budget_mb`` None takes the device's app limit minus :data:`DEFAULT_OVERHEAD_MB`.
    ``ssd_mb_s`` replaces the device's disk for a what-if (marked unverified).
    Refuses sizes no model has and budgets below the minimum, saying the minimum.
    """
    return _size(
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


def _expert_hit(given: float | None, trace, policy: str, share: float) -> tuple[float, str]:
    """The expert hit rate to plan with, and where it came from.

    A routing trace is replayed with a cache holding the same share of its model's
    expert bytes as the device's cache holds of the planned model's.
    """
    if given is not None:
        hit = _number(given, "expert_hit_rate", allow_zero=True)
        if hit > 1:
            raise ShardscopeError(f"plan: --expert-hit-rate must be between 0 and 1, got {hit:g}")
        return hit, "given"
    from shardscope.engine.replay import min_cache_bytes, replay_one

    header = trace.header
    traced_experts = header.n_expert * sum(header.unit_bytes.values())
    cache = int(share * traced_experts)
    floor = min_cache_bytes(trace)
    if cache < floor:
        raise ShardscopeError(
            f"plan: the device's expert cache is {share:.3%} of the experts; replayed on the trace's model that is "
            f"{cache / MIB:.2f} MiB, below the {floor / MIB:.2f} MiB one layer's picks need there (trace a "
            "model with smaller experts, or pass --expert-hit-rate)")
    row = replay_one(trace, policy, cache)
    return row.expert_hit_rate, f"replayed from the trace of {header.model or 'a run'}, {policy}, {row.n_tokens} tokens"


# ---------------------------------------------------------------- from GGUF
_SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


def _split_parts(path: Path) -> list[Path]:
    """All files of a split GGUF (``name-00001-of-00003.gguf``), or just ``path``.

    A model too big to run is usually split; planning from one part would silently
    undercount it, so a missing part is an error that names it.
    """
    match = _SPLIT_RE.match(path.name)
    if not match:
        return [path]
    count = int(match.group("count"))
    parts = [path.with_name(f"{match.group('stem')}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    for part in parts:
        if not part.exists():
            raise ShardscopeError(f"{path}: split model part {part.name} is missing (needs all {count} parts)")
    return parts


def _shape_from_gguf(path: str | Path) -> _Shape:
    from shardscope.engine.gguf_layout import read_layout  # needs the gguf package; import only when used

    path = Path(path)
    if not path.exists():
        raise ShardscopeError(f"{path}: no such file")
    layouts = [read_layout(part) for part in _split_parts(path)]
    meta: dict = {}
    for layout in layouts:
        meta.update({k: v for k, v in layout.metadata.items() if k not in meta})
    arch = str(meta.get("general.architecture", "unknown"))

    globals_ = 0
    dense: dict[int, int] = {}
    experts: dict[int, int] = {}
    n_params = 0
    for layout in layouts:
        for t in layout.tensors:
            n_params += math.prod(t.shape)
            if t.layer is None:
                globals_ += t.n_bytes
            elif "_exps" in t.name:
                experts[t.layer] = experts.get(t.layer, 0) + t.n_bytes
            else:
                dense[t.layer] = dense.get(t.layer, 0) + t.n_bytes
    layers = sorted(set(dense) | set(experts))
    if not layers:
        raise ShardscopeError(f"{path}: no layer tensors (blk.N.*) found; cannot plan streaming")
    weight = globals_ + sum(dense.values()) + sum(experts.values())
    assumptions: list[str] = []

    f = 1.0
    if experts:
        n_exp = meta.get(f"{arch}.expert_count")
        n_used = meta.get(f"{arch}.expert_used_count")
        if isinstance(n_exp, int) and isinstance(n_used, int) and 0 < n_used <= n_exp:
            f = n_used / n_exp
        else:
            assumptions.append(
                f"{arch}.expert_count / expert_used_count missing or invalid in the header: "
                "every expert counted as touched (pessimistic)"
            )
    units = [dense.get(k, 0) + f * experts.get(k, 0) for k in layers]
    label = f"{meta.get('general.name') or path.name} ({_bytes(weight)})"
    return _Shape(
        label=label,
        weight_bytes=float(weight),
        globals_bytes=float(globals_),
        dense_layer_bytes=float(sum(dense.values())),
        expert_bytes=float(sum(experts.values())),
        expert_fraction=f,
        n_layers=len(layers),
        unit_bytes=max(units),
        n_params=float(n_params),
        bits_per_weight=8 * weight / n_params,
        assumptions=tuple(assumptions),
    )


def size_from_gguf_header(
    path: str | Path,
    device: Device | str,
    budget_mb: float | None = None,
    policy: str = "pinned",
    prefetch: bool = True,
    *,
    compute_s_per_token: float = 0.0,
    ssd_mb_s: float | None = None,
    expert_hit_rate: float | None = None,
    expert_trace=None,
    expert_policy: str = "lru",
) -> SizingResult:
    """Plan from a GGUF file's header: exact sizes, layers, globals and expert split.

    Reads only the header and tensor table (engine.gguf_layout), never the weights,
    so planning a 1.5 TB model costs milliseconds. All parts of a split model are read.
    """
    return _size(
        _shape_from_gguf(path),
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
