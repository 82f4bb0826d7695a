"""The live chart's append cost (issue 37: the goal tests/test_widgets.py held as "append < 50 µs").

An append only fills ring buffers (drawing is the refresh timer's), so 20,000 appends of a
four-curve sample are timed with no event loop running; prints µs per append and its ratio to
the 50 µs goal (at 10 Hz sampling that is 0.05 % of the GUI thread).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

GOAL_US = 50.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from PySide6.QtWidgets import QApplication

    from shardscope.widgets import LiveChart

    app = QApplication.instance() or QApplication([])
    per = []
    for _ in range(args.repeats):
        chart = LiveChart(capacity=6000, refresh_hz=50.0)
        chart.add_plot("mem", "Memory", "MB")
        chart.add_curve("mem", "rss", "RSS", "#1f77b4", fill_to_zero=True)
        chart.add_curve("mem", "resident", "Resident shards", "#2ca02c")
        chart.add_plot("io", "SSD", "MB")
        chart.add_curve("io", "read", "read", "#d62728")
        chart.add_plot("speed", "Speed", "tok/s")
        chart.add_curve("speed", "tps", "tok/s", "#9467bd")
        sample = {"rss": 1.0, "resident": 2.0, "read": 3.0, "tps": 4.0}
        t0 = time.perf_counter()
        for i in range(args.appends):
            chart.append(i * 0.1, sample)
        per.append((time.perf_counter() - t0) / args.appends * 1e6)
        chart.deleteLater()
    app.processEvents()
    us = statistics.median(per)
    print(f"append         {us:.2f} µs (median of {args.repeats} × {args.appends} appends, 4 curves)")
    print(f"append ÷ goal  {us / GOAL_US:.3f} (goal ≤ 1: under {GOAL_US:g} µs) {'met' if us <= GOAL_US else 'NOT MET'}")


if __name__ == "__main__":
    main()
