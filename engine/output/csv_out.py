"""CSV files for runs and timelines, written so a crash never leaves half a row.

Appending rewrites the whole file through a temp file and a rename: slower than
``open(..., "a")`` but an interrupted append can never corrupt the rows already there,
and a file with other columns is refused rather than silently mixed.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Iterable, Sequence

from shardscope.engine.base.atomic_write import write_text_atomic
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.experts.expert_run import ExpertRunSummary
from shardscope.engine.measure.metric_registry import timeline_columns


def format_cell(value) -> str:
    if value is None:  # a column this row's run kind does not have (a dense row's expert figures)
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _render(columns: Sequence[str], rows: Iterable[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([format_cell(row.get(c, "")) for c in columns])
    return out.getvalue()


def read_rows(path: str | os.PathLike) -> tuple[list[str], list[dict]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ShardscopeError(f"{path}: not a UTF-8 CSV file") from None
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot read ({exc.strerror})") from None
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def write_rows(path: str | os.PathLike, columns: Sequence[str], rows: Iterable[dict]) -> None:
    write_text_atomic(path, _render(columns, rows))


def append_rows(path: str | os.PathLike, columns: Sequence[str], rows: Iterable[dict]) -> None:
    """Add rows to a run CSV, creating it with a header if needed."""
    existing: list[dict] = []
    if Path(path).exists() and Path(path).stat().st_size > 0:
        header, existing = read_rows(path)
        if header != list(columns):
            first = next((h for h, c in zip(header, columns) if h != c), header[len(columns):] or columns[len(header):])
            raise ShardscopeError(
                f"{path}: has other columns than a shardscope run CSV; "
                f"write to a new file (first differing column: {first})"
            )
    write_rows(path, columns, [*existing, *rows])


# Declared in the metric registry: the expert figures the chart draws are columns too.
TIMELINE_COLUMNS = timeline_columns()


def timeline_rows(samples) -> list[dict]:
    return [{c: getattr(s, c, None) for c in TIMELINE_COLUMNS} for s in samples]


def run_columns() -> list[str]:
    """The one header of every run CSV (bench, sweep, tune, the window's export): the dense
    row's columns, then the expert run's (blank in a dense row), so dense and MoE rows
    share a file and an MoE row always says its expert_policy and expert figures."""
    return ExpertRunSummary.columns()


def run_row(summary) -> dict:
    """A summary of either run kind under run_columns()."""
    return {c: getattr(summary, c, None) for c in run_columns()}
