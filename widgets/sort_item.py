"""A table cell that sorts by its value, shared by the sweep table and the rounds table.

Why a custom item: QTableWidget sorts text, so "10.5" would land before "9.2" and
a skipped row's dash would land among the numbers. Each cell keeps its value for
sorting (missing values always last, in both directions) and shows it in the
shared number format.
"""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidgetItem

from shardscope.widgets.number_format import format_number

__all__ = ["SortItem"]


class SortItem(QTableWidgetItem):
    """A cell that sorts by its value: numbers numerically, missing values last."""

    def __init__(self, value) -> None:
        missing = value is None or (isinstance(value, float) and math.isnan(value))
        # A value with a ``sort_key`` (a knob that changed during a round: "200→605") shows its
        # own text and sorts by the key.
        shown = str(value) if hasattr(value, "sort_key") else format_number(value)
        super().__init__("" if missing and not isinstance(value, str) else shown)
        self.value = value
        self.missing = missing or value == ""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.setToolTip("" if missing else repr(value))

    def __lt__(self, other: QTableWidgetItem) -> bool:
        if not isinstance(other, SortItem):
            return super().__lt__(other)
        if self.missing or other.missing:
            # Last in both directions: a skipped row must not top a "fastest first" sort.
            table = self.tableWidget()
            descending = (table is not None
                          and table.horizontalHeader().sortIndicatorOrder() == Qt.SortOrder.DescendingOrder)
            return self.missing != other.missing and other.missing != descending
        a, b = getattr(self.value, "sort_key", self.value), getattr(other.value, "sort_key", other.value)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a < b
        return str(a) < str(b)
