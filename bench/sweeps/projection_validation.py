"""Does the roofline predict a slower disk? Runs on an emulated SSD, projected and compared.

The experiment behind docs/projection-validation.md: each rate is a cold run with
``--ssd-mb-s`` throttling the loader; the run's own measurement is projected onto
"this host with an SSD of that rate" (engine.devices.run_projection) and set beside the
tok/s it measured.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from shardscope.engine.base.errors import ShardscopeError  # noqa: E402
from shardscope.engine.base.finite import is_finite_number  # noqa: E402
from shardscope.engine.devices.devices import MIB  # noqa: E402
from shardscope.engine.devices.projection import project_from_bandwidth  # noqa: E402
from shardscope.engine.devices.run_projection import measurement_from_summary  # noqa: E402
from shardscope.engine.runs.run_factory import open_run  # noqa: E402


@dataclass(frozen=True)
class ValidationRow:
    """One emulated-disk run and what the roofline makes of it.

    ``projected_ts``: the run's own measurement projected on "a host with an SSD of
    ``ssd_mb_s``" (project_from_bandwidth, same compute, no DRAM term).
    ``cross_ts``: the *reference* run's measurement (no emulation, fast disk)
    projected on that SSD: the real use of a projection, predicting another disk.
    ``loader_mb_s``: the loader's own rate while loading (bytes / time in loads):
    how fast the emulated disk actually delivered. ``delivered_ts``: the run's
    measurement projected at that delivered rate instead of the nominal one — a
    diagnostic that separates the rate limiter's shortfall from the projection's own
    error (the validation's verdict uses the nominal rate). ``others_cpu_pct``: CPU
    time other processes used during the run, as a share of all cores.
    """

    ssd_mb_s: float
    measured_ts: float
    projected_ts: float
    error_pct: float
    bound: str
    read_mb_per_token: float
    compute_ms_per_token: float
    wait_ms_per_token: float
    loader_mb_s: float
    disk_busy_pct: float
    cross_ts: float = math.nan
    cross_error_pct: float = math.nan
    steal_pct: float = math.nan
    others_cpu_pct: float = math.nan
    delivered_ts: float = math.nan
    repeat: int = 0


def _cpu_counters() -> tuple[float, float]:
    """(CPU seconds other processes used, seconds stolen by the hypervisor), system-wide so far.

    Other processes = all busy CPU time minus this process's own. On a shared 2-core
    machine another process's work slows a run the projection knows nothing about.
    """
    try:
        import psutil

        t = psutil.cpu_times()
        busy = sum(getattr(t, f) for f in ("user", "nice", "system", "irq", "softirq", "steal") if hasattr(t, f))
        own = psutil.Process().cpu_times()
        return busy - (own.user + own.system), float(getattr(t, "steal", math.nan))
    except Exception:  # noqa: BLE001 - a missing counter only blanks a diagnostic column
        return math.nan, math.nan


def _run_once(settings):
    """One cold run: summary, loader rate over decoded tokens, its busy time, CPU steal %, others' CPU %."""
    import os
    import time


    marks = {}
    holder = {}

    def on_token(index, piece, dt):
        if index == 0 and "run" in holder:
            c = holder["run"].controller.snapshot().counters
            marks["first"] = (c.loaded_bytes, c.load_s)

    (others0, steal0), t0 = _cpu_counters(), time.perf_counter()
    with open_run(settings, on_token=on_token, streams="layers") as run:
        holder["run"] = run
        summary = run.run()
        c = run.controller.snapshot().counters
    others1, steal1 = _cpu_counters()
    cpu_s = (time.perf_counter() - t0) * (os.cpu_count() or 1)
    steal, others = 100.0 * (steal1 - steal0) / cpu_s, 100.0 * (others1 - others0) / cpu_s
    loaded0, load_s0 = marks.get("first", (0, 0.0))
    loaded, load_s = c.loaded_bytes - loaded0, c.load_s - load_s0
    loader_mb_s = loaded / 1e6 / load_s if load_s > 0 else math.nan
    return summary, loader_mb_s, load_s, steal, others


def validate_on_emulated_ssd(model_path: str, rates: list[float], *, budget_mb: int, shard_mb: int = 32,
                             n_gen: int = 8, threads: int = 2, policy: str = "lru", prefetch_depth: int = 1,
                             repeats: int = 1, reference: bool = True,
                             progress=None) -> list[ValidationRow]:
    """Run the model with ``--ssd-mb-s`` at each rate, project each run, compare.

    Each run is cold (a fresh StreamingRun evicts every non-pinned shard). Rates are
    interleaved over ``repeats`` rounds (150, 300, 600, 150, ...) so a noisy spell of
    the host hits different rates rather than all repeats of one. With ``reference``
    a first run without emulation gives the measurement the ``cross_*`` columns
    project onto each rate. ``progress`` (optional) is called with each finished row.
    """
    from shardscope.engine.knobs.settings import RunSettings

    base = RunSettings(model_path=model_path, budget_mb=budget_mb, shard_mb=shard_mb, n_gen=n_gen,
                       threads=threads, policy=policy, prefetch_depth=prefetch_depth, n_ctx=128)
    ref_m = None
    if reference:
        ref, *_ = _run_once(base.with_changes(ssd_mb_s=0.0))
        ref_m = measurement_from_summary(ref)
    rows = []
    for repeat in range(repeats):
        for rate in rates:
            summary, loader_mb_s, load_s, steal, others = _run_once(base.with_changes(ssd_mb_s=float(rate)))
            m = measurement_from_summary(summary)
            p = project_from_bandwidth(m, ssd_mb_s=rate)
            decode_s = (summary.n_gen - 1) / summary.avg_ts if summary.avg_ts > 0 else math.nan
            row = dict(
                ssd_mb_s=float(rate),
                measured_ts=summary.avg_ts,
                projected_ts=p.tokens_per_s,
                error_pct=100.0 * (p.tokens_per_s - summary.avg_ts) / summary.avg_ts,
                bound=p.bound,
                read_mb_per_token=summary.read_mb_per_token,
                compute_ms_per_token=m.compute_s_per_token * 1000,
                wait_ms_per_token=summary.wait_ms_per_token,
                loader_mb_s=loader_mb_s,
                disk_busy_pct=100.0 * load_s / decode_s if decode_s > 0 else math.nan,
                steal_pct=steal,
                others_cpu_pct=others,
                delivered_ts=(project_from_bandwidth(m, ssd_mb_s=loader_mb_s).tokens_per_s
                              if is_finite_number(loader_mb_s) and loader_mb_s > 0 else math.nan),
                repeat=repeat,
            )
            if ref_m is not None:
                cross = project_from_bandwidth(ref_m, ssd_mb_s=rate).tokens_per_s
                row.update(cross_ts=cross, cross_error_pct=100.0 * (cross - summary.avg_ts) / summary.avg_ts)
            rows.append(ValidationRow(**row))
            if progress:
                progress(rows[-1])
    return rows


def median_errors(rows: list[ValidationRow]) -> dict[float, tuple[float, float, float]]:
    """Per rate: (median measured tok/s, median projected tok/s, error of the medians in %)."""
    import statistics

    out = {}
    for rate in dict.fromkeys(r.ssd_mb_s for r in rows):
        group = [r for r in rows if r.ssd_mb_s == rate]
        measured = statistics.median(r.measured_ts for r in group)
        projected = statistics.median(r.projected_ts for r in group)
        out[rate] = (measured, projected, 100.0 * (projected - measured) / measured)
    return out


def format_validation_table(rows: list[ValidationRow]) -> str:
    """A Markdown table of validation rows (what docs/projection-validation.md shows)."""
    lines = [
        "| run | emulated SSD MB/s | measured tok/s | projected tok/s | error | bound | MiB read/token "
        "| compute ms/token | wait ms/token | loader MB/s while loading | disk busy | other processes' CPU "
        "| projected at the delivered rate | projected from the unthrottled run | its error |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.repeat + 1} | {r.ssd_mb_s:g} | {r.measured_ts:.3f} | {r.projected_ts:.3f} | {r.error_pct:+.1f} % "
            f"| {r.bound} | {r.read_mb_per_token:.0f} | {r.compute_ms_per_token:.0f} | {r.wait_ms_per_token:.0f} "
            f"| {r.loader_mb_s:.0f} | {r.disk_busy_pct:.0f} % | {r.others_cpu_pct:.0f} % | {r.delivered_ts:.3f} "
            f"| {r.cross_ts:.3f} "
            f"| {r.cross_error_pct:+.1f} % |"
        )
    return "\n".join(lines)


def format_median_table(rows: list[ValidationRow]) -> str:
    lines = ["| emulated SSD MB/s | runs | median measured tok/s | median projected tok/s | error |",
             "|---:|---:|---:|---:|---:|"]
    for rate, (measured, projected, err) in median_errors(rows).items():
        n = sum(1 for r in rows if r.ssd_mb_s == rate)
        lines.append(f"| {rate:g} | {n} | {measured:.3f} | {projected:.3f} | {err:+.1f} % |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.sweeps.projection_validation MODEL --budget-mb N [--rates 150,300,600]``:
    the validation table."""
    import argparse
    import os

    from shardscope.engine.knobs.knob_ranges import parse_knob

    p = argparse.ArgumentParser(prog="python -m bench.sweeps.projection_validation", description=main.__doc__)
    p.add_argument("model")
    p.add_argument("--budget-mb", type=int, default=None, help="default: half the model file")
    p.add_argument("--rates", default="150,300,600")
    p.add_argument("--shard-mb", type=int, default=32)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    try:
        rates = parse_knob("--rates", args.rates, "ssd_mb_s")
        budget = args.budget_mb or int(os.path.getsize(args.model) / MIB / 2)
        rows = validate_on_emulated_ssd(args.model, rates, budget_mb=budget, shard_mb=args.shard_mb,
                                        n_gen=args.tokens, repeats=args.repeats,
                                        progress=lambda r: print(f"  {r.ssd_mb_s:g} MB/s: measured "
                                                                 f"{r.measured_ts:.3f}, projected "
                                                                 f"{r.projected_ts:.3f} tok/s "
                                                                 f"({r.error_pct:+.1f} %)", file=sys.stderr))
    except ShardscopeError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
    print(f"model {os.path.basename(args.model)}, budget {budget} MB, shard {args.shard_mb} MB, lru, depth 1, "
          f"2 threads, {args.tokens} tokens (first excluded)\n")
    print(format_validation_table(rows))
    print()
    print(format_median_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
