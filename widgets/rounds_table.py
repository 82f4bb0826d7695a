"""A session's rounds side by side: one row per round, sortable, one row pinned as the baseline.

Tuning is a series of rounds at different knob values; a panel that quotes only the last
one forgets the settings that produced the others. This table keeps them all. It takes
plain data — columns as (key, title, tip), rows as {key: value} under a caller's row id —
so it knows nothing of runs or settings; the caller decides what a row means and what
"apply" and "save" do with its id (signals).

Rows are found by id, never by position: a sorted table moves rows, and "the baseline" or
"the row to apply" must stay the round the user pointed at.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (QAbstractItemView, QHBoxLayout, QHeaderView, QLabel, QPushButton, QTableWidget,
                               QVBoxLayout, QWidget)

from shardscope.widgets.sort_item import SortItem

__all__ = ["RoundsTable", "TableColumn", "BASELINE_MARK"]

ROW_ID_ROLE = Qt.ItemDataRole.UserRole + 2
BASELINE_MARK = "\u2605"  # ★ in the first column: which row the deltas and faint curves are against


@dataclass(frozen=True)
class TableColumn:
    key: str
    title: str
    tip: str = ""


class RoundsTable(QWidget):
    baseline_changed = Signal(object)  # row id, or None when unpinned
    apply_requested = Signal(int)  # row id
    save_requested = Signal(int)  # row id

    def __init__(self, columns: Sequence[TableColumn], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        keys = [c.key for c in columns]
        if len(set(keys)) != len(keys) or "" in keys:
            raise ValueError(f"RoundsTable: column keys must be distinct and non-empty, got {keys}")
        self.columns = [TableColumn("", BASELINE_MARK, "the pinned baseline round"), *columns]
        self._baseline: int | None = None
        self.table = t = QTableWidget(0, len(self.columns), self)
        t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        t.setAlternatingRowColors(True)
        t.verticalHeader().setVisible(False)
        t.verticalHeader().setDefaultSectionSize(t.fontMetrics().lineSpacing() + 6)
        for i, col in enumerate(self.columns):
            header = SortItem(col.title)
            header.setToolTip(col.tip or col.key)
            t.setHorizontalHeaderItem(i, header)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # Sized from the rows on screen, not up to 1000 of them (Qt's default): a round's cost to
        # the window must not grow with the session.
        t.horizontalHeader().setResizeContentsPrecision(0)
        t.horizontalHeader().setStretchLastSection(True)
        t.setSortingEnabled(True)
        t.itemSelectionChanged.connect(self._update_buttons)

        self.pin_button = QPushButton("Pin as baseline", self)
        self.pin_button.setToolTip("Numbers show deltas against this round; charts draw its curves faintly")
        self.pin_button.clicked.connect(self._toggle_pin)
        self.apply_button = QPushButton("Apply to sliders", self)
        self.apply_button.setToolTip("Set the window's controls to the selected round's knobs")
        self.apply_button.clicked.connect(lambda: self._emit_selected(self.apply_requested))
        self.save_button = QPushButton("Save as profile…", self)
        self.save_button.clicked.connect(lambda: self._emit_selected(self.save_requested))
        self.caption = QLabel("", self)
        self.note = QLabel("", self)  # the caller's line under the table (what every row shares)
        self.note.setWordWrap(True)
        buttons = QHBoxLayout()
        for b in (self.pin_button, self.apply_button, self.save_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.caption)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(t, 1)
        layout.addWidget(self.note)
        layout.addLayout(buttons)
        self._update_buttons()

    # ------------------------------------------------------------------ rows
    def add_row(self, row_id: int, values: Mapping[str, object], tips: Mapping[str, str] | None = None) -> None:
        """A new row; keys without a column are ignored, columns without a key stay empty."""
        if self._row_of(row_id) is not None:
            raise ValueError(f"RoundsTable already has a row {row_id}")
        t = self.table
        t.setSortingEnabled(False)  # on while inserting, the row would move between setItem calls
        row = t.rowCount()
        t.insertRow(row)
        for i, col in enumerate(self.columns):
            item = SortItem("" if not col.key else values.get(col.key))
            item.setData(ROW_ID_ROLE, row_id)
            if tips and col.key in tips:
                item.setToolTip(tips[col.key])
            t.setItem(row, i, item)
        t.setSortingEnabled(True)
        self._update_buttons()

    def set_cell(self, row_id: int, key: str, value: object, tip: str = "") -> None:
        """Replace one value (a projection recomputed for another device)."""
        row, col = self._require(row_id), self.column_index(key)
        t = self.table
        t.setSortingEnabled(False)
        item = SortItem(value)
        item.setData(ROW_ID_ROLE, row_id)
        if tip:
            item.setToolTip(tip)
        t.setItem(row, col, item)
        t.setSortingEnabled(True)

    def row_ids(self) -> list[int]:
        """Row ids top to bottom as shown (after sorting)."""
        return [self.table.item(r, 0).data(ROW_ID_ROLE) for r in range(self.table.rowCount())]

    def value(self, row_id: int, key: str):
        return self.table.item(self._require(row_id), self.column_index(key)).value

    def text(self, row_id: int, key: str) -> str:
        return self.table.item(self._require(row_id), self.column_index(key)).text()

    def column_values(self, key: str) -> list:
        col = self.column_index(key)
        return [self.table.item(r, col).value for r in range(self.table.rowCount())]

    def column_index(self, key: str) -> int:
        for i, col in enumerate(self.columns):
            if col.key == key and key:
                return i
        raise KeyError(f"RoundsTable has no column {key!r}; columns are {[c.key for c in self.columns[1:]]}")

    def set_hidden(self, keys) -> None:
        """Hide exactly these columns (the caller's choice: e.g. what no row differs in)."""
        hidden = set(keys)
        for i, col in enumerate(self.columns):
            if col.key:
                self.table.setColumnHidden(i, col.key in hidden)

    def hidden(self) -> list[str]:
        return [c.key for i, c in enumerate(self.columns) if c.key and self.table.isColumnHidden(i)]

    def sort_by(self, key: str, descending: bool = False) -> None:
        order = Qt.SortOrder.DescendingOrder if descending else Qt.SortOrder.AscendingOrder
        self.table.sortItems(self.column_index(key), order)

    # ------------------------------------------------------------------ selection and baseline
    def select(self, row_id: int) -> None:
        self.table.selectRow(self._require(row_id))

    def selected(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        return self.table.item(rows[0].row(), 0).data(ROW_ID_ROLE) if rows else None

    def baseline(self) -> int | None:
        return self._baseline

    def pin(self, row_id: int | None) -> None:
        """Make ``row_id`` the baseline (None: no baseline); the ★ and a bold row say which."""
        if row_id is not None:
            self._require(row_id)
        old, self._baseline = self._baseline, row_id
        for rid, on in ((old, False), (row_id, True)):
            row = self._row_of(rid) if rid is not None else None
            if row is None:
                continue
            for c in range(self.table.columnCount()):
                item = self.table.item(row, c)
                font = QFont(item.font())
                font.setBold(on)
                item.setFont(font)
            mark = self.table.item(row, 0)
            mark.setText(BASELINE_MARK if on else "")
            mark.value = BASELINE_MARK if on else ""
            mark.missing = not on
        self.caption.setText(f"baseline: {self._describe(row_id)}" if row_id is not None else "no baseline")
        self._update_buttons()
        if old != row_id:
            self.baseline_changed.emit(row_id)

    def _describe(self, row_id: int) -> str:
        """"round 3": the first column's title and the row's value there."""
        if self.table.columnCount() < 2:
            return str(row_id)
        return f"{self.columns[1].title} {self.table.item(self._require(row_id), 1).text()}"

    def _toggle_pin(self) -> None:
        chosen = self.selected()
        if chosen is not None:
            self.pin(None if chosen == self._baseline else chosen)

    def _emit_selected(self, signal) -> None:
        chosen = self.selected()
        if chosen is not None:
            signal.emit(chosen)

    def _update_buttons(self) -> None:
        chosen = self.selected()
        for b in (self.pin_button, self.apply_button, self.save_button):
            b.setEnabled(chosen is not None)
        self.pin_button.setText("Unpin baseline" if chosen is not None and chosen == self._baseline
                                else "Pin as baseline")

    def _row_of(self, row_id: int) -> int | None:
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).data(ROW_ID_ROLE) == row_id:
                return r
        return None

    def _require(self, row_id: int) -> int:
        row = self._row_of(row_id)
        if row is None:
            raise KeyError(f"RoundsTable has no row {row_id}")
        return row
