"""`shardscope bench/sweep -o csv|json|jsonl|md`: llama-bench's schema, types and loaders.

The expectations below are written out from llama.cpp's own sources, not imported from
shardscope, so a drift on either side fails here:

* LLAMA_BENCH_FIELDS / *_TYPES: tools/llama-bench/llama-bench.cpp, ``test::get_fields()``
  and ``test::get_field_type()``, of the llama.cpp vendored by llama-cpp-python 0.3.36
  (ggml-org/llama.cpp@0c1e57098, "update llama.cpp to ..." in that release's CHANGELOG).
* COMPARE_*: scripts/compare-llama-bench.py of the same commit (``LLAMA_BENCH_DB_FIELDS``,
  ``LLAMA_BENCH_DB_TYPES``, ``LLAMA_BENCH_KEY_PROPERTIES``, the ``check_keys`` of
  ``LlamaBenchData``), and the older key list that still names ``use_mmap``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

LLAMA_BENCH_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends",
    "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode",
    "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode",
    "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx",
    "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
]
INT_TYPES = {"build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params",
             "n_gpu_layers", "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload",
             "n_cpu_moe", "fit_target", "fit_min_ctx", "flash_attn"}
BOOL_TYPES = {"no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack"}
FLOAT_TYPES = {"avg_ts", "stddev_ts"}

COMPARE_DB = dict(zip(
    ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
     "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
     "cpu_mask", "cpu_strict", "poll", "type_k", "type_v", "n_gpu_layers",
     "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "tensor_split", "tensor_buft_overrides",
     "load_mode", "embeddings", "no_op_offload", "n_prompt", "n_gen", "n_depth",
     "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "n_cpu_moe",
     "fit_target", "fit_min_ctx"],
    ["TEXT", "INTEGER", "TEXT", "TEXT", "TEXT", "TEXT",
     "TEXT", "INTEGER", "INTEGER", "INTEGER", "INTEGER", "INTEGER",
     "TEXT", "INTEGER", "INTEGER", "TEXT", "TEXT", "INTEGER",
     "TEXT", "INTEGER", "INTEGER", "INTEGER", "TEXT", "TEXT",
     "TEXT", "INTEGER", "INTEGER", "INTEGER", "INTEGER", "INTEGER",
     "TEXT", "INTEGER", "INTEGER", "REAL", "REAL", "INTEGER",
     "INTEGER", "INTEGER"]))
COMPARE_KEYS = [
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "n_cpu_moe", "tensor_buft_overrides", "model_filename",
    "model_type", "n_batch", "n_ubatch", "embeddings", "cpu_mask", "cpu_strict", "poll", "n_threads", "type_k",
    "type_v", "load_mode", "no_kv_offload", "split_mode", "main_gpu", "tensor_split", "flash_attn", "n_prompt",
    "n_gen", "n_depth", "fit_target", "fit_min_ctx"]
# compare-llama-bench.py before load_mode replaced use_mmap (its LLAMA_BENCH_KEY_PROPERTIES).
COMPARE_KEYS_USE_MMAP = [
    "cpu_info", "gpu_info", "backends", "n_gpu_layers", "tensor_buft_overrides", "model_filename", "model_type",
    "n_batch", "n_ubatch", "embeddings", "cpu_mask", "cpu_strict", "poll", "n_threads", "type_k", "type_v",
    "use_mmap", "no_kv_offload", "split_mode", "main_gpu", "tensor_split", "flash_attn", "n_prompt", "n_gen",
    "n_depth"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


@pytest.fixture(scope="module")
def jsonl_rows(bundled_model):
    """Two repetitions of a streaming run (budget below the model), as `-o jsonl` prints them."""
    proc = _cli("bench", "--model", bundled_model, "--budget-mb", "200", "--shard-mb", "8", "--tokens", "4",
                "--threads", "1", "-r", "2", "-o", "jsonl", "--quiet")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout  # one row per grid point; nothing else on stdout
    return [json.loads(line) for line in lines]


def test_jsonl_rows_follow_llama_bench_schema(jsonl_rows):
    from shardscope.engine.output.csv_out import run_columns

    row = jsonl_rows[0]
    keys = list(row)
    assert keys[:len(LLAMA_BENCH_FIELDS)] == LLAMA_BENCH_FIELDS
    rest = keys[len(LLAMA_BENCH_FIELDS):]
    assert rest[:3] == ["use_mmap", "samples_ns", "samples_ts"]
    for name in LLAMA_BENCH_FIELDS:
        value = row[name]
        if name in INT_TYPES:
            assert isinstance(value, int) and not isinstance(value, bool), (name, value)
        elif name in BOOL_TYPES:
            assert isinstance(value, bool), (name, value)
        elif name in FLOAT_TYPES:
            assert isinstance(value, float), (name, value)
        else:
            assert isinstance(value, str), (name, value)
    # Units and meanings as llama-bench has them.
    assert row["model_size"] > 100 * 2**20 and row["model_n_params"] > 200e6  # bytes, parameters
    assert row["n_prompt"] == 0 and row["n_gen"] == 3 and row["n_depth"] > 0  # tg3 after the prompt
    assert len(row["samples_ns"]) == 2 and all(isinstance(x, int) for x in row["samples_ns"])
    assert row["avg_ns"] == pytest.approx(sum(row["samples_ns"]) / 2, abs=1)
    ts = [1e9 * row["n_gen"] / ns for ns in row["samples_ns"]]
    assert row["samples_ts"] == pytest.approx(ts)
    assert row["avg_ts"] == pytest.approx(sum(ts) / 2, rel=1e-6)
    assert row["n_threads"] == 1 and row["backends"] == "CPU" and row["cpu_info"]
    assert row["test_time"].endswith("Z") and "T" in row["test_time"]
    assert len(row["build_commit"]) >= 7 and "0c1e57098".startswith(row["build_commit"])  # the vendored llama.cpp
    assert row["load_mode"] == "mmap" and row["use_mmap"] is True
    # shardscope's streaming fields follow, taken from the run summary's own columns.
    streaming = rest[3:]
    assert streaming and set(streaming) <= set(run_columns())
    assert "model_size_mb" not in streaming and "budget_mb" in streaming and "read_mb_per_token" in streaming
    assert row["budget_mb"] == 200 and row["read_mb_per_token"] > 0  # it streamed


def test_rows_load_with_numeric_types(jsonl_rows):
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        frame = pd.read_json(io.StringIO("".join(json.dumps(r) + "\n" for r in jsonl_rows)), lines=True)
        for name in INT_TYPES | FLOAT_TYPES:
            assert pd.api.types.is_numeric_dtype(frame[name]), name
        return
    # No pandas in this venv: the same check with the standard library.
    for row in jsonl_rows:
        for name in INT_TYPES | FLOAT_TYPES:
            assert isinstance(row[name], (int, float)) and not isinstance(row[name], bool), name


def test_csv_round_trip(jsonl_rows, bundled_model):
    from shardscope.engine.output.llama_bench_format import columns, render

    proc = _cli("bench", "--model", bundled_model, "--tokens", "3", "-o", "csv", "--quiet")
    assert proc.returncode == 0, proc.stderr
    reader = csv.DictReader(io.StringIO(proc.stdout))
    cli_rows = list(reader)
    assert len(cli_rows) == 1 and reader.fieldnames == columns("csv")
    assert reader.fieldnames[:len(LLAMA_BENCH_FIELDS)] == LLAMA_BENCH_FIELDS
    assert all(f'"{name}"' in proc.stdout.splitlines()[0] for name in LLAMA_BENCH_FIELDS)  # quoted, like llama-bench
    # Rows printed as CSV and read back give the JSONL values (numbers within %f / %.6g precision).
    text = render([_row_from_json(r) for r in jsonl_rows], "csv")
    back = list(csv.DictReader(io.StringIO(text)))[0]
    source = jsonl_rows[0]
    for name, value in back.items():
        original = source[name]
        if name in BOOL_TYPES or name == "use_mmap":
            assert value == ("1" if original else "0"), name
        elif name in INT_TYPES:
            assert int(value) == original, name
        elif isinstance(original, float):
            assert (value == "" and math.isnan(original)) or float(value) == pytest.approx(original, rel=1e-5), name
        elif original is None:
            assert value == "", name
        elif isinstance(original, bool):
            assert value == ("1" if original else "0"), name
        else:
            assert value == str(original), name


def _row_from_json(row: dict) -> dict:
    return {k: (math.nan if v is None else v) for k, v in row.items()}


def _load_like_compare_llama_bench(rows: list[dict], keys: list[str], db: dict[str, str]) -> sqlite3.Cursor:
    """compare-llama-bench.py's JSONL/CSV path: unknown keys dropped, required keys checked,
    rows inserted into its typed llama_bench table."""
    cursor = sqlite3.connect(":memory:").cursor()
    cursor.execute(f"CREATE TABLE llama_bench({', '.join(f'{k} {t}' for k, t in db.items())});")
    required = set(keys) | {"build_commit", "test_time", "avg_ts"}
    for i, row in enumerate(rows):
        missing = required - set(row)
        assert not missing, f"row {i + 1} lacks {sorted(missing)}"
        kept = {k: v for k, v in row.items() if k in db}
        cursor.execute(f"INSERT INTO llama_bench({', '.join(kept)}) VALUES({', '.join('?' * len(kept))});",
                       tuple(kept.values()))
    return cursor


def test_rows_load_with_compare_llama_bench_expectations(jsonl_rows, bundled_model):
    cursor = _load_like_compare_llama_bench(jsonl_rows, COMPARE_KEYS, COMPARE_DB)
    build = jsonl_rows[0]["build_commit"]
    # The query it runs to compare a build with itself: every key property must join.
    on = " AND ".join(f"tb.{p} = tc.{p}" for p in COMPARE_KEYS)
    rows = cursor.execute(
        f"SELECT tb.n_prompt, tb.n_gen, tb.n_depth, AVG(tb.avg_ts), AVG(tc.avg_ts) FROM llama_bench tb "
        f"JOIN llama_bench tc ON {on} AND tb.build_commit = '{build}' AND tc.build_commit = '{build}' "
        f"GROUP BY tb.n_gen, tb.n_prompt, tb.n_depth;").fetchall()
    assert len(rows) == 1 and rows[0][3] == pytest.approx(jsonl_rows[0]["avg_ts"])
    # The older script keyed rows on use_mmap instead of load_mode.
    legacy_db = {("use_mmap" if k == "load_mode" else k): t for k, t in COMPARE_DB.items()}
    legacy_db["use_mmap"] = "INTEGER"
    _load_like_compare_llama_bench(jsonl_rows, COMPARE_KEYS_USE_MMAP, legacy_db)


def test_json_is_an_array_of_the_same_rows(jsonl_rows):
    from shardscope.engine.output.llama_bench_format import render

    rows = [_row_from_json(r) for r in jsonl_rows]
    parsed = json.loads(render(rows, "json"))
    assert isinstance(parsed, list) and list(parsed[0]) == list(jsonl_rows[0])


# ------------------------------------------------------------ pure parts
def _summary(**changes):
    from shardscope.engine.stream.streaming_run import RunSummary

    base = dict(model_filename="m.gguf", model_size_mb=10.0, n_layers=2, n_shards=2, n_threads=2, n_gpu_layers=0,
                n_gpu_layers_requested=0, shard_mb=8, prefetch_depth=1, budget_mb=64.0, policy="pinned",
                emulated_ssd_mb_s=0.0, n_prompt=9, n_gen=8, ttft_ms=5.0, avg_ts=10.0, stddev_ts=0.1,
                peak_rss_mb=1.0, resident_weights_mb=1.0, read_mb_per_token=2.0, streamed_mb_per_token=2.0,
                ssd_mb_s=20.0, cache_hit_rate=0.5, on_time_rate=1.0, cache_hits=1, cache_misses=1, stalls=0,
                wait_ms_per_token=1.0,
                llama_eval_ms_per_token=1.0, globals_mb=1.0, pinned_mb=1.0, load_mechanism="x", evict_mechanism="y")
    known = set(RunSummary.__dataclass_fields__)
    base = {k: v for k, v in base.items() if k in known}
    base.update(changes)
    return RunSummary(**base)


FACTS = {"build_commit": "abc1234", "build_number": 0, "cpu_info": "cpu", "gpu_info": "", "backends": "CPU",
         "model_type": "llama 1M Q4_K - Medium", "model_size": 10 * 2**20, "model_n_params": 5_000_000,
         "n_batch": 256, "n_ubatch": 256, "cpu_mask": "0x0", "cpu_strict": False, "poll": 50, "type_k": "f16",
         "type_v": "f16", "n_cpu_moe": 0, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
         "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
         "load_mode": "mmap", "lazy_mode": "auto", "embeddings": False, "no_op_offload": 0, "no_host": False,
         "repack": False, "fit_target": 0, "fit_min_ctx": 0}


def test_repetitions_use_llama_bench_statistics():
    from shardscope.engine.output.llama_bench_format import bench_row, test_label

    row = bench_row([_summary(avg_ts=10.0, read_mb_per_token=2.0), _summary(avg_ts=20.0, read_mb_per_token=4.0)],
                    FACTS, test_time="2026-11-30T00:00:00Z")
    assert row["samples_ns"] == [700_000_000, 350_000_000]  # 7 timed tokens at 10 and 20 tok/s
    assert row["avg_ns"] == 525_000_000
    assert row["stddev_ns"] == round(math.sqrt(2) * 175_000_000)  # sample stdev (n - 1), as llama-bench
    assert row["avg_ts"] == pytest.approx(15.0) and row["stddev_ts"] == pytest.approx(math.sqrt(50))
    assert row["read_mb_per_token"] == pytest.approx(3.0)  # streaming figures: mean of the repetitions
    assert test_label(row) == "tg7 @ d9"


def test_markdown_looks_like_llama_bench():
    from shardscope.engine.output.llama_bench_format import bench_row, render

    text = render([bench_row([_summary()], FACTS, test_time="t")], "md")
    lines = text.splitlines()
    assert lines[0].startswith("| model | size | params | backend | threads |") and "| test | t/s |" in lines[0]
    # llama.cpp's "1M" is its guess from the layer count; 5,000,000 parameters are > 2x off it, so the
    # table names the count instead (a 1 B synth was labelled "7B" the same way)
    assert "| llama 5.00M Q4_K - Medium | 10.00 MiB | 5.00 M | CPU | 2 |" in lines[2]
    # one repetition: no "± 0.00" (issue 28: it read as "every token the same"); two show their spread
    assert "| tg7 @ d9 | 10.00 |" in lines[2]
    two = render([bench_row([_summary(), _summary()], FACTS, test_time="t")], "md").splitlines()
    assert "| tg7 @ d9 | 10.00 ± 0.00 |" in two[2]
    assert lines[-1] == "build: abc1234 (0)"


def test_nothing_timed_is_refused_in_one_line():
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.output.llama_bench_format import bench_row, render

    with pytest.raises(ShardscopeError, match="at least 2 tokens"):
        bench_row([_summary(n_gen=1)], FACTS, test_time="t")
    with pytest.raises(ShardscopeError, match="-o: must be one of"):
        render([], "sql")


def test_sweep_prints_one_row_per_combination_with_its_passes_as_samples(bundled_model):
    proc = _cli("sweep", "--model", bundled_model, "--shard-mb", "4,8", "--budget-mb", "4096", "--tokens", "3",
                "-r", "2", "-o", "jsonl", "--quiet")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]  # nothing else on stdout
    assert [r["shard_mb"] for r in rows] == [4, 8]
    assert all(len(r["samples_ns"]) == 2 and r["n_gen"] == 2 for r in rows)
    assert "sweep: 4 rows written" in proc.stderr  # the human lines moved to stderr


def test_gpu_layers_with_streamed_experts_report_the_override_and_no_op_offload():
    """A row of an expert-streaming run with GPU layers says what llama.cpp was told (the routed
    experts pinned to the CPU buffer type, op offload off), as llama-bench prints -ot and -nopo;
    a CPU build (n_gpu_layers 0 in effect) or a layer-streaming run keeps the defaults."""
    from shardscope.engine.experts.expert_run import ExpertRunSummary
    from shardscope.engine.output.llama_bench_format import bench_row
    from shardscope.engine.stream.streaming_run import RunSummary

    fields = {k: getattr(_summary(), k) for k in RunSummary.__dataclass_fields__}
    split = ExpertRunSummary(**{**fields, "n_gpu_layers": 25, "n_gpu_layers_requested": 99}, expert_policy="auto")
    row = bench_row([split], FACTS, test_time="t")
    assert row["tensor_buft_overrides"] == r"\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"
    assert row["no_op_offload"] == 1 and row["n_gpu_layers"] == 25
    cpu_build = ExpertRunSummary(**{**fields, "n_gpu_layers": 0, "n_gpu_layers_requested": 99}, expert_policy="auto")
    assert bench_row([cpu_build], FACTS, test_time="t")["tensor_buft_overrides"] == "none"
    layers = _summary(n_gpu_layers=8, n_gpu_layers_requested=8)
    assert bench_row([layers], FACTS, test_time="t")["no_op_offload"] == 0
