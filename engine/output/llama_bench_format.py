"""Run rows in llama-bench's output formats (``-o csv|json|jsonl|md``), so the tools
people already point at llama-bench output (llama.cpp's scripts/compare-llama-bench.py,
pandas notebooks, dashboards) read shardscope's rows too.

The field list, order, types and value formats are llama-bench's: tools/llama-bench/
llama-bench.cpp (``test::get_fields``, ``get_field_type``, ``get_values`` and the
printers) of the llama.cpp inside llama-cpp-python 0.3.36 (ggml-org/llama.cpp@0c1e57098).
After them come ``use_mmap`` (the name llama-bench used before ``load_mode``; older
compare-llama-bench.py keys rows on it), then, in JSON/JSONL only, ``samples_ns`` and
``samples_ts`` like llama-bench, then shardscope's streaming fields, derived from
:meth:`RunSummary.columns` so a column added there shows up here without a second list.

What one row means, in llama-bench's terms: one grid point's text-generation test, a
``tg`` row (``n_prompt`` 0) at depth ``n_depth`` = the prompt's tokens, timing the
decoded tokens after the first (the first comes from the prompt pass, which is
shardscope's warm-up); each repetition is one sample. A repetition's ``samples_ns`` is
its decode time, recovered from the summary as timed tokens / ``avg_ts`` (``avg_ts`` is
kept to 3 decimals, so a sample is exact to 0.0005 tok/s).

Rows are built from :class:`RunSummary` objects and the llama.cpp facts of
:mod:`engine.stream.build_info`; the printers only format.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from typing import Iterable, Sequence

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knobs import EXPERT_KNOBS, LAYER_KNOBS
from shardscope.engine.measure.metric_registry import markdown_columns
from shardscope.engine.stream.gpu_split import EXPERT_TENSOR_PATTERN

FORMATS = ("md", "csv", "json", "jsonl")

# test::get_fields() of llama-bench.cpp (llama.cpp 0c1e57098), in its order.
LLAMA_BENCH_FIELDS = (
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends",
    "model_filename", "model_type", "model_size", "model_n_params", "n_batch",
    "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode",
    "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
    "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings",
    "no_op_offload", "no_host", "repack", "fit_target", "fit_min_ctx",
    "n_prompt", "n_gen", "n_depth",
    "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
)
# test::get_field_type(): everything not listed is a string.
INT_FIELDS = frozenset({
    "build_number", "n_batch", "n_ubatch", "n_threads", "poll", "model_size", "model_n_params",
    "n_gpu_layers", "main_gpu", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns", "no_op_offload",
    "n_cpu_moe", "fit_target", "fit_min_ctx", "flash_attn",
})
BOOL_FIELDS = frozenset({"no_kv_offload", "cpu_strict", "embeddings", "no_host", "repack", "use_mmap"})
FLOAT_FIELDS = frozenset({"avg_ts", "stddev_ts"})
LEGACY_FIELDS = ("use_mmap",)
SAMPLE_FIELDS = ("samples_ns", "samples_ts")

# RunSummary columns that a llama-bench field replaces, with llama-bench's unit.
_REPLACED = {"model_size_mb": "model_size"}
# Markdown shows llama-bench's own columns, then these streaming ones where the rows have them.
# (Columns no row has a value in are left out: a dense table shows no expert columns.)
_MD_STREAMING = ("budget_mb", *LAYER_KNOBS, *EXPERT_KNOBS, *markdown_columns())


def field_type(name: str) -> str:
    """"int", "bool", "float" or "str", as llama-bench types the field."""
    if name in INT_FIELDS:
        return "int"
    if name in BOOL_FIELDS:
        return "bool"
    if name in FLOAT_FIELDS:
        return "float"
    return "str"


def streaming_columns() -> list[str]:
    """shardscope's own columns: the run summary's, less those a llama-bench field carries."""
    from shardscope.engine.output.csv_out import run_columns

    shared = set(LLAMA_BENCH_FIELDS)
    return [c for c in run_columns() if c not in shared and c not in _REPLACED]


def columns(fmt: str) -> list[str]:
    """Every field a row carries in this format, in order (CSV has no sample arrays, like llama-bench)."""
    samples = SAMPLE_FIELDS if fmt in ("json", "jsonl") else ()
    return [*LLAMA_BENCH_FIELDS, *LEGACY_FIELDS, *samples, *streaming_columns()]


# ---------------------------------------------------------------- rows
def _llama_stdev(values: Sequence[float]) -> float:
    """llama-bench's stdev: the sample standard deviation (n − 1), 0 for one value."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _mean_of(summaries: Sequence, key: str):
    values = [getattr(s, key, None) for s in summaries]  # None: a column of the other run kind
    last = values[-1]
    if isinstance(last, float) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        finite = [float(v) for v in values if not math.isnan(v)]
        return statistics.fmean(finite) if finite else math.nan
    return last


def bench_row(repetitions: Sequence, facts: dict, *, test_time: str) -> dict:
    """One llama-bench row from the summaries of one grid point's repetitions.

    ``facts`` holds the descriptive fields llama.cpp reports (engine.stream.build_info.llama_facts).
    Streaming fields are the mean over repetitions for real numbers, the last
    repetition's value otherwise (counts, names, mechanisms).
    """
    if not repetitions:
        raise ShardscopeError("llama-bench row: no finished repetition to report")
    last = repetitions[-1]
    n_timed = int(last.n_gen) - 1
    if n_timed < 1 or any(s.avg_ts <= 0 for s in repetitions):
        raise ShardscopeError("llama-bench row: no decoded tokens to time (generate at least 2 tokens)")
    samples_ns = [round(1e9 * (int(s.n_gen) - 1) / s.avg_ts) for s in repetitions]
    samples_ts = [1e9 * n_timed / ns for ns in samples_ns]
    row = {f: facts[f] for f in LLAMA_BENCH_FIELDS if f in facts}
    row.update(
        model_filename=last.model_filename,
        n_threads=int(last.n_threads),
        n_gpu_layers=int(last.n_gpu_layers),
        n_prompt=0,
        n_gen=n_timed,
        n_depth=int(last.n_prompt),
        test_time=test_time,
        avg_ns=round(statistics.fmean(samples_ns)),
        stddev_ns=round(_llama_stdev(samples_ns)),
        avg_ts=statistics.fmean(samples_ts),
        stddev_ts=_llama_stdev(samples_ts),
        use_mmap=facts.get("load_mode") in ("mmap", "mmap+mlock"),
        samples_ns=samples_ns,
        samples_ts=samples_ts,
    )
    if int(last.n_gpu_layers) != 0 and getattr(last, "expert_policy", ""):
        # Layers on the GPU while the experts stream: the run kept the routed experts in the CPU
        # buffer and turned op offload off (engine/stream/gpu_split.py), as llama-bench would print
        # for `-ot <pattern>=CPU -nopo 1`.
        row.update(tensor_buft_overrides=f"{EXPERT_TENSOR_PATTERN}=CPU", no_op_offload=1)
    missing = [f for f in LLAMA_BENCH_FIELDS if f not in row]
    if missing:
        raise ShardscopeError(f"llama-bench row: no value for {', '.join(missing)}")
    for key in streaming_columns():
        row[key] = _mean_of(repetitions, key)
    return row


# ------------------------------------------------------------ printers
def _llama_text(name: str, value) -> str:
    """A llama-bench field as its printers write it (std::to_string: bools 0/1, floats %f)."""
    kind = field_type(name)
    if kind == "bool":
        return "1" if value else "0"
    if kind == "int":
        return str(int(value))
    if kind == "float":
        return f"{float(value):f}"
    return str(value)


def _json_value(name: str, value):
    if name in SAMPLE_FIELDS:
        return list(value)
    if name in LLAMA_BENCH_FIELDS or name in LEGACY_FIELDS:
        kind = field_type(name)
        if kind == "bool":
            return bool(value)
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(_llama_text(name, value))
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a missing measurement reads as null
    return value


def _csv_value(name: str, value) -> str:
    if name in LLAMA_BENCH_FIELDS or name in LEGACY_FIELDS:
        return _llama_text(name, value)
    from shardscope.engine.output.csv_out import format_cell  # the run CSV's own formatting, NaN as empty

    return format_cell(value)


def _render_csv(rows: Sequence[dict]) -> str:
    cols = columns("csv")
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")  # llama-bench quotes every value
    writer.writerow(cols)
    for row in rows:
        writer.writerow([_csv_value(c, row[c]) for c in cols])
    return out.getvalue()


def _json_object(row: dict, cols: Sequence[str]) -> dict:
    return {c: _json_value(c, row[c]) for c in cols}


def _render_jsonl(rows: Sequence[dict]) -> str:
    cols = columns("jsonl")
    return "".join(json.dumps(_json_object(r, cols), ensure_ascii=False, allow_nan=False) + "\n" for r in rows)


def _render_json(rows: Sequence[dict]) -> str:
    cols = columns("json")
    return json.dumps([_json_object(r, cols) for r in rows], indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _size_text(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.2f} MiB" if n_bytes < 2**30 else f"{n_bytes / 2**30:.2f} GiB"


def _params_text(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"


def test_label(row: dict) -> str:
    """llama-bench's "test" column: pp512, tg128, pp512+tg128, with " @ d512" for depth."""
    n_prompt, n_gen, depth = int(row["n_prompt"]), int(row["n_gen"]), int(row["n_depth"])
    if n_prompt > 0 and n_gen == 0:
        name = f"pp{n_prompt}"
    elif n_gen > 0 and n_prompt == 0:
        name = f"tg{n_gen}"
    else:
        name = f"pp{n_prompt}+tg{n_gen}"
    return name + (f" @ d{depth}" if depth > 0 else "")


def _md_model(row: dict) -> str:
    """llama.cpp's model type with its "?B" (a size class it does not know, as for every synthetic
    model) replaced by the parameter count; the CSV/JSON rows keep llama.cpp's text verbatim,
    which is what calibrate matches device rows on."""
    n = int(row["model_n_params"])
    actual = _params_text(n).replace(" ", "")

    def size_class(m: re.Match) -> str:  # llama.cpp guesses the class from the layer count: "7B" for 1 B
        if m.group(1) == "?":
            return actual
        claimed = float(m.group(1)) * (1e9 if m.group(2) == "B" else 1e6)
        return m.group(0) if 0.5 <= n / claimed <= 2 else actual

    return _SIZE_CLASS.sub(size_class, str(row["model_type"]), count=1)


_SIZE_CLASS = re.compile(r"(?<![\w.])(\?|\d+(?:\.\d+)?)([BM])(?:\.A\d+(?:\.\d+)?[BM])?(?![\w])")


def _md_speed(row: dict) -> str:
    """t/s ± the spread between repetitions (llama-bench's); one repetition has none, so no ± 0.00
    that reads as "every token the same" next to the summary's spread between tokens."""
    n = len(row.get("samples_ts") or ())
    return f"{row['avg_ts']:.2f} ± {row['stddev_ts']:.2f}" if n > 1 else f"{row['avg_ts']:.2f}"


def _md_cell(name: str, value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def _render_md(rows: Sequence[dict]) -> str:
    streaming = [c for c in _MD_STREAMING
                 if any(r.get(c) not in (None, "") and not (isinstance(r[c], float) and math.isnan(r[c]))
                        for r in rows)]
    header = ["model", "size", "params", "backend", "threads", *streaming, "test", "t/s"]
    right = {"size", "params", "threads", "t/s", *(c for c in streaming if c != "policy")}
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if h in right else "---" for h in header) + " |"]
    for r in rows:
        cells = [_md_model(r), _size_text(int(r["model_size"])), _params_text(int(r["model_n_params"])),
                 r["backends"], str(r["n_threads"]), *(_md_cell(c, r[c]) for c in streaming),
                 test_label(r), _md_speed(r)]
        lines.append("| " + " | ".join(cells) + " |")
    if rows:
        lines.append("")
        if any(len(r.get("samples_ts") or ()) <= 1 for r in rows):
            lines.append("t/s: one repetition has no spread to show (-r N for ± between repetitions); "
                         "tgN times the N tokens decoded after the prompt pass's first")
        lines.append(f"build: {rows[0]['build_commit']} ({rows[0]['build_number']})")
    return "\n".join(lines) + "\n"


_RENDERERS = {"csv": _render_csv, "json": _render_json, "jsonl": _render_jsonl, "md": _render_md}


def render(rows: Iterable[dict], fmt: str) -> str:
    """The rows as llama-bench would print them with ``-o fmt``."""
    if fmt not in _RENDERERS:
        raise ShardscopeError(f"-o: must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return _RENDERERS[fmt](list(rows))
