"""The cross-check table of docs/cross-checks.md: every figure against its independent source.

Runs the scenarios of tests/test_cross_checks.py (lru and pinned at budget ½ model,
prefetch depth 2; pinned after a budget cut from "fits" to ½ model mid-run), each
``--repeats`` times with ``--tokens`` tokens, and prints one markdown row per figure:
the median and the worst relative difference over all compared points of all runs,
and whether every run that compared it agreed (engine/runs/verify.py's rules, 5 %), with the
runs where it had nothing to compare counted apart as not checked.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from bench.lib.bench_models import synthetic_model
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.verify import verified_run
from shardscope.engine.runs.verify_report import format_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=320)
    parser.add_argument("--tokens", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    model = synthetic_model(args.size_mb)
    half = int(os.path.getsize(model) / MIB / 2)
    shard = max(1.0, round(args.size_mb / 10, 1))
    common = dict(model_path=model, shard_mb=shard, prefetch_depth=2, threads=args.threads, n_ctx=128)
    scenarios = [
        ("lru", RunSettings(**common, policy="lru", budget_mb=half, n_gen=args.tokens), None),
        ("pinned", RunSettings(**common, policy="pinned", budget_mb=half, n_gen=args.tokens), None),
        ("pinned, cut", RunSettings(**common, policy="pinned", budget_mb=65536, n_gen=args.tokens + 4), half),
    ]
    rows: dict[str, dict] = {}
    for r in range(args.repeats):
        for name, settings, cut in scenarios:
            report, _ = verified_run(settings, cut_budget_mb=cut, cut_at_token=4)
            print("\n".join(format_report(report)), flush=True)
            for c in report.checks:
                key = "tok/s after the cut (llama.cpp's counters restart)" if c.figure.startswith("tok/s, the") \
                    else c.figure
                row = rows.setdefault(key, {"source": c.source, "diffs": [], "worst": [], "ok": True,
                                            "relation": c.relation, "runs": 0, "within": 0,
                                            "unchecked": 0})
                row["diffs"] += c.diffs
                row["within"] += round(c.share * len(c.diffs)) if c.diffs else 0
                if c.diffs:
                    row["worst"].append(c.worst)
                row["ok"] &= c.ok or not c.checked  # a run that compared nothing is counted apart
                row["unchecked"] += not c.checked
                row["runs"] += 1
    print(f"\n{args.repeats} x (lru, pinned, pinned with a mid-run cut), {args.tokens} tokens, "
          f"{Path(model).name}, shard {shard:g} MiB, prefetch depth 2, n_threads {args.threads}\n")
    print("| figure | independent source | rel. | median diff | worst diff | points within 5 % | "
          "every checked run agrees (runs not checked) |")
    print("|---|---|---|---|---|---|---|")
    for figure, row in rows.items():
        med = f"{statistics.median(row['diffs']):+.1%}" if row["diffs"] else "n/a"
        worst = f"{max(row['worst'], key=abs):+.1%}" if row["worst"] else "n/a"
        print(f"| {figure} | {row['source']} | {row['relation']} | {med} | {worst} | "
              f"{row['within']} of {len(row['diffs'])} "
              f"| {'yes' if row['ok'] else 'NO'} ({row['runs'] - row['unchecked']} of {row['runs']} runs checked"
              f"{', ' + str(row['unchecked']) + ' NOT CHECKED' if row['unchecked'] else ''}) |")


if __name__ == "__main__":
    main()
