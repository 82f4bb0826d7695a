"""The phone answer held against real phones: published runs projected from their traces and a device preset.

Reads a table of runs (default: tests/data/published-phone-runs.csv, BigMoeOnEdge's OnePlus 15R runs of
Qwen3-30B-A3B, Gemma-4-26B-A4B and gpt-oss-120b, sources in tests/data/published-phone-runs.NOTICE),
takes compute per token from ONE cache-off run per model, projects every run from its route trace's
header and replay and the device preset (engine/devices/published_runs.py says how), and prints one
line per run: projected vs published MiB per token, hit rate, seconds of flash wait and tok/s, each
with its error, and the overlapped bound 1 / max(compute, flash) beside it (an engine that reads while it
computes, as their --overlap runs do, waits only for the longer). Then, per model, whether MiB per token is within 10 % of every run and whether the
projection is ever below the published tok/s by more than 10 % (a roofline is a best case).

    python bench/phone_check.py                                   # the published runs, --device oneplus-15r
    python bench/phone_check.py --model Qwen3-30B-A3B             # one model's rows
    python bench/phone_check.py --rows mine.csv --csv out.csv     # a reader's own runs, written back with
                                                                  # projected_mib_per_token, projected_tok_s, projected_hit

A reader's rows use the same columns (model,trace,k,cache_mib,decode_hit,mib_per_token,tok_s,compute_s,
flash_s,source); the published figures may be left empty (only model, trace, k and cache_mib are needed),
and a model without a cache-off row takes its compute from the published table's run of that model.
Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.runs.output_checks import check_writable

MIB_TOLERANCE = 0.10  # issue 33: MiB per token within 10 % of every published run
TOK_S_FLOOR = -0.10  # and never below the published tok/s by more than 10 %


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


def table(projected) -> str:
    head = ["model", "run", "k", "cache MiB", "MiB/token proj.", "publ.", "error", "hit proj.", "publ.", "error",
            "flash wait s proj.", "publ.", "error", "compute s proj.", "publ.", "tok/s proj.", "publ.", "error",
            "tok/s overlapped"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|"]
    for p in projected:
        r = p.run
        hit_error = None if r.decode_hit is None or r.cache_mib == 0 else p.hit - r.decode_hit
        hit = "–" if r.cache_mib == 0 else f"{100 * p.hit:.1f} % ({p.hit_note})"
        cells = [r.model + (" (calibration)" if p.calibration else ""), run_name(r.source), str(r.k), f"{r.cache_mib:g}",
                 f"{p.mib_per_token:.1f}", _num(r.mib_per_token, ".1f"), _pct(p.error("mib_per_token")),
                 hit, "–" if r.decode_hit is None else f"{100 * r.decode_hit:.1f} %",
                 "–" if hit_error is None else f"{100 * hit_error:+.1f} pts",
                 f"{p.flash_s:.3f}", _num(r.flash_s, ".3f"), _pct(p.error("flash_s")),
                 f"{p.compute_s:.3f}", _num(r.compute_s, ".3f"),
                 f"{p.tok_s:.2f}", _num(r.tok_s, ".3g"), _pct(p.error("tok_s")), f"{p.overlapped_tok_s:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(projected) -> list[str]:
    out = []
    for model in dict.fromkeys(p.run.model for p in projected):
        rows = [p for p in projected if p.run.model == model]
        mib = [p.error("mib_per_token") for p in rows if p.error("mib_per_token") is not None]
        tok = [p.error("tok_s") for p in rows if p.error("tok_s") is not None]
        parts = [f"{model}:"]
        if mib:
            inside = sum(abs(e) <= MIB_TOLERANCE for e in mib)
            parts.append(f"MiB/token within {MIB_TOLERANCE:.0%} of {inside} of {len(mib)} runs "
                         f"(errors {_pct(min(mib))} to {_pct(max(mib))});")
        if tok:
            below = [e for e in tok if e < TOK_S_FLOOR]
            parts.append(f"tok/s errors {_pct(min(tok))} to {_pct(max(tok))}; "
                         + ("never below the published by more than 10 %" if not below
                            else f"{len(below)} of {len(tok)} runs below the published by more than 10 %"))
        overlap_low = [p for p in rows if p.run.tok_s is not None and p.run.tok_s > p.overlapped_tok_s]
        if tok:
            parts[-1] += ";"
            parts.append(f"above the overlapped bound 1 / max(compute, flash): {len(overlap_low)} of {len(tok)} runs")
        out.append(" ".join(parts))
    return out


def main(argv: list[str] | None = None) -> int:
    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.devices.published_runs import (ADDED_COLUMNS, COLUMNS, PUBLISHED_RUNS, REPLAY_POLICY,
                                                           project_runs, read_runs, rows_with_projection)

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
        projected, calibrations = project_runs(runs, device, policy=args.policy, calibration_pool=pool)
    except ShardscopeError as exc:
        print(f"phone_check: {exc}", file=sys.stderr)
        return 2
    s = device.ssd_model
    print(f"device: {device.name}: flash {s.mb_s:g} MB/s, {s.latency_s * 1e6:g} µs per request, queue depth "
          f"{s.queue_depth} (profiles/devices/{device.id}.toml); hits replayed with {args.policy}")
    for c in calibrations.values():
        print(f"compute: {c.model}: {c.compute_s:.3f} s a token at k={c.run.k} from the cache-off run "
              f"{c.run.source.split(':')[0]} ({c.how}); other k scaled by the layer bytes a token touches")
    print(table(projected))
    for line in verdicts(projected):
        print(line)
    if args.csv:
        from shardscope.engine.base.atomic_write import write_text_atomic

        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS) + list(ADDED_COLUMNS), lineterminator="\n")
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
