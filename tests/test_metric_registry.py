"""Every figure declared once (engine/measure/metric_registry.py), and what derives from it.

The timeline CSV, the charts, the numbers panels, llama-bench rows and `--verify` read the
registry; an MoE run's --timeline and --csv carry the expert figures; sweep rows and `-o`
rows of an MoE say their expert_policy; dense and MoE rows share one CSV header (issue 19, 5);
`bench --verify` on an MoE model prints the expert rows beside their sources.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import subprocess
import sys

import pytest

from conftest import verdict_line
from shardscope.engine.measure.metric_registry import METRICS, chart_curves, markdown_columns, timeline_columns
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.output.csv_out import read_rows, run_columns

EXPERT_FIGURES = ("expert_hit_rate", "expert_mb_per_token", "spec_accuracy")


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("registry-moe") / "moe-100.gguf"
    write_synthetic_model(path, 100, moe=MoeSpec(16, 4, routing_skew=2.0), seed=3)
    return str(path)


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


MOE_FLAGS = ("--budget-mb", "60", "--expert-cache-mb", "34", "--n-ctx", "128")


def test_each_consumer_reads_the_registry():
    sample_fields = {f.name for f in dataclasses.fields(MetricsSample)}
    # What the timeline CSV's header is compared with is the file bench writes (read with the
    # stdlib in the next test); here, that every column is a sample's field.
    assert set(timeline_columns()) <= sample_fields
    assert set(EXPERT_FIGURES) <= set(timeline_columns())  # the chart's expert curves are exported too
    for m in METRICS:
        if m.summary or m.markdown:
            assert m.name in run_columns(), m.name
        if m.plot:
            assert m.name in sample_fields, m.name
    charted = {m.name for m in chart_curves().values()} | {m.name for m in chart_curves("experts").values()}
    assert set(EXPERT_FIGURES) <= charted
    assert set(markdown_columns()) <= set(run_columns())


def test_an_moe_bench_writes_expert_figures_to_its_timeline_and_csv(small_moe, tmp_path):
    rows_csv, timeline = tmp_path / "runs.csv", tmp_path / "timeline.csv"
    # Speculation needs room for a layer of guesses beside the experts: a larger cache.
    proc = _cli("bench", "--quiet", "--model", small_moe, "--budget-mb", "60", "--expert-cache-mb", "44",
                "--n-ctx", "128", "--tokens", "8", "--expert-speculation",
                "--csv", str(rows_csv), "--timeline", str(timeline))
    assert proc.returncode == 0, proc.stderr
    with open(timeline, newline="") as f:  # the file as a user's tool reads it, not through csv_out
        written = next(csv.reader(f))
    assert written == timeline_columns()  # the writer follows the registry, in its order
    # the figures the README and the charts name, written by hand
    assert {"t_s", "phase", "tok_s", "rss_mb", "resident_weights_mb", "ssd_mb_s", "read_mb_total", "cache_hit_rate",
            "on_time_rate", "n_tokens", "budget_mb", "expert_hit_rate", "expert_mb_per_token"} <= set(written)
    header, rows = read_rows(timeline)
    assert set(EXPERT_FIGURES) <= set(header)
    generating = [r for r in rows if r["phase"] == "generating"]
    for figure in EXPERT_FIGURES:
        assert any(r[figure] not in ("", "nan") for r in generating), figure
    header, rows = read_rows(rows_csv)
    assert header == run_columns()
    assert rows[0]["expert_policy"] == "auto"  # the default expert policy
    for figure in EXPERT_FIGURES:
        assert rows[0][figure] != "", figure


def test_dense_and_moe_rows_share_one_csv(small_moe, bundled_model, tmp_path):
    """One union header: a dense row leaves the expert columns blank; neither run is refused."""
    out = tmp_path / "both.csv"
    dense = _cli("bench", "--quiet", "--model", bundled_model, "--budget-mb", "4096", "--tokens", "3",
                 "--n-ctx", "128", "--csv", str(out))
    assert dense.returncode == 0, dense.stderr
    moe = _cli("bench", "--quiet", "--model", small_moe, *MOE_FLAGS, "--tokens", "3", "--csv", str(out))
    assert moe.returncode == 0, moe.stderr
    header, rows = read_rows(out)
    assert header == run_columns() and len(rows) == 2
    assert rows[0]["expert_policy"] == "" and rows[0]["expert_hit_rate"] == ""
    assert rows[1]["expert_policy"] == "auto" and rows[1]["expert_hit_rate"] != ""


def test_an_moe_sweep_names_each_rows_expert_policy(small_moe, tmp_path):
    """Issue 19, 5: `sweep --expert-policy lru,lfu,hot` rows could not be told apart outside --csv."""
    out = tmp_path / "sweep.csv"
    proc = _cli("sweep", "--model", small_moe, *MOE_FLAGS, "--tokens", "3", "--expert-policy", "lru,lfu,hot",
                "--csv", str(out), "-o", "jsonl")
    assert proc.returncode == 0, proc.stderr
    _, rows = read_rows(out)
    assert [r["expert_policy"] for r in rows] == ["lru", "lfu", "hot"]
    assert all(r["expert_hit_rate"] != "" for r in rows)
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["expert_policy"] for r in printed] == ["lru", "lfu", "hot"]
    assert all(isinstance(r["expert_hit_rate"], float) and not math.isnan(r["expert_hit_rate"]) for r in printed)


@pytest.mark.parametrize("fmt", ["csv", "md"])
def test_llama_bench_rows_of_an_moe_carry_its_expert_figures(small_moe, fmt):
    proc = _cli("bench", "--quiet", "--model", small_moe, *MOE_FLAGS, "--tokens", "3", "--expert-policy", "lfu",
                "-o", fmt)
    assert proc.returncode == 0, proc.stderr
    if fmt == "csv":
        row = next(csv.DictReader(io.StringIO(proc.stdout)))
        assert row["expert_policy"] == "lfu" and row["expert_hit_rate"] != ""
    else:
        header = next(line for line in proc.stdout.splitlines() if line.startswith("| model"))
        assert "expert_policy" in header and "expert_hit_rate" in header and "lfu" in proc.stdout


def test_bench_verify_on_an_moe_prints_expert_rows_beside_their_sources(small_moe):
    # Strict (issue 52): no --accept-unchecked. The timeline's 1 s window pair once waited for
    # 10 MB/s, which a small MoE never reads, and this test accepted any not-checked pair.
    proc = _cli("bench", "--verify", "--quiet", "--model", small_moe, *MOE_FLAGS, "--tokens", "25")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    expert_rows = {"expert_mb_per_token (CSV)": "/proc/<pid>/io read_bytes",
                   "expert residency (end of run)": "mincore",
                   "cache_hit_rate (CSV)": "1 − /proc/<pid>/io read_bytes"}
    for figure, source in expert_rows.items():
        line = next(x for x in lines if x.strip().startswith(figure))
        assert source in line and line.rstrip().endswith("]") and " agrees " in line, line
    pairs = [x for x in lines if x.startswith("  ") and x.rstrip().endswith("]")]  # one line per pair
    n = len(pairs)
    assert n >= 15 and verdict_line(proc.stdout) == f"verify     {n} of {n} checked, {n} agree", proc.stdout
    assert "NOT CHECKED" not in proc.stdout and "accepted (--accept-unchecked)" not in proc.stdout


def test_the_cli_says_which_figure_answers_how_much_came_from_memory(bundled_model):
    proc = _cli("bench", "--model", bundled_model, "--budget-mb", "4096", "--tokens", "3", "--n-ctx", "128")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("from RAM"))
    assert "came from memory without a disk read (cache hit rate)" in line


def test_the_window_names_the_figure_that_answers_how_much_came_from_memory():
    from shardscope.engine.measure.metric_registry import FROM_MEMORY, panel_rows

    labels = {name: label for name, label, _unit in panel_rows("summary")}
    assert "from RAM" in labels["cache_hit_rate"]
    assert "came from memory" in FROM_MEMORY and "cache hit rate" in FROM_MEMORY
