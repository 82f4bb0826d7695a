"""The phone answer held against real phones: published runs projected from their traces and a device preset.

Reads a table of runs (default: tests/data/published-phone-runs.csv, BigMoeOnEdge's OnePlus 15R runs of
Qwen3-30B-A3B, Gemma-4-26B-A4B and gpt-oss-120b, sources in tests/data/published-phone-runs.NOTICE),
takes compute per byte from ONE cache-off run per model, projects every run from its route trace and the
device preset (its probe-fitted flash model; engine/devices/published_runs.py says how; the preset's two cache
costs, first touch and management per missed MiB, are fitted here over the published table's serial cache runs,
and each of those runs is projected with the two fitted without it: fit_cache_costs), and prints one
line per run: projected vs published MiB per token, hit rate, flash seconds, compute, and the two figures,
the serial time 1 / (compute + flash) and the overlapped bound 1 / max(compute, flash), with where the
published tok/s lies against them. Then, per model and over the runs that are not calibration runs, the
checks of issue 53: MiB per token within 10 %, flash within 20 % (an overlapping run's stall inside
max(F - C, 0) .. F), tok/s between the two figures or within 10 % of one; then leave-one-model-out (each
model's runs with another model's compute per byte), and on the published table it writes the error bar
`size` and the window print (profiles/devices/projection-error.json).

    python -m bench.sweeps.phone_check                                # the published runs, --device oneplus-15r
    python -m bench.sweeps.phone_check --model Qwen3-30B-A3B          # one model's rows
    python -m bench.sweeps.phone_check --rows mine.csv --csv out.csv  # a reader's own runs, written back with
                                                                  # the projected columns added

A reader's rows use the same columns (model,trace,k,cache_mib,decode_hit,mib_per_token,tok_s,compute_s,
flash_s,source, optionally lanes,engine); the published figures may be left empty (only model, trace, k and
cache_mib are needed), and a model without a cache-off row takes its compute from the published table's run
of that model. Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.runs.output_checks import check_writable

MIB_TOLERANCE = 0.10  # issue 53: MiB per token within 10 % of every published run but the calibration runs
FLASH_TOLERANCE = 0.20  # flash seconds within 20 % (an overlap run's stall: inside the stall range, or 20 % of it)
TOK_S_TOLERANCE = 0.10  # tok/s between the serial figure and the overlapped bound, or within 10 % of one


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:+.1f} %"


def _num(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def run_name(source: str) -> str:
    """A run's short name: its file's stem where the source names one ('docs/.../qwen_c2000_l4.log: ...')."""
    first = source.split(":")[0].split(" (")[0].strip()
    if "/" not in first:
        return source[:24] or "–"
    return Path(first).stem + (" (trace run)" if "route-trace" in first else "")


def _flash_cell(p) -> str:
    if p.run.engine == "overlap":
        lo, hi = p.stall_range
        return f"{p.flash_s:.3f} (stall {lo:.3f}–{hi:.3f})"
    return f"{p.flash_s:.3f}"


def _where(p) -> str:
    """Where the published tok/s lies against the two figures."""
    e = p.tok_s_error()
    if e is None:
        return "–"
    if e == 0:
        return "between"
    return f"{_pct(e)} of the {'serial' if p.run.tok_s < p.serial_tok_s else 'overlapped'}"


def table(projected) -> str:
    head = ["model", "run", "k", "cache MiB", "lanes", "engine", "MiB/token proj.", "publ.", "error", "hit proj.",
            "publ.", "flash s proj.", "publ.", "error", "compute s proj.", "publ.", "tok/s serial", "overlapped",
            "publ.", "publ. vs the two"]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * 4 + ["---:"] * (len(head) - 6)) + "|"]
    for p in projected:
        r = p.run
        hit = "–" if r.cache_mib == 0 else f"{100 * p.hit:.1f} % ({p.hit_note})"
        cells = [r.model + (" (calibration)" if p.calibration else ""), run_name(r.source), str(r.k),
                 f"{r.cache_mib:g}",
                 "–" if r.lanes is None else str(r.lanes), r.engine,
                 f"{p.mib_per_token:.1f}", _num(r.mib_per_token, ".1f"), _pct(p.error("mib_per_token")),
                 hit, "–" if r.decode_hit is None else f"{100 * r.decode_hit:.1f} %",
                 _flash_cell(p), _num(r.flash_s, ".3f"), _pct(p.flash_error()),
                 f"{p.compute_s:.3f}", _num(r.compute_s, ".3f"),
                 f"{p.serial_tok_s:.2f}", f"{p.overlapped_tok_s:.2f}", _num(r.tok_s, ".3g"), _where(p)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _span(errors: list[float]) -> str:
    return f"{_pct(min(errors))} to {_pct(max(errors))}" if errors else "–"


def verdicts(projected) -> list[str]:
    """Per model, over the runs that are not calibration runs: the issue's three checks, counted."""
    out = []
    for model in dict.fromkeys(p.run.model for p in projected):
        rows = [p for p in projected if p.run.model == model and not p.calibration]
        mib = [e for e in (p.error("mib_per_token") for p in rows) if e is not None]
        flash = [e for e in (p.flash_error() for p in rows) if e is not None]
        tok = [e for e in (p.tok_s_error() for p in rows) if e is not None]
        parts = [f"{model} ({len(rows)} runs besides the calibration):",
                 f"MiB/token within {MIB_TOLERANCE:.0%} of {sum(abs(e) <= MIB_TOLERANCE for e in mib)} of {len(mib)} "
                 f"({_span(mib)});",
                 f"flash within {FLASH_TOLERANCE:.0%} of {sum(abs(e) <= FLASH_TOLERANCE for e in flash)} of "
                 f"{len(flash)} ({_span(flash)});",
                 f"tok/s between serial and overlapped or within {TOK_S_TOLERANCE:.0%} of one: "
                 f"{sum(abs(e) <= TOK_S_TOLERANCE for e in tok)} of {len(tok)} ({_span(tok)})"]
        out.append(" ".join(parts))
    return out


def lomo_table(lomo) -> str:
    head = ["calibrated on", "model", "run", "k", "cache MiB", "engine", "compute s proj.", "publ.", "error",
            "tok/s serial", "overlapped", "publ.", "serial error", "publ. vs the two"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
    for cal_model, rows in lomo.items():
        for p in rows:
            r = p.run
            serial_error = None if not r.tok_s else p.serial_tok_s / r.tok_s - 1
            cells = [cal_model, r.model, run_name(r.source), str(r.k), f"{r.cache_mib:g}", r.engine,
                     f"{p.compute_s:.3f}", _num(r.compute_s, ".3f"), _pct(p.error("compute_s")),
                     f"{p.serial_tok_s:.2f}", f"{p.overlapped_tok_s:.2f}", _num(r.tok_s, ".3g"), _pct(serial_error),
                     _where(p)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def lomo_summary(lomo) -> list[str]:
    out = []
    for cal_model, rows in lomo.items():
        for model in dict.fromkeys(p.run.model for p in rows):
            mine = [p for p in rows if p.run.model == model]
            compute = [e for e in (p.error("compute_s") for p in mine) if e is not None]
            tok = [e for e in (p.tok_s_error() for p in mine) if e is not None]
            out.append(f"{model} from {cal_model}'s compute per byte: compute {_span(compute)}; tok/s between serial "
                       f"and overlapped or within {TOK_S_TOLERANCE:.0%}: {sum(abs(e) <= TOK_S_TOLERANCE for e in tok)} "
                       f"of {len(tok)} ({_span(tok)})")
    return out


def measured_errors(projected, lomo) -> dict[str, tuple[float, float]]:
    """(low, high) of projected / published - 1 per figure over the non-calibration runs: the error bar."""
    rows = [p for p in projected if not p.calibration and p.run.tok_s]
    figures: dict[str, list[float]] = {
        "serial_tok_s": [p.serial_tok_s / p.run.tok_s - 1 for p in rows],
        "overlapped_tok_s": [p.overlapped_tok_s / p.run.tok_s - 1 for p in rows],
        "engine_tok_s": [p.tok_s / p.run.tok_s - 1 for p in rows],
        "flash_s": [e for e in (p.flash_error() for p in rows) if e is not None],
        "mib_per_token": [e for e in (p.error("mib_per_token") for p in rows) if e is not None],
        "leave_one_model_out_tok_s": [p.serial_tok_s / p.run.tok_s - 1 if p.run.engine == "serial"
                                      else p.tok_s_error() for ps in lomo.values() for p in ps if p.run.tok_s],
    }
    return {k: (min(v), max(v)) for k, v in figures.items() if v}


F_GRID_US = tuple(range(0, 2001, 50))  # first touch candidates, µs a MiB; flash is interpolated between them


@dataclass(frozen=True)
class CacheCostFit:
    """The device's two cache costs fitted over the serial cache runs (fit_cache_costs), and again without each.

    ``first_touch_us_per_mib`` f: the reading lane's cost per MiB read into fresh pages, where the runs'
    projected flash seconds per projected MiB come closest to the published per published MiB (least squares
    of the log ratio). ``cache_mgmt_us_per_mib`` g: the compute a missed MiB adds, least squares through 0 of
    (published compute - the cache-off compute per byte x the bytes the token touches) on the published MiB.
    ``loo``: per run source, (f, g) fitted over the other runs: the figures that run is checked with."""

    first_touch_us_per_mib: float
    cache_mgmt_us_per_mib: float
    runs: tuple  # the PublishedRuns fitted over
    loo: dict  # source -> (f, g) without that run
    flash_at: dict  # source -> projected flash seconds at each F_GRID_US value (the run's own lanes)

    def flash_s(self, source: str, us: float) -> float:
        """The run's projected flash seconds at a first-touch cost of ``us`` (linear between grid points)."""
        grid, values = F_GRID_US, self.flash_at[source]
        i = min(max(int(us // (grid[1] - grid[0])), 0), len(grid) - 2)
        t = (us - grid[i]) / (grid[i + 1] - grid[i])
        return values[i] + t * (values[i + 1] - values[i])


def fit_runs(runs) -> list:
    """The runs the cache costs are fitted over: serial engines with a cache that published flash, compute and
    MiB (an overlapping engine publishes a stall and a compute that absorbs its waits: neither is a cost)."""
    return [r for r in runs if r.engine == "serial" and r.cache_mib > 0 and r.flash_s and r.compute_s
            and r.mib_per_token]


def fit_cache_costs(device, runs, policy: str) -> CacheCostFit | None:
    """f and g over ``fit_runs(runs)``, and leave-one-out (CacheCostFit). None with fewer than two such runs."""
    import math
    from dataclasses import replace

    from shardscope.engine.base.units import MIB
    from shardscope.engine.devices.published_runs import (
        calibration_run,
        flash_seconds,
        touched_layer_bytes,
        trace_arch,
    )
    from shardscope.engine.devices.replay_at_k import replay_at_k

    fitted = fit_runs(runs)
    if len(fitted) < 2:
        return None
    traces = _Loaded()
    flash_at, missed = {}, {}
    for r in fitted:
        row = replay_at_k(traces.trace(r), policy, int(r.cache_mib * MIB), r.k, trend=False)
        header, arch = traces.trace(r).header, trace_arch(r.trace_path)
        missed[r.source] = row.missed_mib_per_token
        flash_at[r.source] = [flash_seconds(replace(device, first_touch_us_per_mib=us), row.accesses, header, arch,
                                            r.lanes, row.n_tokens, cache=True) for us in F_GRID_US]
    shell = CacheCostFit(0.0, 0.0, tuple(fitted), {}, flash_at)

    def f_error(some, us: float) -> float:
        return sum((math.log(shell.flash_s(r.source, us) / missed[r.source])
                    - math.log(r.flash_s / r.mib_per_token)) ** 2 for r in some)

    def fit_f(some) -> float:
        lo, hi = float(F_GRID_US[0]), float(F_GRID_US[-1])  # unimodal (flash rises with f): golden section
        ratio = (math.sqrt(5) - 1) / 2
        for _ in range(40):
            a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
            lo, hi = (lo, b) if f_error(some, a) <= f_error(some, b) else (a, hi)
        return round((lo + hi) / 2, 1)

    base = {}  # the compute the projection gives each run before its misses' management
    for r in fitted:
        cal = calibration_run(runs, r.model, traces)
        if cal is None or cal.compute_s is None:
            return None
        base[r.source] = (cal.compute_s / touched_layer_bytes(traces.trace(cal).header, cal.k)
                          * touched_layer_bytes(traces.trace(r).header, r.k))

    def fit_g(some) -> float:
        num = sum(r.mib_per_token * (r.compute_s - base[r.source]) for r in some)
        return round(num / sum(r.mib_per_token ** 2 for r in some) * 1e6, 1)

    loo = {r.source: (fit_f([x for x in fitted if x is not r]), fit_g([x for x in fitted if x is not r]))
           for r in fitted}
    return CacheCostFit(fit_f(fitted), fit_g(fitted), tuple(fitted), loo, flash_at)


class _Loaded:
    """Each trace loaded once (what calibration_run asks of its traces argument: ``trace(run)``)."""

    def __init__(self):
        self._traces: dict = {}

    def trace(self, run):
        from shardscope.engine.experts.foreign_traces import load_trace

        if run.trace_path not in self._traces:
            self._traces[run.trace_path] = load_trace(run.trace_path)
        return self._traces[run.trace_path]


def without_itself(p, fit, device):
    """A fitted run's projection with the cache costs fitted without it: its flash at that first touch (the same
    replay and flash model) and its compute with that management cost (compute is linear in it); others as given."""
    from dataclasses import replace

    if fit is None or p.run.source not in fit.loo:
        return p
    f, g = fit.loo[p.run.source]
    compute = p.compute_s + (g - device.cache_mgmt_us_per_mib) * 1e-6 * p.mib_per_token
    return replace(p, flash_s=fit.flash_s(p.run.source, f), compute_s=compute, calibration=False)


def main(argv: list[str] | None = None) -> int:
    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.devices.published_runs import (
        ADDED_COLUMNS,
        COLUMNS,
        OPTIONAL_COLUMNS,
        PUBLISHED_RUNS,
        REPLAY_POLICY,
        leave_one_model_out,
        project_runs,
        read_runs,
        rows_with_projection,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=None, help=f"runs CSV with the columns {','.join(COLUMNS)} "
                                                 f"(default: {PUBLISHED_RUNS.relative_to(PUBLISHED_RUNS.parents[2])})")
    ap.add_argument("--device", default="oneplus-15r", help="device preset (default oneplus-15r)")
    ap.add_argument("--model", default=None, help="only this model's rows")
    ap.add_argument("--policy", default=REPLAY_POLICY, help=f"cache policy the traces are replayed with "
                                                            f"(default {REPLAY_POLICY}: BigMoeOnEdge's)")
    ap.add_argument("--csv", default=None, metavar="OUT", help="write each row back with "
                                                              + ", ".join(ADDED_COLUMNS) + " added")
    args = ap.parse_args(argv)
    try:
        from shardscope.engine.experts.replay import REPLAY_POLICIES

        if args.policy not in REPLAY_POLICIES:
            raise ShardscopeError(f"--policy: '{args.policy}' is not one of {', '.join(REPLAY_POLICIES)}")
        if args.csv:
            check_writable("--csv", args.csv)
        device = get_device(args.device)
        runs = read_runs(args.rows or PUBLISHED_RUNS)
        if args.model:
            runs = [r for r in runs if r.model == args.model]
            if not runs:
                raise ShardscopeError(f"--model {args.model}: no such model in {args.rows or PUBLISHED_RUNS}")
        pool = read_runs(PUBLISHED_RUNS) if args.rows else []
        published = pool or read_runs(PUBLISHED_RUNS)
        # the cache costs are fitted over the published table's serial cache runs; each of those runs is then
        # projected with the costs fitted without it, so none of them is a calibration run
        fit = fit_cache_costs(device, published, args.policy)
        projected, calibrations = project_runs(runs, device, policy=args.policy, calibration_pool=pool)
        projected = [without_itself(p, fit, device) for p in projected]
        lomo = {m: [without_itself(p, fit, device) for p in rows]
                for m, rows in leave_one_model_out(runs, device, policy=args.policy).items()}
    except ShardscopeError as exc:
        print(f"phone_check: {exc}", file=sys.stderr)
        return 2
    flash = device.flash_model
    print(f"device: {device.name}: flash {flash.describe()} (profiles/devices/{device.id}.toml"
          + (f", fitted from its [flash_probe]: {flash.source}" if device.flash_fit is not None else "") + ")")
    print(f"hits replayed with {args.policy} at each run's k; flash = each layer's misses one batch of reads, the "
          "run's lanes in flight")
    if fit is not None:
        names = ", ".join(run_name(r.source) for r in fit.runs)
        print(f"cache costs fitted over the {len(fit.runs)} serial cache runs ({names}): first touch "
              f"{fit.first_touch_us_per_mib:g} µs a MiB (preset {device.first_touch_us_per_mib:g}), cache management "
              f"{fit.cache_mgmt_us_per_mib:g} µs a missed MiB (preset {device.cache_mgmt_us_per_mib:g}); each of them "
              "projected with the two fitted over the others:")
        for r in fit.runs:
            f, g = fit.loo[r.source]
            print(f"  without {run_name(r.source)}: first touch {f:g}, cache management {g:g} µs a MiB")
    for c in calibrations.values():
        print(f"compute: {c.model}: {c.compute_s:.3f} s a token at k={c.run.k} from the cache-off run "
              f"{c.run.source.split(':')[0]} ({c.how}) = {c.s_per_byte * 2**30 * 1e3:.1f} ms per GiB of layer bytes "
              "a token touches; other k scaled by those bytes")
    print(table(projected))
    for line in verdicts(projected):
        print(line)
    if lomo:
        print()
        print("Leave one model out: each model's runs projected with another model's compute per byte")
        print(lomo_table(lomo))
        for line in lomo_summary(lomo):
            print(line)
    if args.rows is None and args.model is None and args.policy == REPLAY_POLICY:
        from datetime import date

        from shardscope.engine.devices.projection_error import write_errors

        errors = measured_errors(projected, lomo)
        n = sum(1 for p in projected if not p.calibration and p.run.tok_s)
        path = write_errors(errors, runs=n, device=device.name.split(" (")[0], date=date.today().isoformat(),
                            source=str(PUBLISHED_RUNS.relative_to(PUBLISHED_RUNS.parents[2])))
        print(f"error bar (projected / published - 1 over the {n} runs besides the calibration runs): "
              + "; ".join(f"{k} {_pct(lo)} to {_pct(hi)}" for k, (lo, hi) in errors.items())
              + f"; written to {path.relative_to(PUBLISHED_RUNS.parents[2])}")
    if args.csv:
        from shardscope.engine.base.atomic_write import write_text_atomic

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS) + list(OPTIONAL_COLUMNS) + list(ADDED_COLUMNS),
                                lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows_with_projection(projected))
        try:
            write_text_atomic(args.csv, buffer.getvalue())
        except OSError as exc:
            print(f"phone_check: --csv {args.csv}: could not be written ({exc.strerror or exc})", file=sys.stderr)
            return 2
        print(f"wrote {len(projected)} rows to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
