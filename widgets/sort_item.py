"""How a table cell sorts by its value, shared by the sweep table and the rounds table.

Why not Qt's own order: a table of text sorts "10.5" before "9.2" and a skipped row's
dash among the numbers. A cell sorts by its value: numbers numerically (before text),
a value with a ``sort_key`` (a knob that changed during a round: "200→605") by that key,
and a missing value last in both directions. ``SortItem`` is that rule as a
QTableWidgetItem (the sweep table); the rounds table's model sorts by ``order_key``.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidgetItem

from shardscope.widgets.number_format import format_number

__all__ = ["SortItem", "is_number", "is_missing", "order_key", "cell_text"]


def is_number(value) -> bool:
    """A number a cell sorts numerically and aligns right (a bool reads "yes"/"no": text)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_missing(value) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def order_key(value) -> tuple:
    """The key a present value sorts by: numbers numerically and before text."""
    v = getattr(value, "sort_key", value)
    if is_number(v):
        return (0, v, "")
    return (1, 0, str(v))


def cell_text(value) -> str:
    """What a cell shows: the shared number format; a missing number is blank, a value with
    a ``sort_key`` its own text."""
    if hasattr(value, "sort_key"):
        return str(value)
    if is_missing(value) and not isinstance(value, str):
        return ""
    return format_number(value)


class SortItem(QTableWidgetItem):
    """A cell that sorts by its value: numbers numerically, missing values last."""

    def __init__(self, value) -> None:
        super().__init__(cell_text(value))
        self.value = value
        self.missing = is_missing(value)
        if is_number(value):
            self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.setToolTip("" if self.missing else repr(value))

    def __lt__(self, other: QTableWidgetItem) -> bool:
        if not isinstance(other, SortItem):
            return super().__lt__(other)
        if self.missing or other.missing:
            # Last in both directions: a skipped row must not top a "fastest first" sort.
            table = self.tableWidget()
            descending = (table is not None
                          and table.horizontalHeader().sortIndicatorOrder() == Qt.SortOrder.DescendingOrder)
            return self.missing != other.missing and other.missing != descending
        return order_key(self.value) < order_key(other.value)
