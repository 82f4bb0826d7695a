"""Sweeps: knob lists and ranges, every combination one cold run and one CSV row, skips, Ctrl+C."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_ranges import parse_knob
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.output.csv_out import run_columns
from shardscope.engine.search.sweep import expand_grid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ knob lists
@pytest.mark.parametrize("text, key, expected", [
    ("0-4", "prefetch_depth", [0, 1, 2, 3, 4]),
    ("1-8+2", "threads", [1, 3, 5, 7]),
    ("1-16*2", "threads", [1, 2, 4, 8, 16]),
    ("16,64", "shard_mb", [16, 64]),
    ("16,64,256", "shard_mb", [16, 64, 256]),
    ("0-2,8,1", "prefetch_depth", [0, 1, 2, 8]),  # mixed items, order kept, duplicate dropped
    ("2", "threads", [2]),
    ("0,150-450+150", "ssd_mb_s", [0, 150, 300, 450]),
    ("1.5,2.5", "shard_mb", [1.5, 2.5]),
    (" pinned , lru ", "policy", ["pinned", "lru"]),
])
def test_parse_knob(text, key, expected):
    assert parse_knob("--flag", text, key) == expected


@pytest.mark.parametrize("text, key, needle", [
    ("", "threads", "empty"),
    ("1,,2", "threads", "empty item"),
    ("4-1", "prefetch_depth", "ends below its start"),
    ("1-8+0", "threads", "step above 0"),
    ("1-8*1", "threads", "factor above 1"),
    ("0-8*2", "prefetch_depth", "cannot multiply up from 0"),
    ("1.5", "threads", "whole numbers"),
    ("abc", "shard_mb", "cannot read"),
    ("-3", "prefetch_depth", "cannot read"),
    ("0", "threads", "out of range"),
    ("1-5000", "threads", "more than"),
    ("fifo", "policy", "unknown value"),
])
def test_parse_knob_refuses_bad_input_naming_the_flag(text, key, needle):
    flag = "--" + key.replace("_", "-")
    with pytest.raises(ShardscopeError) as info:
        parse_knob(flag, text, key)
    message = str(info.value)
    assert message.startswith(flag + ":"), message
    assert needle in message
    assert "\n" not in message


def test_expand_grid_is_the_cartesian_product():
    base = RunSettings(budget_mb=1000)
    combos = expand_grid(base, {"shard_mb": [16, 64], "prefetch_depth": [0, 1, 2], "policy": ["pinned", "lru"]})
    assert len(combos) == 12
    assert len(set(combos)) == 12
    assert all(c.budget_mb == 1000 for c in combos)  # knobs not in the grid keep the base value
    assert combos[0].policy == "pinned" and combos[1].policy == "lru"  # the last knob varies fastest
    with pytest.raises(ShardscopeError, match="unknown knob"):
        expand_grid(base, {"prompt": ["x"]})


# ------------------------------------------------------------------ real sweeps
def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args], capture_output=True, text=True,
                          timeout=240, cwd=REPO, **kw)


def _read_csv(path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_sweep_writes_one_row_per_run_and_skips_refused_combinations(bundled_model, tmp_path):
    out = tmp_path / "sweep.csv"
    # 2 shard sizes x 3 depths x 2 budgets: the 6 combinations at 50 MB are below the
    # bundled model's minimum (its globals alone are ~175 MB) and are skipped.
    proc = _cli("sweep", "--model", bundled_model, "--shard-mb", "4,16", "--prefetch-depth", "0-2",
                "--budget-mb", "4096,50", "--tokens", "3", "--csv", str(out), "--device", "iphone-16-pro")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    header, rows = _read_csv(out)
    assert header == run_columns()
    assert len(rows) == 6
    combos = {(float(r["shard_mb"]), int(r["prefetch_depth"])) for r in rows}
    assert combos == {(s, d) for s in (4.0, 16.0) for d in (0, 1, 2)}
    for r in rows:
        assert float(r["budget_mb"]) == 4096
        assert int(r["n_gen"]) == 3
        assert float(r["avg_ts"]) > 0
        assert r["device"] == "iphone-16-pro"
        assert float(r["projected_ts"]) > 0 and r["projected_bound"] in ("ssd", "dram", "compute")
        assert r["model_filename"] == os.path.basename(bundled_model)
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 6, proc.stderr
    assert all("budget 50 MiB" in line and "minimum" in line for line in skipped)
    assert "6 rows written" in proc.stdout


def test_sweep_refuses_bad_knob_list_in_one_line(tmp_path):
    proc = _cli("sweep", "--prefetch-depth", "4-1", "--csv", str(tmp_path / "x.csv"))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--prefetch-depth" in lines[0], proc.stderr
    assert not (tmp_path / "x.csv").exists()


def test_ctrl_c_keeps_the_rows_written_and_exits_130(bundled_model, tmp_path):
    out = tmp_path / "interrupted.csv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardscope.engine.cli.cli", "sweep", "--model", bundled_model, "--shard-mb", "4",
         "--prefetch-depth", "0-9", "--budget-mb", "4096", "--tokens", "12", "--min-rounds", "2", "--max-rounds", "2",
         "--csv", str(out), "--quiet"],  # a cold round and 2 warm ones per combination
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and len(_read_csv(out)[1]) >= 1:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    header, rows = _read_csv(out)
    assert header == run_columns()
    assert 1 <= len(rows) < 10
    assert all(float(r["avg_ts"]) > 0 and r["stopped"] == "0" for r in rows)
    assert f"interrupted after {len(rows)} of 10 runs" in stderr
    assert f"{len(rows)} rows written" in stderr


def test_iter_sweep_stops_when_asked(bundled_model):
    from shardscope.engine.search.sweep import iter_sweep

    base = RunSettings(model_path=bundled_model, budget_mb=4096, shard_mb=16, n_gen=3, n_ctx=128)
    results = []
    for result in iter_sweep(base, {"prefetch_depth": [0, 1, 2, 3]}, should_stop=lambda: len(results) >= 1):
        results.append(result)
    assert len(results) == 1
    assert results[0].ok and results[0].summary.avg_ts > 0 and not math.isnan(results[0].summary.avg_ts)
