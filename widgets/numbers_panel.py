"""The headline numbers of a run (TTFT, tok/s, bytes read...), readable from across the room.

Curves show trends; these are the values people quote. The value sits in its own
column, apart from label and units, so that `text(key)` is exactly the number the
engine counter should format to and tests can compare the two without parsing.
Labels only change text when the shown value changes, because a relayout of the
whole form at 15 Hz is a waste on a 2-core machine that also runs the model.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from shardscope.widgets.number_format import MISSING, format_number

__all__ = ["NumbersPanel", "format_number"]

_WIDEST_EXPECTED = "000,000.0"  # reserve this much so the column never jumps


class NumbersPanel(QWidget):
    def __init__(self, fields: list[tuple[str, str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: dict[str, QLabel] = {}
        self._names: dict[str, QLabel] = {}
        self._order: list[str] = []
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 6, 6, 6)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        grid.setColumnStretch(3, 1)

        value_font = QFont(self.font())
        value_font.setBold(True)
        if value_font.pointSizeF() > 0:
            value_font.setPointSizeF(value_font.pointSizeF() * 1.25)

        for row, (key, label, units) in enumerate(fields):
            if key in self._values:
                raise ValueError(f"NumbersPanel: field key {key!r} appears twice")
            name = QLabel(label, self)
            name.setWordWrap(True)  # a narrow column wraps "cache hit rate (from RAM)" instead of cutting it
            value = QLabel(MISSING, self)
            value.setFont(value_font)
            value.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            value.setMinimumWidth(value.fontMetrics().horizontalAdvance(_WIDEST_EXPECTED))
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            unit = QLabel(units, self)
            unit.setForegroundRole(QPalette.ColorRole.PlaceholderText)
            grid.addWidget(name, row, 0)
            grid.addWidget(value, row, 1)
            grid.addWidget(unit, row, 2)
            self._values[key] = value
            self._names[key] = name
            self._order.append(key)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

    def set_row_tip(self, key: str, tip: str) -> None:
        """A tooltip on a row's name: what the figure means, where a label has no room."""
        self._label(key)  # the same error for an unknown key
        self._names[key].setToolTip(tip)

    def keys(self) -> list[str]:
        return list(self._order)

    def set_value(self, key: str, value: float | str | None) -> None:
        label = self._label(key)
        text = format_number(value)
        if label.text() != text:
            label.setText(text)
            # Full precision on hover: the rounded figure is for reading, not for copying.
            label.setToolTip("" if value is None else str(value))

    def set_values(self, values: Mapping[str, float | str | None]) -> None:
        """Keys without a field are skipped so the engine's whole stats dict can be passed."""
        for key, value in values.items():
            if key in self._values:
                self.set_value(key, value)

    def text(self, key: str) -> str:
        return self._label(key).text()

    def clear(self) -> None:
        for key in self._order:
            self.set_value(key, None)

    def _label(self, key: str) -> QLabel:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(f"NumbersPanel has no field {key!r}; fields are {self._order}") from None
