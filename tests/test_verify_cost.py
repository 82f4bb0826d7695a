"""--verify says what its outside watch cost the run (issue 48 item 9): the verified run's tok/s
against a plain run of the same settings, measured."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import blank_summary
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.verify_cost import COST_LIMIT, WatchCost, cost_line, watch_cost

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_cost_line_says_how_much_slower_the_verified_run_was():
    slowed = WatchCost(verified_ts=12.0, plain_ts=36.0)
    assert round(slowed.slower, 3) == 0.667 and not slowed.within
    line = cost_line(slowed)
    assert "67 % slower" in line and "a run the watch slowed" in line and "12 tok/s verified" in line
    cheap = WatchCost(verified_ts=34.0, plain_ts=36.0)
    assert cheap.within and "within the 10 %" in cost_line(cheap)
    assert "cost nothing measurable" in cost_line(WatchCost(37.0, 36.0))
    assert COST_LIMIT == 0.10
    seen = []
    cost = watch_cost(RunSettings(budget_mb=300), blank_summary(avg_ts=10.0),
                      run_plain=lambda s: seen.append(s) or blank_summary(avg_ts=20.0))
    assert seen == [RunSettings(budget_mb=300)] and cost.plain_ts == 20.0  # the same settings, run plain


def test_bench_verify_prints_the_measured_cost(synthetic_model):
    proc = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", synthetic_model,
                           "--budget-mb", "200", "--tokens", "6", "--verify", "--accept-unchecked", "--quiet"],
                          capture_output=True, text=True, timeout=400, cwd=REPO)
    line = [x for x in (proc.stdout + proc.stderr).splitlines() if "watch cost:" in x]
    assert len(line) == 1, proc.stdout + proc.stderr
    assert "tok/s verified" in line[0] and "plain run of the same settings" in line[0]
    assert "% slower" in line[0] or "cost nothing measurable" in line[0]
