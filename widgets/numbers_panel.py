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

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QWidget

from shardscope.widgets.number_format import MISSING, format_number

__all__ = ["NumbersPanel", "delta_text", "format_number"]

# Reserve this much so the columns never jump: format_number writes three significant figures
# ("0.625", "29.8") and whole numbers from 100 up ("3,552", "12,345"); wider values widen the column.
_WIDEST_EXPECTED = "00,000"
_MINUS = "\u2212"  # a real minus: "−1.2" and "+1.2" are the same width
_WIDEST_DELTA = _MINUS + "0,000"


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


def _fit_width(label: QLabel) -> None:
    """Wider than the room kept ("mremap", "page cache"): the column grows, it never clips."""
    metrics = label.fontMetrics()
    wide = max(metrics.horizontalAdvance(label.text()), metrics.boundingRect(label.text()).width()) + 4
    if wide > label.minimumWidth():
        label.setMinimumWidth(wide)


def two_line_width(metrics, text: str) -> int:
    """The narrowest width that holds ``text`` on at most two lines, broken between words."""
    words = text.split()
    if len(words) < 2:
        return metrics.horizontalAdvance(text) + 1
    return 1 + min(max(metrics.horizontalAdvance(" ".join(words[:i])), metrics.horizontalAdvance(" ".join(words[i:])))
                   for i in range(1, len(words)))


class NumbersPanel(QWidget):
    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """A wrapped label keeps the height of its lines: the layouts above size this panel from
        one-line labels, and a narrow column overprinted "weights resident" with the next row."""
        super().resizeEvent(event)
        self._fit_names()

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        """A name narrowed inside the panel (a wider value took its column's room) re-fits too."""
        if event.type() == QEvent.Type.Resize and watched in self._name_set:
            self._fit_names()
        return False

    def _fit_names(self) -> None:
        for name in self._names.values():
            if name.width() > 0:
                needed = name.heightForWidth(name.width())
                if needed > 0 and name.minimumHeight() != needed:
                    name.setMinimumHeight(needed)

    def __init__(self, fields: list[tuple[str, str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._values: dict[str, QLabel] = {}
        self._names: dict[str, QLabel] = {}
        self._name_set: set[QLabel] = set()  # for eventFilter
        self._deltas: dict[str, QLabel] = {}
        self._shown: dict[str, object] = {}  # the raw value behind each row's text
        self._baseline: dict[str, object] = {}
        self._order: list[str] = []
        # What a delta needs to mean something: the shown values and the baseline share this
        # value (set_context_key; e.g. the model file), else the deltas are not shown.
        self._context_key: str | None = None
        self._context_what = ""
        self._context: object = None
        self._baseline_context: object = None
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 6, 6, 6)
        grid.setHorizontalSpacing(8)
        grid.setVerticalSpacing(2)
        grid.setColumnStretch(0, 1)  # spare room goes to the names: fewer wrapped lines

        value_font = QFont(self.font())
        value_font.setBold(True)
        if value_font.pointSizeF() > 0:
            value_font.setPointSizeF(value_font.pointSizeF() * 1.25)

        self._delta_width = 0  # reserve_deltas: the delta column's room, with or without a baseline
        for row, (key, label, units) in enumerate(fields):
            if key in self._values:
                raise ValueError(f"NumbersPanel: field key {key!r} appears twice")
            name = QLabel(label, self)
            name.setWordWrap(True)  # a narrow column wraps "cache hit rate (from RAM)" instead of cutting it
            name.setMinimumWidth(two_line_width(name.fontMetrics(), label))  # ... onto two lines, not four
            name.installEventFilter(self)
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
            self._name_set.add(name)
            self._order.append(key)
        # Under the rows: why the delta column is empty (a baseline from another model).
        self.baseline_note = QLabel("", self)
        self.baseline_note.setWordWrap(True)
        self.baseline_note.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        self.baseline_note.hide()
        grid.addWidget(self.baseline_note, len(fields), 0, 1, 5)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

    def reserve_deltas(self) -> None:
        """Keep the delta column's room whether or not a baseline is pinned, so pinning one never
        makes the panel wider than the column it sits in (values then printed over their units)."""
        for delta in self._deltas.values():
            self._delta_width = delta.fontMetrics().horizontalAdvance(_WIDEST_DELTA) + 4
            delta.setMinimumWidth(self._delta_width)
        self.updateGeometry()

    def set_context_key(self, key: str, what: str) -> None:
        """Deltas only between values that share ``key`` (a column of what set_values and
        set_baseline are given, e.g. "model_filename"); ``what`` names it in the note ("model")."""
        self._context_key, self._context_what = key, what

    def comparable(self) -> bool:
        """Whether the shown values and the baseline share the context (True without one)."""
        a, b = self._context, self._baseline_context
        return a is None or b is None or a == b

    def _show_note(self) -> None:
        other = bool(self._baseline) and not self.comparable()
        self.baseline_note.setText(f"baseline: other {self._context_what} ({self._baseline_context}), "
                                   f"no deltas" if other else "")
        self.baseline_note.setVisible(other)

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
            _fit_width(label)
            # Full precision on hover: the rounded figure is for reading, not for copying.
            label.setToolTip("" if value is None else str(value))
            self._show_delta(key)

    def set_baseline(self, values: Mapping[str, object] | None) -> None:
        """Show each row's difference from ``values`` (a pinned round's); None hides the column."""
        self._baseline = {k: v for k, v in (values or {}).items() if k in self._values}
        self._baseline_context = (values or {}).get(self._context_key) if self._context_key else None
        self._refresh_deltas()

    def _refresh_deltas(self) -> None:
        for key in self._order:
            self._show_delta(key)
        self._show_note()

    def delta(self, key: str) -> str:
        """The delta column's text of a row ("" without a baseline)."""
        self._label(key)
        return self._deltas[key].text()

    def _show_delta(self, key: str) -> None:
        base, value = self._baseline.get(key), self._shown.get(key)
        text = delta_text(value, base) if self.comparable() else ""
        label = self._deltas[key]
        label.setText(text)
        _fit_width(label)
        if text and base:
            label.setToolTip(f"baseline {format_number(base)}; {100 * (float(value) / float(base) - 1):+.1f} %")
        else:
            label.setToolTip(f"baseline {format_number(base)}" if key in self._baseline else "")

    def set_values(self, values: Mapping[str, float | str | None]) -> None:
        """Keys without a field are skipped so the engine's whole stats dict can be passed."""
        if self._context_key is not None and self._context_key in values:
            context = values[self._context_key]
            if context != self._context:
                self._context = context
                self._refresh_deltas()
        for key, value in values.items():
            if key in self._values:
                self.set_value(key, value)

    def text(self, key: str) -> str:
        return self._label(key).text()

    def clear(self) -> None:
        self._context = None
        for key in self._order:
            self.set_value(key, None)
        self._show_note()

    def _label(self, key: str) -> QLabel:
        try:
            return self._values[key]
        except KeyError:
            raise KeyError(f"NumbersPanel has no field {key!r}; fields are {self._order}") from None
