"""Project a run measured here onto another device: a three-term roofline per token.

Why a roofline: a streamed token is limited by whichever of three resources runs out
first, and each one is a division we can check by hand:

* ``ssd``     = bytes read from disk per token / the device's SSD bandwidth
* ``dram``    = resident weight bytes touched per token / the device's DRAM bandwidth
* ``compute`` = measured compute seconds per token, scaled to the device's cores

Two figures, named for what they are, and the projection carries both:

* the **serial time** ``ssd + max(dram, compute)``: the disk read and the compute take turns,
  nothing overlapped (an engine that waits for each layer's reads, as misses are waited for);
* the **overlapped bound** ``max(ssd, dram, compute)``: an engine that reads while it computes
  waits only for the longer, at best: the one figure that is a best case.

``s_per_token`` is the one the deployment's engine does: overlapped with prefetch (depth > 0),
serial without; a real overlapping engine lands between the two (its reads are not all hidden). DRAM and compute stay
under one max even then: the kernels stream weights from memory while they multiply (that is the roofline), and
the measured compute time already contains the host's own memory time, so adding
the two would count memory twice.

Compute scaling (simple on purpose, and an assumption): matrix-vector work is split
evenly over threads, so compute time scales with the inverse of the threads in use.
On the device we use ``min(host_threads, performance_cores)`` threads; efficiency
cores are ignored because a matmul split across mixed cores runs at the slowest
core's pace. ``compute_scale`` (device file, default 1.0) is the device's per-core
speed relative to this host::

    compute_device = compute_host * host_threads / min(host_threads, p_cores) / compute_scale

GPU layers (n_gpu_layers, issue #35): the part of the measured compute that ran on the host's
GPU (``gpu_compute_s_per_token``, timed by the run) is not divided over CPU threads. A device
whose deployment computes on its GPU (preset ``[gpu] computes = true``: llama.cpp on an iPhone
runs on Metal) takes it at ``gpu_compute_scale`` (its GPU's speed relative to the measuring
host's GPU; 1.0, unverified, unless the preset knows better); a device that computes on its CPU
only takes it like the rest of the compute, scaled by cores — a best case, since a host GPU's
time is shorter than its CPU would have taken::

    compute_device = (compute_host − gpu_host) * cpu_factor + gpu_host / gpu_compute_scale   (GPU device)
    compute_device = compute_host * cpu_factor                                               (CPU device)

The ssd term is the device's flash model (``engine.devices.flash_model.FlashModel``: fitted
from the preset's own probe where it has one, else the emulator's SSD model, one rate, a
latency per request and a queue depth): read time as a function of request size and requests
in flight, given how many requests a token reads and in how many batches that wait for each
other (a MoE layer's misses are one batch). The projection names which part
bounds a run: ``limit`` is "bandwidth" or "latency" when the ssd term is the largest,
else "compute" or "dram". Without request counts (or at latency 0) it is bytes ÷ bandwidth.

What this leaves out: thermal throttling, page-cache hits beyond what the measurement saw,
the KV cache's own memory traffic, and (for the serial time) any overlap the engine does get.
How far off the answer was on real phones is measured by bench/sweeps/phone_check.py and printed
beside it (engine/devices/projection_error.py).

Units: bytes, seconds, and bandwidths in MB/s = 10^6 bytes/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import POSITIVE, ZERO_OR_MORE, finite_number
from shardscope.engine.base.units import MB_S
from shardscope.engine.devices.devices import Device
from shardscope.engine.stream.ssd_rate_limiter import SsdModel

__all__ = [
    "RunMeasurement",
    "Projection",
    "project",
    "project_from_bandwidth",
    "compute_factor_for",
    "moe_ssd_bytes_per_token",
    "BOUNDS",
    "inputs_provenance",
]

BOUNDS = ("ssd", "dram", "compute")


@dataclass(frozen=True)
class RunMeasurement:
    """Per-token costs measured by a run on this machine.

    ``ssd_bytes_per_token``: bytes actually read from disk per generated token.
    ``resident_bytes_per_token``: weight bytes touched from memory per token (the
    resident part; streamed bytes are counted by the SSD term).
    ``compute_s_per_token``: seconds of compute per token with ``host_threads``
    threads, measured here (with the disk out of the way, e.g. all weights resident).
    ``prefetch``: True when prefetch depth > 0, i.e. reads overlap compute.
    """

    ssd_bytes_per_token: float
    resident_bytes_per_token: float
    compute_s_per_token: float
    host_threads: int = 1
    prefetch: bool = True
    # How the SSD bytes are read: requests per token, and batches per token that wait for
    # each other (0: unknown, the ssd term is then bytes / bandwidth alone)
    ssd_requests_per_token: float = 0.0
    ssd_batches_per_token: float = 0.0
    # Of compute_s_per_token, the seconds the host's GPU computed (0: all on the CPU)
    gpu_compute_s_per_token: float = 0.0

    def validated(self, source: str = "measurement") -> "RunMeasurement":
        """Refuse values no run can produce, naming the field."""
        for key in ("ssd_bytes_per_token", "resident_bytes_per_token", "compute_s_per_token",
                    "ssd_requests_per_token", "ssd_batches_per_token", "gpu_compute_s_per_token"):
            finite_number(getattr(self, key), source, key, sign=ZERO_OR_MORE)
        if self.gpu_compute_s_per_token > self.compute_s_per_token:
            raise ShardscopeError(f"{source}: 'gpu_compute_s_per_token' ({self.gpu_compute_s_per_token:g} s) exceeds "
                                  f"'compute_s_per_token' ({self.compute_s_per_token:g} s)")
        if isinstance(self.host_threads, bool) or not isinstance(self.host_threads, int) or self.host_threads < 1:
            raise ShardscopeError(
                f"{source}: 'host_threads' must be a whole number of at least 1, got {self.host_threads!r}"
            )
        if not isinstance(self.prefetch, bool):
            raise ShardscopeError(f"{source}: 'prefetch' must be true or false, got {self.prefetch!r}")
        return self


@dataclass(frozen=True)
class Projection:
    """Projected per-token cost on a device.

    ``terms`` holds seconds per token for "ssd", "dram" and "compute"; ``bound`` names
    the largest term (the resource to improve first); ``overlapped`` says whether the
    terms were combined with max (prefetch) or ssd + max(dram, compute) (no prefetch).
    """

    tokens_per_s: float
    s_per_token: float
    bound: str
    terms: dict[str, float] = field(hash=False)
    overlapped: bool = True  # the deployment's engine overlaps reads with compute (s_per_token = the bound)
    ssd_latency_s: float = 0.0  # the part of the ssd term that is request latency, not bytes

    @property
    def serial_s(self) -> float:
        """The serial time: ssd + max(dram, compute), nothing overlapped."""
        return self.terms["ssd"] + max(self.terms["dram"], self.terms["compute"])

    @property
    def overlapped_s(self) -> float:
        """The overlapped bound: max(ssd, dram, compute), the best case."""
        return max(self.terms.values())

    @property
    def serial_tok_s(self) -> float:
        return 1.0 / self.serial_s

    @property
    def overlapped_tok_s(self) -> float:
        return 1.0 / self.overlapped_s

    @property
    def engine_text(self) -> str:
        """Which of the two the deployment's engine does, in words."""
        return ("the engine overlaps reads with compute: the overlapped bound, a best case" if self.overlapped
                else "the engine waits for its reads: the serial time (overlap would give the bound)")

    def figures_text(self) -> str:
        """"serial 2.1 tok/s (compute + flash, nothing overlapped); overlapped bound 3.4 tok/s (best case)"."""
        return (f"serial {self.serial_tok_s:.3g} tok/s (compute + flash, nothing overlapped); "
                f"overlapped bound {self.overlapped_tok_s:.3g} tok/s (max of the two: the best case)")

    @property
    def limit(self) -> str:
        """What bounds the run: "bandwidth" or "latency" (the SSD's two parts), "compute" or "dram"."""
        if self.bound != "ssd":
            return self.bound
        return "latency" if self.ssd_latency_s > self.terms["ssd"] - self.ssd_latency_s else "bandwidth"

    @property
    def bound_text(self) -> str:
        """"ssd-bound (latency)": the bound, and for the SSD which of its two parts."""
        return f"{self.bound}-bound ({self.limit})" if self.bound == "ssd" else f"{self.bound}-bound"

    def describe(self) -> str:
        """One line: the time, the bound and every term, for logs and the CLI."""
        parts = ", ".join(f"{name} {self.terms[name]:.3g} s" for name in BOUNDS)
        ssd = self.terms["ssd"]
        split = (f"; ssd = {ssd - self.ssd_latency_s:.3g} s bandwidth + {self.ssd_latency_s:.3g} s latency"
                 if self.ssd_latency_s > 0 else "")
        return (
            f"{self.s_per_token:.3g} s/token ({self.tokens_per_s:.3g} tok/s), "
            f"{self.bound_text}; terms per token: {parts}{split}; {self.figures_text()}; {self.engine_text}"
        )


def _positive(value, source: str, key: str) -> float:
    return finite_number(value, source, key, sign=POSITIVE)


def project_from_bandwidth(
    measurement: RunMeasurement,
    *,
    ssd_mb_s: float,
    dram_mb_s: float | None = None,
    compute_factor: float = 1.0,
    ssd_latency_s: float = 0.0,
    ssd_queue_depth: int = 32,
    gpu_factor: float | None = None,
    flash: SsdModel | None = None,
) -> Projection:
    """The roofline for "a device with X MB/s SSD", without a device file.

    ``ssd_latency_s`` / ``ssd_queue_depth``: the device's per-request latency and requests in
    flight (the emulator's model); they count only when the measurement has request counts.
    ``dram_mb_s`` None leaves the DRAM term out (0 s): right when projecting onto
    this same host (e.g. the validation run that emulates a slower disk with
    ``--ssd-mb-s``), since the measured compute time already includes this host's
    memory traffic. ``compute_factor`` multiplies the measured compute time (1.0 =
    same cores as the measurement; :func:`project` derives it from a device).
    ``gpu_factor`` multiplies the measurement's GPU seconds instead, where the device computes
    on its GPU; None: they are CPU compute on the device, scaled by ``compute_factor``.
    ``flash``: the device's flash model (``Device.flash_model``); given, it replaces the model
    ``ssd_mb_s`` / ``ssd_latency_s`` / ``ssd_queue_depth`` describe (its ``mb_s`` is the rate
    the latency split is reckoned against).
    """
    m = measurement.validated()
    ssd = _positive(ssd_mb_s, "projection", "ssd_mb_s") * MB_S
    latency = finite_number(ssd_latency_s, "projection", "ssd_latency_s", sign=ZERO_OR_MORE)
    model = flash if flash is not None else SsdModel(ssd / MB_S, latency, max(1, int(ssd_queue_depth)))
    ssd = model.mb_s * MB_S
    ssd_s = model.read_seconds(m.ssd_bytes_per_token, m.ssd_requests_per_token, m.ssd_batches_per_token)
    terms = {
        "ssd": ssd_s,
        "dram": 0.0,
        "compute": m.compute_s_per_token * _positive(compute_factor, "projection", "compute_factor"),
    }
    if gpu_factor is not None:  # the GPU's share is not divided over CPU cores (module doc)
        cpu_s = m.compute_s_per_token - m.gpu_compute_s_per_token
        terms["compute"] = (cpu_s * compute_factor
                            + m.gpu_compute_s_per_token * _positive(gpu_factor, "projection", "gpu_factor"))
    if dram_mb_s is not None:
        terms["dram"] = m.resident_bytes_per_token / (_positive(dram_mb_s, "projection", "dram_mb_s") * MB_S)
    # the serial time and the overlapped bound (module doc); the engine's is the one it does
    s_per_token = max(terms.values()) if m.prefetch else terms["ssd"] + max(terms["dram"], terms["compute"])
    if s_per_token <= 0:
        raise ShardscopeError(
            "projection: nothing to project: no bytes read, no bytes touched and no compute time per token"
        )
    # The largest term is the bound; ties go to ssd first, the resource this tool is about.
    bound = max(BOUNDS, key=lambda name: (terms[name], -BOUNDS.index(name)))
    return Projection(
        tokens_per_s=1.0 / s_per_token,
        s_per_token=s_per_token,
        bound=bound,
        terms=terms,
        overlapped=m.prefetch,
        ssd_latency_s=max(0.0, ssd_s - m.ssd_bytes_per_token / ssd),
    )


def moe_ssd_bytes_per_token(dense_streamed_bytes: float, used_expert_bytes: float, expert_hit_rate: float) -> float:
    """A MoE token's disk bytes: the dense bytes it streams plus the picked experts the cache missed.

    ``used_expert_bytes`` is the bytes of the experts one token picks (all layers):
    n_expert_used / n_expert of the routed-expert bytes.
    """
    hit = finite_number(expert_hit_rate, "projection", "expert_hit_rate", sign=ZERO_OR_MORE)
    if hit > 1:
        raise ShardscopeError(f"projection: 'expert_hit_rate' must be between 0 and 1, got {hit:g}")
    return dense_streamed_bytes + (1.0 - hit) * used_expert_bytes


def compute_factor_for(measurement: RunMeasurement, device: Device) -> float:
    """How much longer the measured compute takes on ``device`` (see module doc)."""
    usable = min(measurement.host_threads, device.performance_cores)
    return measurement.host_threads / usable / device.compute_scale


def project(
    measurement: RunMeasurement, device: Device, *, ssd_mb_s_override: float | None = None
) -> Projection:
    """Project a measurement onto a device preset (optionally with another disk)."""
    m = measurement.validated()
    if ssd_mb_s_override is not None:
        device = device.with_ssd(ssd_mb_s_override)  # another disk: its rate, not this one's probe
    return project_from_bandwidth(
        m, ssd_mb_s=device.ssd_read_mb_s, dram_mb_s=device.dram_mb_s, compute_factor=compute_factor_for(m, device),
        ssd_latency_s=device.ssd_latency_us * 1e-6, ssd_queue_depth=device.ssd_queue_depth,
        gpu_factor=1.0 / device.gpu_compute_scale if device.gpu_compute else None, flash=device.flash_model,
    )


# The device numbers the roofline reads, in words (the memory limit only matters to the sizing).
_INPUT_NAMES = {"ssd_read_mb_s": "SSD read speed", "ssd_latency_us": "SSD latency",
                "ssd_queue_depth": "SSD queue depth",
                "dram_mb_s": "DRAM bandwidth", "compute_scale": "per-core speed", "gpu_compute_scale": "GPU speed"}


def inputs_provenance(device: Device) -> str:
    """How far to trust a projection: "per-core speed calibrated from r.jsonl on 2026-11-30;
    SSD read speed unverified" — a calibrated number says where it was measured."""
    parts = []
    for key, name in _INPUT_NAMES.items():
        if key in device.calibrated:
            parts.append(f"{name} {device.calibrated[key]}")
        elif not device.is_verified(key):
            parts.append(f"{name} unverified")
    return "; ".join(parts) if parts else "every input verified"
