"""``-o``/``-r`` of ``shardscope bench`` and ``sweep``: finished runs → llama-bench rows on stdout.

Joins the run summaries (engine.stream.streaming_run) with what llama.cpp reports about its
build, this machine and the model (engine.stream.build_info), and hands the rows to the
printers (engine.output.llama_bench_format).
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Sequence

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.output.llama_bench_format import bench_row, render
from shardscope.engine.stream.build_info import llama_facts


def utc_now() -> str:
    """llama-bench's test_time: RFC 3339, UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def rows_for(settings: RunSettings, groups: Iterable[tuple[Sequence, str]]) -> list[dict]:
    """One row per (repetitions' summaries, test_time); all of one model and n_ctx."""
    facts = llama_facts(resolve_model_path(settings.model_path), settings.n_ctx)
    return [bench_row(summaries, facts, test_time=started) for summaries, started in groups if summaries]


def print_rows(settings: RunSettings, groups: Iterable[tuple[Sequence, str]], fmt: str, file=None) -> None:
    rows = rows_for(settings, groups)
    out = file or sys.stdout
    out.write(render(rows, fmt))
    out.flush()
