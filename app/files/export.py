"""Export a session: summary CSV, timeline CSV, the rounds table and a picture of the charts,
one base name.

The CSV files use the engine's writers and columns, so a GUI export and a
``shardscope bench --csv/--timeline`` run can be loaded by the same scripts.
Every file is written through a temp file and a rename: a failed export never
leaves half a CSV where an earlier good one was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.output.csv_out import TIMELINE_COLUMNS, run_columns, run_row, timeline_rows, write_rows
from shardscope.engine.stream.streaming_run import RunSummary


@dataclass(frozen=True)
class ExportPaths:
    summary_csv: Path
    timeline_csv: Path
    png: Path
    rounds_csv: Path  # the window's rounds table as shown: knobs, figures, projection, baseline

    def all(self) -> list[Path]:
        return [self.summary_csv, self.timeline_csv, self.rounds_csv, self.png]


def base_from_chosen(path: str | os.PathLike) -> Path:
    """The file dialog may hand back "run.csv" or "run": both mean base "run"."""
    p = Path(path)
    return p.with_suffix("") if p.suffix.lower() in (".csv", ".png") else p


def export_paths(base: str | os.PathLike) -> ExportPaths:
    b = Path(base)
    return ExportPaths(b.with_name(b.name + ".csv"), b.with_name(b.name + "-timeline.csv"),
                       b.with_name(b.name + ".png"), b.with_name(b.name + "-rounds.csv"))


def expert_cache_as_ran(columns: Sequence[str], rows: Sequence[dict], rounds) -> tuple[list[str], list[dict]]:
    """The rounds CSV's ``expert_cache_mb`` is the cache a round ran with (the engine's summary: an
    "auto" knob's size, not its 0), and ``expert_cache`` says whether the size was taken from the
    budget ("auto") or set ("set"); blank for a round that streamed layers (no expert cache)."""
    if "expert_cache_mb" not in columns:
        return list(columns), list(rows)
    columns = list(columns)
    columns.insert(columns.index("expert_cache_mb") + 1, "expert_cache")
    by_number = {r.number: r for r in rounds}
    out = []
    for row in rows:
        row = {**row, "expert_cache": ""}
        r = by_number.get(row.get("round"))
        ran = getattr(r.summary, "expert_cache_mb", None) if r is not None else None
        if r is not None and row.get("expert_cache_mb") is not None and ran:
            row["expert_cache"] = "set" if r.settings.expert_cache_mb else "auto"
            row["expert_cache_mb"] = ran
        out.append(row)
    return columns, out


def export_session(base: str | os.PathLike, summaries: Sequence[RunSummary],
                   timeline: Iterable[tuple[float, MetricsSample]],
                   save_png: Callable[[str], None],
                   rounds: tuple[Sequence[str], Sequence[dict]] = ((), ())) -> ExportPaths:
    """Write the four files. ``timeline`` pairs each sample with its session time offset;
    ``rounds`` is the rounds table's (columns, rows).

    Raises ShardscopeError naming the file that could not be written.
    """
    paths = export_paths(base)
    if not paths.summary_csv.parent.is_dir():
        from shardscope.engine.runs.output_checks import missing_folder

        raise ShardscopeError(f"{paths.summary_csv}: {missing_folder(paths.summary_csv.parent)}")
    rows = []
    for offset, sample in timeline:
        row = timeline_rows([sample])[0]
        row["t_s"] = sample.t_s + offset  # the charts' shared window time axis
        rows.append(row)
    write_rows(paths.summary_csv, run_columns(), [run_row(s) for s in summaries])
    write_rows(paths.timeline_csv, TIMELINE_COLUMNS, rows)
    write_rows(paths.rounds_csv, list(rounds[0]), rounds[1])
    # The chart saves straight to a path: give it a temp name, then rename, as for the CSVs.
    tmp = paths.png.with_name(f".{paths.png.name}.{os.getpid()}.tmp.png")
    try:
        save_png(str(tmp))
        os.replace(tmp, paths.png)
    except OSError as exc:
        raise ShardscopeError(f"{paths.png}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return paths
