"""Soak: continuous streaming generation with the window open and charts running.

A synthetic model larger than the budget streams for ``--minutes``; every 10 s the
process RSS, the charts' point counts and any error are recorded. Passes when RSS
after the first minute grows ≤ 5 %, chart memory stays bounded, and nothing failed.

Streaming makes RSS swing by a shard or two from one sample to the next (weights
come and go under the budget), so growth compares *means*: the last five minutes
against the five after the first minute. The peak is printed too.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import psutil

from bench.lib.virtual_display import start_display

DISPLAY_LINE = start_display()  # before Qt is imported: it picks its platform once

from bench.lib.bench_models import synthetic_model  # noqa: E402
from bench.lib.gui_session import open_window, pump, stop  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402

MIB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--size-mb", type=int, default=600)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    model = synthetic_model(args.size_mb)
    size_mb = os.path.getsize(model) / MIB
    settings = RunSettings(model_path=model, budget_mb=int(size_mb / 2), shard_mb=32, prefetch_depth=2,
                           policy="pinned", n_gen=args.tokens, n_ctx=128)
    app, window = open_window(model, settings)
    proc = psutil.Process()
    window.start_run()
    start = time.perf_counter()
    rows = []
    errors = []
    while time.perf_counter() - start < args.minutes * 60:
        pump(app, 10)
        if window.last_error and window.last_error not in errors:
            errors.append(window.last_error)
        points = max(window.chart.point_count(k) for k in ("rss", "weights", "ssd", "hit", "toks"))
        minute = (time.perf_counter() - start) / 60
        rss = proc.memory_info().rss / MIB
        rounds = len(window.summaries)
        rows.append((minute, rss, points, rounds))
        print(f"  {minute:6.2f} min  RSS {rss:7.1f} MB  chart points {points:5d}  rounds {rounds:4d}  "
              f"running {window.is_running()}", flush=True)
        if not window.is_running():
            errors.append("run ended by itself")
            break
    stop(app, window)
    window.close()
    after_first = [r for r in rows if r[0] >= 1.0] or rows
    window_rows = max(1, min(30, len(after_first) // 2))  # 5 minutes of 10 s rows
    base = sum(r[1] for r in after_first[:window_rows]) / window_rows
    final = sum(r[1] for r in after_first[-window_rows:]) / window_rows
    peak = max(r[1] for r in after_first)
    growth = 100.0 * (final - base) / base
    print(DISPLAY_LINE)
    print(f"model {Path(model).name} ({size_mb:.0f} MB), budget {settings.budget_mb} MB, "
          f"{rows[-1][3]} rounds of {args.tokens} tokens, errors: {errors or 'none'}")
    print(f"soak {rows[-1][0]:.1f} min: RSS growth after the first minute {growth:.1f} % "
          f"(mean {base:.0f} MB just after the first minute, {final:.0f} MB at the end, peak {peak:.0f} MB), "
          f"chart points max {max(r[2] for r in rows)}, errors {len(errors)}")


if __name__ == "__main__":
    main()
