"""The sweep's results as a sortable table: one row per combination, numbers sort as numbers
(widgets.SortItem), and the first cell of a row carries the row's SweepResult so a
sorted row still knows which settings it was ("Apply to sliders" reads it from the selection).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from shardscope.engine.knobs.knobs import KNOBS
from shardscope.engine.search.sweep import SweepResult
from shardscope.widgets.sort_item import SortItem

RESULT_ROLE = Qt.ItemDataRole.UserRole + 1


@dataclass(frozen=True)
class Column:
    key: str  # a RunSettings field (knob) or a RunSummary field (metric); "note" for the note
    title: str
    knob: bool = False
    tip: str = ""


KNOB_TITLES = {key: f"{spec.brief} {spec.unit}".rstrip() for key, spec in KNOBS.items()}
METRIC_COLUMNS = (
    Column("avg_ts", "tok/s", tip="measured here, first token excluded"),
    Column("read_mb_per_token", "read MB/token", tip="kernel read_bytes per decoded token"),
    Column("cache_hit_rate", "cache hits", tip="share of layer-shard accesses with no disk read (0..1)"),
    Column("peak_rss_mb", "peak RSS MB"),
    Column("projected_ts", "projected tok/s", tip="roofline projection onto the chosen device"),
    Column("interval", "interval (rounds)",
           tip="the figure over the combination's warm rounds: mean [95 % interval] (rounds); the search "
               "ranks by it: combinations whose intervals overlap are tied (projected, with a device)"),
    Column("note", "note", tip="why a combination has no numbers (skipped, failed)"),
)


def note_for(result: SweepResult) -> str:
    if result.skipped:
        return f"skipped: {result.error}"
    if result.stopped:
        return "stopped (partial)"
    if result.error:
        return f"failed: {result.error}"
    return ""


class SweepTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, 0, parent)
        self.columns: list[Column] = []
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.setSortingEnabled(True)

    def reset_columns(self, knobs: list[str]) -> None:
        """New sweep: its swept knobs first, then the metrics."""
        self.setSortingEnabled(False)
        self.setRowCount(0)
        self.columns = [Column(k, KNOB_TITLES.get(k, k), knob=True) for k in knobs] + list(METRIC_COLUMNS)
        self.setColumnCount(len(self.columns))
        for i, col in enumerate(self.columns):
            header = QTableWidgetItem(col.title)
            header.setToolTip(col.tip or col.key)
            self.setHorizontalHeaderItem(i, header)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(self.columns) - 1, QHeaderView.ResizeMode.Stretch)
        self.horizontalHeader().setSortIndicator(-1, Qt.SortOrder.AscendingOrder)
        self.setSortingEnabled(True)

    def add_result(self, result: SweepResult) -> None:
        # Sorting on while inserting would move the row between setItem calls.
        self.setSortingEnabled(False)
        row = self.rowCount()
        self.insertRow(row)
        summary = result.summary if not result.stopped else None
        for i, col in enumerate(self.columns):
            if col.knob:
                value = getattr(result.settings, col.key)
            elif col.key == "note":
                value = note_for(result)
            elif col.key == "interval":
                iv = result.interval("projected_ts" if summary is not None and summary.device else "avg_ts") \
                    if summary is not None else None
                value = iv.text() if iv is not None else None
            else:
                value = getattr(summary, col.key) if summary is not None else None
            item = SortItem(value)
            if col.key == "note" and value:
                item.setToolTip(str(value))
            if col.key == "projected_ts" and summary is not None and summary.projected_bound:
                item.setToolTip(f"{summary.device}: {summary.projected_bound}-bound")
            if i == 0:
                item.setData(RESULT_ROLE, result)
            self.setItem(row, i, item)
        self.setSortingEnabled(True)

    def result_at(self, row: int) -> SweepResult | None:
        item = self.item(row, 0)
        return item.data(RESULT_ROLE) if item is not None else None

    def selected_result(self) -> SweepResult | None:
        rows = self.selectionModel().selectedRows()
        return self.result_at(rows[0].row()) if rows else None

    def column_index(self, key: str) -> int:
        return next(i for i, c in enumerate(self.columns) if c.key == key)

    def column_values(self, key: str) -> list:
        """The column top to bottom as shown (after sorting): what a test compares."""
        col = self.column_index(key)
        return [self.item(r, col).value for r in range(self.rowCount())]
