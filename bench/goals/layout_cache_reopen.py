"""Reopening a model's layout from the cache vs parsing the GGUF header (issue 37: the speed goal
that tests/test_layout_plan.py held as "reopen < 1 s" lives here).

Prints the median time of each over ``--repeats`` and their ratio; the goal is that a cached
reopen costs a small share of a parse and stays well under a second (the window reopens the
layout each time a model is chosen).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.lib.bench_models import bundled_model
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.layout_cache import load_layout

GOAL_S = 1.0  # the bound the test held


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None, help="GGUF file (default: the bundled gemma-3-270m)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    model = args.model or bundled_model()
    load_layout(model)  # fill the cache
    parse = _median_s(lambda: read_layout(model), args.repeats)
    cached = _median_s(lambda: load_layout(model), args.repeats)
    print(f"model          {Path(model).name}")
    print(f"parse header   {parse * 1e3:.2f} ms (median of {args.repeats})")
    print(f"cached reopen  {cached * 1e3:.2f} ms")
    print(f"cached ÷ parse {cached / parse:.3f}")
    print(f"cached ÷ goal  {cached / GOAL_S:.4f} (goal ≤ 1: reopen under {GOAL_S:g} s) "
          f"{'met' if cached <= GOAL_S else 'NOT MET'}")


if __name__ == "__main__":
    main()
