"""Every figure a run shows, declared once: its name, unit, label, where it appears and
what independent source ``--verify`` holds it against.

The charts (app/run_view/charts.py, app/experts/expert_charts.py), the timeline CSV (engine/output/csv_out.py,
used by ``bench --timeline`` and the window's export), the window's numbers panels, the
llama-bench Markdown columns and ``bench --verify``'s check names all read this list, so a
figure added here shows up everywhere it is declared to, and an MoE session's exported
timeline carries the same expert figures its chart draws.

Names are MetricsSample fields (live and timeline) and run-summary columns (CSV, panel):
where both exist they are the same word.
"""

from __future__ import annotations

from dataclasses import dataclass

# The one line that says which figure answers "how much came from memory" (window and CLI).
FROM_MEMORY = ("how much came from memory: the cache hit rate — of the weight bytes the tokens needed, "
               "those resident without a disk read (on time also counts bytes read before compute arrived)")


def from_memory_line(cache_hit_rate: float) -> str:
    """The CLI's line: the figure's value and what it answers."""
    shown = "n/a" if cache_hit_rate != cache_hit_rate else f"{100 * cache_hit_rate:.1f} %"
    return f"{shown} of the weight bytes needed came from memory without a disk read (cache hit rate)"


@dataclass(frozen=True)
class Metric:
    name: str  # MetricsSample field and/or run-summary column
    unit: str  # "MiB", "MB/s" (10^6 B/s), "tok/s", "ms", "%" (stored 0..1), "" for counts
    label: str  # legends, panel rows
    fraction: bool = False  # stored as 0..1, shown in %
    plot: str = ""  # the chart row it is drawn on; "" not charted
    curve: str = ""  # the chart's key for its curve
    timeline: bool = False  # a column of the timeline CSV (a MetricsSample field)
    live: bool = False  # a row of the window's live numbers (from samples)
    summary: bool = False  # a row of the window's last-round numbers (from the summary)
    markdown: bool = False  # a column of `-o md` where the rows carry it
    kind: str = ""  # "experts": only expert runs have it (NaN elsewhere); "": both kinds
    source: str = ""  # what `bench --verify` holds it against; "" not checked


METRICS: tuple[Metric, ...] = (
    Metric("t_s", "s", "time", timeline=True),
    Metric("tok_s", "tok/s", "tok/s now", plot="toks", curve="toks", timeline=True, live=True),
    Metric("rss_mb", "MiB", "RSS", plot="memory", curve="rss", timeline=True, live=True,
           source="/proc/<pid>/status VmRSS, another process"),
    Metric("resident_weights_mb", "MiB", "weights resident", plot="memory", curve="weights", timeline=True,
           live=True, source="mincore on another process's own mapping (+ smaps Rss of the run's own pages)"),
    Metric("other_rss_mb", "MiB", "other", plot="memory", curve="other", timeline=True),
    # What the GPU holds with n_gpu_layers (device memory in use, engine/measure/gpu_memory.py):
    # host memory is the budget's, this is apart from it; 0 on a CPU build (issue #35).
    Metric("gpu_mb", "MiB", "GPU memory", plot="memory", curve="gpu", timeline=True, live=True),
    Metric("ssd_mb_s", "MB/s", "SSD reads", plot="ssd", curve="ssd", timeline=True, live=True,
           source="/proc/<pid>/io read_bytes ÷ the outside clock"),
    Metric("read_mb_total", "MiB", "read in total", timeline=True, source="/proc/<pid>/io read_bytes, another process"),
    Metric("cache_hit_rate", "%", "cache hit rate (from RAM)", fraction=True, plot="hit", curve="hit", timeline=True,
           summary=True, markdown=True, source="1 − /proc/<pid>/io read_bytes ÷ bytes needed"),
    Metric("on_time_rate", "%", "on time", fraction=True, plot="hit", curve="ontime", timeline=True, summary=True),
    Metric("n_tokens", "", "tokens decoded", timeline=True, live=True),
    Metric("budget_mb", "MiB", "budget", timeline=True),
    Metric("accounted_weights_mb", "MiB", "weights in the books", timeline=True),
    Metric("cache_hits", "", "cache hits", timeline=True),
    Metric("cache_misses", "", "cache misses", timeline=True),
    Metric("stalls", "", "stalls", timeline=True),
    Metric("emulated_ssd_mb_s", "MB/s", "emulated SSD", timeline=True),
    Metric("phase", "", "phase", timeline=True),
    Metric("expert_hit_rate", "%", "expert hit rate", fraction=True, plot="hit", curve="expert_hit", timeline=True,
           markdown=True, kind="experts",
           source="1 − /proc/<pid>/io read_bytes ÷ picked experts' bytes"),
    Metric("spec_accuracy", "%", "speculation accuracy", fraction=True, plot="hit", curve="spec", timeline=True,
           markdown=True, kind="experts"),
    # The split of an expert run's weights (engine/experts/budget_split.py): the trunk's shards held and
    # the expert cache, in the streamer's books; their sum with the globals is held against mincore.
    Metric("trunk_resident_mb", "MiB", "trunk held", plot="memory", curve="trunk_held", timeline=True,
           kind="experts"),
    Metric("expert_cache_mb", "MiB", "expert cache", plot="memory", curve="expert_cache", timeline=True,
           kind="experts"),
    Metric("dense_mb_per_token", "MiB", "dense", plot="per_token", curve="dense_tok", timeline=True,
           kind="experts"),
    Metric("expert_mb_per_token", "MiB", "experts", plot="per_token", curve="expert_tok", timeline=True,
           markdown=True, kind="experts", source="/proc/<pid>/io read_bytes per token, another process"),
    # Summary-only figures (a round's row):
    Metric("ttft_ms", "ms", "TTFT", summary=True),
    Metric("avg_ts", "tok/s", "avg tok/s", summary=True, source="llama_perf_context n_eval ÷ t_eval_ms"),
    Metric("peak_rss_mb", "MiB", "peak RSS", summary=True),
    Metric("read_mb_per_token", "MiB", "read / token", summary=True, markdown=True,
           source="/proc/<pid>/io read_bytes, read by another process"),
    Metric("expert_resident_mb", "MiB", "experts resident", kind="experts",
           source="mincore over each cached expert's bytes, another process"),
    Metric("projected_ts", "tok/s", "projected", summary=True, markdown=True),
    # The projection's two figures (engine/devices/projection.py): projected_ts is the one the device's
    # engine does; the serial time is compute + flash with nothing overlapped, the bound max of the two.
    Metric("projected_serial_ts", "tok/s", "projected, serial", summary=True),
    Metric("projected_overlapped_ts", "tok/s", "projected, overlapped bound", summary=True),
    Metric("prompt_batch_tokens", "", "prompt batch (tokens)", kind="experts"),
    Metric("io_path", "", "I/O path", summary=True),  # a word: mremap / portable / page cache (io_path.py)
    Metric("prompt_mb_read", "MiB", "read in the prompt", kind="experts",
           source="/proc/<pid>/io read_bytes from the prompt's start to its first token"),
    # Of compute_ms_per_token, the stretches the GPU layers ran (timed between the eval callback's
    # stops; engine/stream/llama_session.py): what a projection does not scale by CPU cores.
    Metric("gpu_compute_ms_per_token", "ms", "GPU compute / token", kind="experts"),
    # Hash-routed layers (deepseek4's tid2eid): their picks are known from the token id, loaded before the
    # layer (engine/experts/hash_prefetch.py); how many were known ahead, the misses that hid, and the share
    # of decoded tokens whose every hash pick was resident at its layer.
    Metric("hash_picks_ahead", "", "hash picks known ahead", summary=True, kind="experts"),
    Metric("hash_misses_hidden", "", "misses hash prefetch hid", summary=True, kind="experts"),
    # llama.cpp's own context figures (its log at context creation, engine/stream/llama_memory.py): part of
    # the RSS beyond the weights; the recurrent archs' state (KDA, gated delta net) and deepseek4's compressor
    # states are the second.
    Metric("llama_kv_mb", "MiB", "KV cache (llama.cpp)", summary=True, kind="experts"),
    Metric("llama_state_mb", "MiB", "recurrent state (llama.cpp)", summary=True, kind="experts"),
    Metric("llama_buffers_mb", "MiB", "compute buffers (llama.cpp)", summary=True, kind="experts"),
    Metric("hash_ready_share", "%", "hash picks loaded before their layer", fraction=True, summary=True,
           kind="experts"),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    return BY_NAME[name]


def timeline_columns() -> list[str]:
    """The timeline CSV's header: every MetricsSample figure declared for it, dense and expert."""
    return [m.name for m in METRICS if m.timeline]


def chart_curves(kind: str = "") -> dict[str, Metric]:
    """curve key → metric, for the run kind's curves ("" dense-and-shared, "experts" the MoE ones)."""
    return {m.curve: m for m in METRICS if m.plot and m.kind == kind}


def panel_rows(where: str) -> list[tuple[str, str, str]]:
    """(field, label, unit) rows of a numbers panel: where = "live" or "summary"."""
    return [(m.name, m.label, "of 1" if m.fraction else m.unit) for m in METRICS if getattr(m, where)]


def markdown_columns() -> list[str]:
    return [m.name for m in METRICS if m.markdown]


def verify_label(name: str, where: str) -> str:
    """A --verify row's name: the figure and the output it is read from ("read_mb_per_token (CSV)")."""
    return f"{BY_NAME[name].name} ({where})"


__all__ = ["Metric", "METRICS", "BY_NAME", "FROM_MEMORY", "from_memory_line", "metric", "timeline_columns",
           "chart_curves",
           "panel_rows", "markdown_columns", "verify_label"]
