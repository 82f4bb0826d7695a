"""A session's rounds side by side: one row per round, sortable, one row pinned as the baseline.

Tuning is a series of rounds at different knob values; a panel that quotes only the last
one forgets the settings that produced the others. This table keeps them all. It takes
plain data — columns as (key, title, tip), rows as {key: value} under a caller's row id —
so it knows nothing of runs or settings; the caller decides what a row means and what
"apply" and "save" do with its id (signals).

Rows are found by id, never by position: a sorted table moves rows, and "the baseline" or
"the row to apply" must stay the round the user pointed at.

Why a model of plain values and not a QTableWidget: a small MoE runs 160 rounds a minute,
1,600 in a ten-minute session. As items, every round kept two dozen Qt items with their
text and tooltips (about 20 KiB of the window's memory a round), and each new row re-sorted
the whole table through Python comparisons, so a round cost the window more the longer the
session ran. Here a row is one tuple of values; text, alignment, font and tooltips are
made when Qt asks for a cell on screen, and a new row goes to its sorted place by bisection.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from shardscope.widgets.sort_item import cell_text, is_missing, is_number, order_key

__all__ = ["RoundsTable", "TableColumn", "BASELINE_MARK"]

BASELINE_MARK = "\u2605"  # ★ in the first column: which row the deltas and faint curves are against

Tips = Mapping[str, str] | Callable[[], Mapping[str, str]] | None

_DISPLAY = Qt.ItemDataRole.DisplayRole
_TOOLTIP = Qt.ItemDataRole.ToolTipRole
_ALIGN = Qt.ItemDataRole.TextAlignmentRole
_FONT = Qt.ItemDataRole.FontRole
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


@dataclass(frozen=True)
class TableColumn:
    key: str
    title: str
    tip: str = ""


class _Reversed:
    """A key that sorts the other way round (a descending bisection over an ascending list)."""

    __slots__ = ("key",)

    def __init__(self, key) -> None:
        self.key = key

    def __eq__(self, other) -> bool:
        return self.key == other.key

    def __lt__(self, other) -> bool:
        return other.key < self.key


class _RoundsModel(QAbstractTableModel):
    """Rows as tuples of values in the order they came; ``order`` is the shown order."""

    def __init__(self, columns: Sequence[TableColumn], parent=None) -> None:
        super().__init__(parent)
        self.columns = list(columns)  # column 0 is the baseline mark
        self.values: list[tuple] = []  # per row as added: the value of each column after the mark
        self.ids: list[int] = []
        self.tips: list[Tips] = []
        self.row_of_id: dict[int, int] = {}  # id → index into values
        self.order: list[int] = []  # shown row → index into values
        self.sort_column: int | None = None
        self.descending = False
        self.baseline: int | None = None
        self.bold = QFont()
        self.bold.setBold(True)

    # ------------------------------------------------------------------ Qt's questions
    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.order)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section: int, orientation, role=_DISPLAY):
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(self.columns):
            return None
        col = self.columns[section]
        if role == _DISPLAY:
            return col.title
        if role == _TOOLTIP:
            return col.tip or col.key
        return None

    def data(self, index: QModelIndex, role=_DISPLAY):
        if role not in (_DISPLAY, _ALIGN, _TOOLTIP, _FONT) or not index.isValid():
            return None
        i, c = self.order[index.row()], index.column()
        if role == _FONT:
            return self.bold if self.ids[i] == self.baseline else None
        value = self.value_at(i, c)
        if role == _DISPLAY:
            return cell_text(value)
        if role == _ALIGN:
            return _RIGHT if is_number(value) else None
        tips = self.tips[i]
        tips = tips() if callable(tips) else tips
        key = self.columns[c].key
        if tips and key in tips:
            return tips[key]
        return repr(value) if is_number(value) and not is_missing(value) else None

    # ------------------------------------------------------------------ values and order
    def value_at(self, i: int, c: int):
        if c == 0:
            return BASELINE_MARK if self.ids[i] == self.baseline else ""
        return self.values[i][c - 1]

    def _key(self, i: int) -> tuple:
        """Row i's place in the current sort: missing values last in both directions."""
        value = self.value_at(i, self.sort_column)
        if is_missing(value):
            return (1,)
        key = order_key(value)
        return (0, _Reversed(key) if self.descending else key)

    def add(self, row_id: int, values: tuple, tips: Tips) -> None:
        i = len(self.values)
        self.values.append(values)
        self.ids.append(row_id)
        self.tips.append(tips)
        self.row_of_id[row_id] = i
        if self.sort_column is None:
            row = len(self.order)
        else:  # after the rows it ties with: a new row lands where a stable sort would put it
            row = bisect.bisect_right(self.order, self._key(i), key=self._key)
        self.beginInsertRows(QModelIndex(), row, row)
        self.order.insert(row, i)
        self.endInsertRows()

    def replace(self, i: int, c: int, value, tip: str) -> None:
        values = list(self.values[i])
        values[c - 1] = value
        self.values[i] = tuple(values)
        if tip:
            tips = self.tips[i]
            tips = dict(tips() if callable(tips) else tips or {})
            tips[self.columns[c].key] = tip
            self.tips[i] = tips
        row = self.shown_row(i)
        self.dataChanged.emit(self.index(row, c), self.index(row, c))

    def shown_row(self, i: int) -> int:
        return self.order.index(i)

    def sort(self, column: int, order=Qt.SortOrder.AscendingOrder) -> None:
        """Qt's header click (and sort_by): every row to its place; selection and the
        baseline follow their rows (persistent indexes)."""
        self.layoutAboutToBeChanged.emit()
        self.sort_column, self.descending = column, order == Qt.SortOrder.DescendingOrder
        old = self.persistentIndexList()
        held = [(self.order[ix.row()], ix.column()) for ix in old]
        self.order = sorted(range(len(self.values)), key=self._key)
        place = {i: row for row, i in enumerate(self.order)}
        self.changePersistentIndexList(old, [self.index(place[i], c) for i, c in held])
        self.layoutChanged.emit()

    def resort(self) -> None:
        if self.sort_column is not None:
            self.sort(self.sort_column,
                      Qt.SortOrder.DescendingOrder if self.descending else Qt.SortOrder.AscendingOrder)


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
        self._model = _RoundsModel(self.columns, self)
        # A replaced value in the sorted column moves its row once, after every replacement
        # of one pass (a device change re-projects every round).
        self._resort = QTimer(self, singleShot=True, interval=0)
        self._resort.timeout.connect(self._model.resort)
        self.table = t = QTableView(self)
        t.setModel(self._model)
        t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        t.setAlternatingRowColors(True)
        t.verticalHeader().setVisible(False)
        t.verticalHeader().setDefaultSectionSize(t.fontMetrics().lineSpacing() + 6)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # Sized from the rows on screen, not up to 1000 of them (Qt's default): a round's cost to
        # the window must not grow with the session.
        t.horizontalHeader().setResizeContentsPrecision(0)
        t.horizontalHeader().setStretchLastSection(True)
        t.setSortingEnabled(True)
        t.sortByColumn(1 if len(self.columns) > 1 else 0, Qt.SortOrder.AscendingOrder)  # as they came
        t.selectionModel().selectionChanged.connect(self._update_buttons)
        # Scrolled to its end, the table stays there as rows come and as it is resized (the newest
        # rounds in sight); scrolled up by the user, it stays where they look.
        self._following = True
        bar = t.verticalScrollBar()
        bar.valueChanged.connect(lambda v: setattr(self, "_following", v >= bar.maximum()))
        bar.rangeChanged.connect(lambda _lo, hi: bar.setValue(hi) if self._following else None)

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
    def add_row(self, row_id: int, values: Mapping[str, object], tips: Tips = None) -> None:
        """A new row; keys without a column are ignored, columns without a key stay empty.
        ``tips``: tooltips by column key, or a function that gives them when one is shown."""
        if row_id in self._model.row_of_id:
            raise ValueError(f"RoundsTable already has a row {row_id}")
        self._model.add(row_id, tuple(values.get(col.key) for col in self.columns[1:]), tips)
        self._update_buttons()

    def set_cell(self, row_id: int, key: str, value: object, tip: str = "") -> None:
        """Replace one value (a projection recomputed for another device)."""
        c = self.column_index(key)
        self._model.replace(self._require(row_id), c, value, tip)
        if c == self._model.sort_column:
            self._resort.start()

    def row_count(self) -> int:
        return self._model.rowCount()

    def row_ids(self) -> list[int]:
        """Row ids top to bottom as shown (after sorting)."""
        self._settle()
        return [self._model.ids[i] for i in self._model.order]

    def value(self, row_id: int, key: str):
        return self._model.value_at(self._require(row_id), self.column_index(key))

    def text(self, row_id: int, key: str) -> str:
        return cell_text(self.value(row_id, key))

    def mark(self, row_id: int) -> str:
        """The first column's text: the baseline mark or nothing."""
        return self._model.value_at(self._require(row_id), 0)

    def is_bold(self, row_id: int) -> bool:
        self._settle()
        row = self._model.shown_row(self._require(row_id))
        font = self._model.data(self._model.index(row, 1), _FONT)
        return font is not None and font.bold()

    def tip(self, row_id: int, key: str) -> str | None:
        self._settle()
        row = self._model.shown_row(self._require(row_id))
        return self._model.data(self._model.index(row, self.column_index(key)), _TOOLTIP)

    def column_values(self, key: str) -> list:
        """The column's values top to bottom as shown."""
        c = self.column_index(key)
        self._settle()
        return [self._model.value_at(i, c) for i in self._model.order]

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
        self.table.sortByColumn(self.column_index(key), order)

    # ------------------------------------------------------------------ selection and baseline
    def select(self, row_id: int) -> None:
        self._settle()
        self.table.selectRow(self._model.shown_row(self._require(row_id)))

    def selected(self) -> int | None:
        rows = self.table.selectionModel().selectedRows()
        return self._model.ids[self._model.order[rows[0].row()]] if rows else None

    def baseline(self) -> int | None:
        return self._model.baseline

    def pin(self, row_id: int | None) -> None:
        """Make ``row_id`` the baseline (None: no baseline); the ★ and a bold row say which."""
        if row_id is not None:
            self._require(row_id)
        m = self._model
        old, m.baseline = m.baseline, row_id
        for rid in (old, row_id):
            if rid is not None and rid in m.row_of_id:
                row = m.shown_row(m.row_of_id[rid])
                m.dataChanged.emit(m.index(row, 0), m.index(row, len(self.columns) - 1))
        if m.sort_column == 0:
            m.resort()
        self.caption.setText(f"baseline: {self._describe(row_id)}" if row_id is not None else "no baseline")
        self._update_buttons()
        if old != row_id:
            self.baseline_changed.emit(row_id)

    def _describe(self, row_id: int) -> str:
        """"round 3": the first column's title and the row's value there."""
        if len(self.columns) < 2:
            return str(row_id)
        return f"{self.columns[1].title} {self.text(row_id, self.columns[1].key)}"

    def _toggle_pin(self) -> None:
        chosen = self.selected()
        if chosen is not None:
            self.pin(None if chosen == self._model.baseline else chosen)

    def _emit_selected(self, signal) -> None:
        chosen = self.selected()
        if chosen is not None:
            signal.emit(chosen)

    def _update_buttons(self, *_) -> None:
        chosen = self.selected()
        for b in (self.pin_button, self.apply_button, self.save_button):
            b.setEnabled(chosen is not None)
        self.pin_button.setText("Unpin baseline" if chosen is not None and chosen == self._model.baseline
                                else "Pin as baseline")

    def _settle(self) -> None:
        """A re-sort waiting for the event loop happens now (a caller reads the order)."""
        if self._resort.isActive():
            self._resort.stop()
            self._model.resort()

    def _require(self, row_id: int) -> int:
        i = self._model.row_of_id.get(row_id)
        if i is None:
            raise KeyError(f"RoundsTable has no row {row_id}")
        return i
