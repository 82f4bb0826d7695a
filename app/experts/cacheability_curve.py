"""The cacheability curve's numbers: which cache sizes to replay, the replay itself, and the
projected tok/s at each size — pure functions, run off the GUI thread by the expert panel.

The hit rates are ``engine.experts.replay.cacheability`` unchanged (the same numbers ``shardscope
replay`` prints for the same sizes); sizes are whole MiB so the CLI can be given exactly
the sizes the plot shows.

The replay is pure Python for minutes on a long session; in a thread of the app it would
hold the GIL that the decode thread's expert callbacks need at every layer, so the panel
replays in a separate process (docs/decisions.md has the measurement). That process runs at
the idle scheduling class (SCHED_IDLE where the OS has it, else nice 19): it takes only CPU
time the run leaves. It reports each (policy, size) replayed, so the panel shows progress and
an ETA, and Cancel ends it at once. Where the run's threads leave no core for it
(``pause_for_replay``), the idle class is not enough: the panel pauses the run meanwhile.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shardscope.engine.base.units import MIB
from shardscope.engine.devices.projection import moe_ssd_bytes_per_token
from shardscope.engine.devices.run_projection import projection_for
from shardscope.engine.experts.foreign_traces import load_trace as read_any_trace
from shardscope.engine.experts.replay import REPLAY_POLICIES, min_cache_bytes, replay
from shardscope.engine.experts.routing_trace import RoutingTrace

N_SIZES = 8


@dataclass(frozen=True)
class CacheabilityResult:
    curves: dict[str, list[tuple[float, float]]]  # policy → [(cache MiB, hit rate 0..1)]
    sizes_mb: tuple[float, ...]
    source: str  # "this session" or the trace file's name
    n_expert_used: int
    used_expert_mb: float  # one token's picked experts over all layers (what a miss costs per token)


def cache_sizes(floor_bytes: int, full_bytes: int, n: int = N_SIZES) -> list[float]:
    """``n`` whole-MiB sizes from the smallest cache a layer's picks fit in to every expert,
    spaced geometrically (hit rate changes fastest at small caches)."""
    lo = max(1, math.ceil(floor_bytes / MIB))
    hi = max(lo, math.ceil(full_bytes / MIB))
    if n < 2 or hi == lo:
        return [float(lo)]
    ratio = (hi / lo) ** (1 / (n - 1))
    return sorted({float(min(hi, math.ceil(lo * ratio ** i))) for i in range(n)})


def load_trace(source) -> tuple[RoutingTrace, str]:
    """A RoutingTrace from a file path or as given (a run's ``routing_records()``), and its name."""
    if isinstance(source, (str, Path)):
        return read_any_trace(source), Path(source).name
    return source, "this session"


def compute(source, policies: tuple[str, ...] = REPLAY_POLICIES, at_mb: tuple[float, ...] = (),
            progress: Callable[[float], None] | None = None) -> CacheabilityResult:
    """Replay ``source`` at ``cache_sizes`` (and the sizes ``at_mb``, e.g. the cache in use, so the
    note there is a replayed figure) for each policy and the optimum (Belady's limit), one
    (policy, size) at a time, calling ``progress`` with the fraction done after each.
    ShardscopeError for an empty or bad trace."""
    from shardscope.engine.base.errors import ShardscopeError

    trace, name = load_trace(source)
    if not any(not r.prompt for r in trace.records):
        raise ShardscopeError(f"{name}: no decoded tokens routed yet (run a few tokens first)")
    header = trace.header
    full = sum(size * header.n_expert for size in header.unit_bytes.values())
    # from one layer's picks to every expert, and one and two tokens' picks (where real
    # routers' caches are compared, docs/real-traces.md) when they lie in between
    used_bytes = header.n_expert_used * sum(header.unit_bytes.values())
    # whole MiB, so a size is added only where its floor still holds a layer's picks (a tiny trace's
    # token rounds down to 0 MiB)
    floor = min_cache_bytes(trace)
    tokens_mib = {float(math.floor(m * used_bytes / MIB)) for m in (1, 2)}
    asked = {float(round(x)) for x in at_mb if x and floor <= round(x) * MIB <= full}
    sizes = sorted(set(cache_sizes(floor, full))
                   | {mib for mib in tokens_mib if floor <= mib * MIB < full} | asked)
    curves: dict[str, list[tuple[float, float]]] = {}
    units = [(p, size) for p in policies for size in sizes]
    for i, (policy, size) in enumerate(units):
        for row in replay(trace, [size], [policy], where=name):
            curves.setdefault(row.policy, []).append((float(row.cache_mb), float(row.expert_hit_rate)))
        if progress is not None:
            progress((i + 1) / len(units))
    used = header.n_expert_used * sum(header.unit_bytes.values()) / MIB
    return CacheabilityResult(curves, tuple(sizes), name, header.n_expert_used, used)


def usable_cores() -> int:
    """The cores this process (and the run process it started) may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS: no affinity masks
        return os.cpu_count() or 1


def pause_for_replay(cores: int, threads: int) -> bool:
    """Whether the live run must pause while the curve replays: when its ``threads`` llama.cpp
    threads leave no whole core of ``cores`` for the replay's one thread. On a core it shares,
    an idle-class replay still runs whenever a run thread waits (for an expert load, at a graph
    barrier), and while other programs load the host it cost the run far more than the 0.1 the
    goal allows (docs/decisions.md, issue 48 item 8); the panel cannot see their load, only the
    cores and the threads. With a core beyond the threads the replay has its own."""
    return cores < max(1, threads) + 1


def _idle_priority() -> str:
    """Take only the CPU time others leave: SCHED_IDLE where the OS has it, else nice 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):
        os.nice(19)
        return "nice 19"


def _idle_from_parent(pid: int) -> None:
    """The child's priority set from here, before it has imported anything (a few seconds of a
    core at normal priority on a loaded host)."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        except (AttributeError, OSError):
            pass


def _child(conn, source, policies, at_mb) -> None:
    """The replay process: progress messages, then the result (or the error's one line)."""
    from shardscope.engine.base.errors import ShardscopeError

    _idle_priority()
    try:
        result = compute(source, policies, at_mb, progress=lambda f: conn.send(("progress", f)))
        conn.send(("done", (result, stats_line(source))))
    except ShardscopeError as exc:
        conn.send(("error", str(exc)))
    except Exception as exc:  # a bug: one line back to the window, never a dead app
        conn.send(("error", f"internal error: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def compute_in_process(source, policies: tuple[str, ...] = REPLAY_POLICIES, at_mb: tuple[float, ...] = (),
                       progress: Callable[[float], None] | None = None, poll_s: float = 0.2):
    """``compute`` (and the routing statistics line) in a fresh spawned process (no copy of
    llama.cpp's threads) at the idle priority; the caller's thread waits, calling ``progress``
    with the fraction done (and at least every ``poll_s``, so a Cancel raised there ends the
    process at once). Returns (CacheabilityResult, stats line); errors come back as raised there."""
    from shardscope.engine.base.errors import ShardscopeError

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(child, source, policies, at_mb), daemon=True)
    process.start()
    _idle_from_parent(process.pid)  # at once: the child's own call comes only after its imports
    child.close()
    done = 0.0
    try:
        while True:
            if parent.poll(poll_s):
                try:
                    kind, value = parent.recv()
                except EOFError:
                    raise ShardscopeError(f"the cacheability replay ended without an answer "
                                          f"(exit code {process.exitcode})") from None
                if kind == "progress":
                    done = value
                elif kind == "done":
                    return value
                else:
                    raise ShardscopeError(value)
            elif not process.is_alive() and not parent.poll(0):
                raise ShardscopeError(f"the cacheability replay ended without an answer (exit code {process.exitcode})")
            if progress is not None:
                progress(done)  # raises to cancel
    finally:
        if process.is_alive():
            process.terminate()
        process.join(5)
        parent.close()


def stats_line(records) -> str:
    """The overall routing statistics of a RoutingTrace or a trace file, as one line ("" without
    decoded tokens). A file is read by ``replay``'s own loader (any format it reads, its one-line errors)."""
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.experts.trace_stats import summary_line, trace_stats

    trace = records if isinstance(records, RoutingTrace) else read_any_trace(records)
    try:
        return summary_line(trace_stats(trace))
    except ShardscopeError:
        return ""


def eta_text(fraction: float, elapsed_s: float) -> str:
    """"40 % — about 1 min 20 s left" (no ETA before the first tenth of a second's measure)."""
    pct = f"{100 * fraction:.0f} %"
    if fraction <= 0 or elapsed_s <= 0.5:
        return pct
    left = elapsed_s * (1 - fraction) / fraction
    if left < 60:
        return f"{pct} — about {max(1, round(left))} s left"
    return f"{pct} — about {int(left // 60)} min {int(left % 60):02d} s left"


def projected_points(summary, curve: list[tuple[float, float]], used_expert_mb: float,
                     device_id: str) -> list[tuple[float, float]]:
    """Projected tok/s on ``device_id`` at each (size, hit rate): the round's measured dense
    reads and compute, with its expert reads replaced by (1 − hit) × the used experts' bytes
    (``engine.devices.projection.moe_ssd_bytes_per_token``)."""
    dense = getattr(summary, "dense_mb_per_token", 0.0) or 0.0
    out = []
    for size, hit in curve:
        if not math.isfinite(hit):
            continue
        read = moe_ssd_bytes_per_token(dense * MIB, used_expert_mb * MIB, hit) / MIB
        what_if = dataclasses.replace(summary, read_mb_per_token=read)
        # replace() builds a new summary from its fields only: what the run attached beside them (its
        # robust compute estimate, engine/measure/compute_window.py) would be lost, and the curve then
        # projected this host's raw compute: 2 tok/s beside the round's 154 for the same device
        fields = {f.name for f in dataclasses.fields(summary)}
        for key, value in vars(summary).items():
            if key not in fields:
                object.__setattr__(what_if, key, value)
        out.append((size, projection_for(what_if, device_id).tokens_per_s))
    return out


__all__ = ["CacheabilityResult", "cache_sizes", "compute", "compute_in_process", "load_trace", "pause_for_replay",
           "projected_points", "stats_line", "eta_text", "usable_cores"]
