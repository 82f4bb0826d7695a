"""Project a finished run (a :class:`RunSummary`) onto a device with the roofline.

:mod:`engine.devices.projection` works on three per-token costs; this module says how each
one is read off a run summary, so ``shardscope bench --device``, ``sweep`` and
``tune`` all project the same way:

* ``ssd_bytes_per_token`` = ``read_mb_per_token`` x MiB: what the kernel says this
  process read from disk per decoded token (/proc/self/io ``read_bytes``). Real
  reads, not what the controller meant to load: readahead beyond a shard and page
  cache hits are in it, the same way they would be on the device.
* ``resident_bytes_per_token`` = model size − bytes read per token (floored at 0).
  A dense model touches every weight once per token; whatever did not come from the
  disk for this token came from memory: the globals, the pinned shards *and* the
  LRU shards that happened to still be resident. (globals_mb + pinned_mb would miss
  the last group, so it undercounts LRU runs.) An expert run (ExpertRunSummary)
  touches only the dense bytes and its picked experts: there the model size is
  replaced by dense + n_expert_used / n_expert of the expert bytes. Its reads are
  on demand (prefetch_depth 0), so the projection adds the SSD term to the compute.
* ``compute_s_per_token`` = the run's estimate of its settings' compute per token: the 10th
  percentile of its last 320 un-stalled tokens' (token time − wait for loads, at most the decode
  thread's CPU time), engine/measure/compute_window.py — others' runs on this host slow whole
  rounds, never below the work a token does; without it (fewer than 8 tokens since the settings
  changed) the median of the round's own un-stalled tokens (engine/measure/token_stalls.py);
  floored at 1 µs: what llama.cpp
  spent computing (including this host's own memory traffic and whatever the loader thread's
  CPU work slowed it down by, which a device would also pay). A median, so a stall (the host
  stealing the CPU, the process stopped) that falls into one token moves neither this nor the
  projection (issue 48: the mean took one 18-s host stall as compute, 16.5 → 1.52 tok/s).
  A summary without per-token times (a row read back from a CSV) falls back to the mean:
  1 / avg_ts − wait_ms_per_token / 1000.
* The device's compute factor is the preset's (``compute_scale``, cores); where the preset's
  per-core speed is neither calibrated nor verified it is this host's, and ``compute_basis``
  says so: "assumed = this host × 1.0".
* ``host_threads`` = n_threads, ``prefetch`` = prefetch_depth > 0.
* ``gpu_compute_s_per_token`` = the run's ``gpu_compute_ms_per_token`` (an expert run with GPU
  layers times the stretches its GPU layers computed), at most the compute above; 0 for runs
  without it (all CPU), so a device that computes on its GPU scales only that part differently.

Why subtract the wait rather than use llama.cpp's own eval time: llama.cpp's perf
counter includes the time blocked in the eval callback, so it is not compute either;
the controller's wait counter is the only clean measure of "not computing".

The projection is then ``max(ssd, dram, compute)`` with prefetch and
``ssd + max(dram, compute)`` without (see :mod:`engine.devices.projection`), i.e. it assumes
the loader keeps the disk busy while compute runs. How well that holds on this host
is checked in docs/projection-validation.md (bench/sweeps/projection_validation.py).
"""

from __future__ import annotations

import math

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import finite_number
from shardscope.engine.devices.devices import MIB, get_device
from shardscope.engine.devices.projection import Projection, RunMeasurement, project
from shardscope.engine.measure.token_stalls import robust_compute_s, stall_text
from shardscope.engine.stream.residency import CHUNK_BYTES
from shardscope.engine.stream.ssd_rate_limiter import split_requests

__all__ = [
    "MIN_COMPUTE_S",
    "measurement_from_summary",
    "project_summary",
    "projection_for",
    "fill_device_columns",
    "compute_basis",
    "round_stall",
    "differs_note",
    "DIFFERS_RATIO",
]

DIFFERS_RATIO = 1.5  # measured here and projected further apart than this: say which term and why

MIN_COMPUTE_S = 1e-6  # a run that waited for its whole decode time still computed something


def _number(summary, key: str) -> float:
    return finite_number(getattr(summary, key), "run summary", key)


def measurement_from_summary(summary) -> RunMeasurement:
    """The three per-token costs of a run (see the module doc for each choice)."""
    avg_ts = _number(summary, "avg_ts")
    if avg_ts <= 0:
        raise ShardscopeError(
            "run summary: no decoded tokens to project (avg_ts is 0; generate at least 2 tokens)"
        )
    read = max(0.0, _number(summary, "read_mb_per_token")) * MIB
    total = max(0.0, _number(summary, "model_size_mb")) * MIB
    if getattr(summary, "n_expert", 0):  # an expert run touches the dense bytes and its picked experts only
        dense = max(0.0, _number(summary, "globals_mb")) * MIB
        total = dense + (total - dense) * summary.n_expert_used / summary.n_expert
    wait_s = max(0.0, _number(summary, "wait_ms_per_token")) / 1000.0
    robust = getattr(summary, "compute_s_estimate", None)
    if robust is None:
        robust = robust_compute_s(getattr(summary, "token_s", ()), getattr(summary, "token_wait_s", ()),
                                  getattr(summary, "token_cpu_s", ()))
    compute = max(robust if robust is not None else 1.0 / avg_ts - wait_s, MIN_COMPUTE_S)
    threads = int(summary.n_threads)
    requests, batches = _reads_per_token(summary, read)
    gpu_ms = getattr(summary, "gpu_compute_ms_per_token", 0.0)
    gpu = min(compute, max(0.0, gpu_ms) / 1000.0) if gpu_ms == gpu_ms else 0.0  # NaN (a CSV gap): none
    return RunMeasurement(
        ssd_bytes_per_token=read,
        resident_bytes_per_token=max(0.0, total - read),
        compute_s_per_token=compute,
        host_threads=max(1, threads),
        prefetch=int(summary.prefetch_depth) > 0,
        ssd_requests_per_token=requests,
        ssd_batches_per_token=batches,
        gpu_compute_s_per_token=gpu,
    ).validated("run summary")


def _reads_per_token(summary, read: float) -> tuple[float, float]:
    """How a token's bytes were read, for the SSD model's latency term.

    An expert run reads each missed expert as its three tensor slices (requests of at
    most REQUEST_BYTES), a layer's misses together (one batch a layer, at most one per
    miss). A layer-streaming run reads its shards in CHUNK_BYTES pieces, each waited for.
    """
    if read <= 0:
        return 0.0, 0.0
    if getattr(summary, "n_expert", 0):
        dense = max(0.0, _number(summary, "globals_mb")) * MIB
        layers = max(1, int(summary.n_layers))
        unit = (max(0.0, _number(summary, "model_size_mb")) * MIB - dense) / (summary.n_expert * layers)
        if unit <= 0:
            return 0.0, 0.0
        misses = read / unit
        return misses * len(split_requests([unit / 3] * 3)), min(float(layers), misses)
    chunks = read / CHUNK_BYTES
    return chunks * len(split_requests([CHUNK_BYTES])), chunks


def projection_for(summary, device_id: str) -> Projection:
    """The device projection of a run: a value, the summary is left as it was.

    The measured bytes and compute of this run, on the device's SSD, DRAM and
    performance cores (``engine.devices.projection.project``).
    """
    return project(measurement_from_summary(summary), get_device(device_id))


def fill_device_columns(summary, device_id: str, projection: Projection) -> None:
    """Attach a projection to a summary's ``device``/``projected_*`` columns (what the CSV carries)."""
    summary.device = get_device(device_id).id
    summary.projected_ts = round(projection.tokens_per_s, 4)
    summary.projected_bound = projection.bound
    summary.projected_serial_ts = round(projection.serial_tok_s, 4)
    summary.projected_overlapped_ts = round(projection.overlapped_tok_s, 4)


def project_summary(summary, device_id: str) -> Projection:
    """projection_for + fill_device_columns in one call, for engine/runs/bench_command.py until it attaches itself."""
    projection = projection_for(summary, device_id)
    fill_device_columns(summary, device_id, projection)
    return projection


def compute_basis(device) -> str:
    """Where the device's compute factor comes from: its calibration, its verified preset, or
    nothing measured ("assumed = this host × 1.0": the device's cores are this host's)."""
    x = device.compute_scale
    factor = f"{x:.1f}" if abs(x * 10 - round(x * 10)) < 1e-9 else f"{x:.3g}"
    if "compute_scale" in device.calibrated:
        return f"per-core speed = this host × {factor}, {device.calibrated['compute_scale']}"
    if device.is_verified("compute_scale"):
        return f"per-core speed = this host × {factor} (preset)"
    return f"assumed = this host × {factor} (per-core speed not calibrated: `shardscope calibrate`)"


def round_stall(summary, steal_share: float = math.nan, usual_ttft_ms: float = math.nan) -> str:
    """"" for a clean round, else what stalled it (token_stalls.stall_text): the host's steal over
    the round, a token or the prompt pass far above the round's usual."""
    return stall_text(getattr(summary, "token_s", ()), steal_share, summary.ttft_ms / 1000.0,
                      usual_ttft_ms / 1000.0, getattr(summary, "between_tokens_s", 0.0))


def differs_note(summary, projection: Projection, device_id: str) -> str:
    """Where the run measured here and its projection differ by more than DIFFERS_RATIO, one
    sentence naming the term that differs most and the two rates behind it; else "".

    Here a token took 1 / avg_ts: its compute and its wait for reads (``wait_ms_per_token``, on
    this host's disk or the emulated one). On the device the same token's reads take the ssd
    term (bytes ÷ the device's rate, its latency) and its compute the compute term."""
    avg_ts = getattr(summary, "avg_ts", 0.0)
    if not (avg_ts and avg_ts > 0 and projection.tokens_per_s > 0):
        return ""
    ratio = projection.tokens_per_s / avg_ts
    if 1 / DIFFERS_RATIO <= ratio <= DIFFERS_RATIO:
        return ""
    device = get_device(device_id)
    m = measurement_from_summary(summary)
    host_wait = max(0.0, summary.wait_ms_per_token / 1000.0)
    host_compute = m.compute_s_per_token
    dev_read, dev_compute = projection.terms["ssd"], projection.terms["compute"]
    faster = "above" if ratio > 1 else "below"
    head = (f"projected {projection.tokens_per_s:.3g} tok/s is {max(ratio, 1 / ratio):.1f}× {faster} "
            f"the {avg_ts:.3g} measured here")
    read_gap, compute_gap = abs(host_wait - dev_read), abs(host_compute - dev_compute)
    if read_gap >= compute_gap:
        mb = m.ssd_bytes_per_token / MIB
        host_rate = m.ssd_bytes_per_token / host_wait / 1e6 if host_wait > 0 else math.inf
        emulated = f", emulated {summary.emulated_ssd_mb_s:g} MB/s" if getattr(summary, "emulated_ssd_mb_s", 0) else ""
        requests = f" in {m.ssd_requests_per_token:.0f} requests" if m.ssd_requests_per_token else ""
        host = (f"this host waited {1000 * host_wait:.3g} ms a token for {mb:.3g} MiB{requests} "
                f"(≈{host_rate:.0f} MB/s{emulated})" if host_wait > 0 else
                f"this host read its {mb:.3g} MiB a token without waiting")
        return (f"{head}: the reads differ — {host}, the device's {device.ssd_read_mb_s:g} MB/s SSD"
                f"{'' if device.is_verified('ssd_read_mb_s') else ' (assumed)'} takes {1000 * dev_read:.3g} ms")
    return (f"{head}: the compute differs — {1000 * host_compute:.3g} ms a token here with {m.host_threads} "
            f"thread(s), {1000 * dev_compute:.3g} ms on {device.name} ({compute_basis(device)})")
