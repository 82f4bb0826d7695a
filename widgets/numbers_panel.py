"""The headline numbers of a run (TTFT, tok/s, bytes read...), readable from across the room.

Curves show trends; these are the values people quote. The value sits in its own
column, apart from label and units, so that `text(key)` is exactly the number the
engine counter should format to and tests can compare the two without parsing.
Labels only change text when the shown value changes, because a relayout of the
whole form at 15 Hz is a waste on a 2-core machine that also runs the model.

With a baseline (a pinned round's values, ``set_baseline``) a fourth column shows each
value's difference from it — "+1.20" in the row's own units, the relative change on
hover — so a tuning step reads as better or worse without remembering the old number.
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from shardscope.widgets.number_format import MISSING, format_number

__all__ = ["NumbersPanel", "delta_text", "format_number"]

_WIDEST_EXPECTED = "000,000.0"  # reserve this much so the column never jumps
_MINUS = "\u2212"  # a real minus: "−1.2" and "+1.2" are the same width


def delta_text(value: object, baseline: object) -> str:
    """"+1.2" / "−0.35" / "±0": value − baseline in the shared format; "" when either is not a number."""
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (value, baseline)):
        return ""
    diff = float(value) - float(baseline)
    if diff != diff:
        return ""
    text = format_number(abs(diff))
    if text == "0":
        return "\u00b10"
    return ("+" if diff > 0 else _MINUS) + text


class NumbersPanel(QWidget):
    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """A wrapped label keeps the height of its lines: the layouts above size this panel from
        one-line labels, and a narrow column overprinted "weights resident" with the next row."""
        super().resizeEvent(event)
        for name in self._names.values():
            if name.width() > 0:
                needed = name.heightForWidth(name.width())
                if needed > 0 and name.minimumHeight() != needed:
                    name.setMinimumHeight(needed)

    def __init__(self, fields: list[tuple[str, str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: dict[str, QLabel] = {}
        self._names: dict[str, QLabel] = {}
        self._deltas: dict[str, QLabel] = {}
        self._shown: dict[str, object] = {}  # the raw value behind each row's text
        self._baseline: dict[str, object] = {}
        self._order: list[str] = []
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 6, 6, 6)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        grid.setColumnStretch(4, 1)

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
            delta = QLabel("", self)
            delta.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            delta.setForegroundRole(QPalette.ColorRole.PlaceholderText)
            grid.addWidget(delta, row, 3)
            self._deltas[key] = delta
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
        self._shown[key] = value
        text = format_number(value)
        if label.text() != text:
            label.setText(text)
            # Full precision on hover: the rounded figure is for reading, not for copying.
            label.setToolTip("" if value is None else str(value))
            self._show_delta(key)

    def set_baseline(self, values: Mapping[str, object] | None) -> None:
        """Show each row's difference from ``values`` (a pinned round's); None hides the column."""
        self._baseline = {k: v for k, v in (values or {}).items() if k in self._values}
        for key in self._order:
            self._show_delta(key)

    def delta(self, key: str) -> str:
        """The delta column's text of a row ("" without a baseline)."""
        self._label(key)
        return self._deltas[key].text()

    def _show_delta(self, key: str) -> None:
        base, value = self._baseline.get(key), self._shown.get(key)
        text = delta_text(value, base)
        label = self._deltas[key]
        label.setText(text)
        if text and base:
            label.setToolTip(f"baseline {format_number(base)}; {100 * (float(value) / float(base) - 1):+.1f} %")
        else:
            label.setToolTip(f"baseline {format_number(base)}" if key in self._baseline else "")

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
