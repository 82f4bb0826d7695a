"""A setting the user changes while a run is live, e.g. the memory budget.

Each committed change makes the engine re-plan residency (evict, reload shards),
so a drag must not flood it with hundreds of intermediate values: the read-out
follows the handle live, but `valueCommitted` fires only when the handle is let
go, or on a discrete step (keyboard, wheel, click on the groove). Changes made
from code never emit it: the engine already knows the value it pushed.

Values snap to multiples of `step` from the minimum so a committed value is
always one the engine was offered (e.g. budgets in 50 MB steps). The QSlider
works in the same units as `value()` so code holding `slider` sees no mapping.

A slider never opens a dialog: a value moved to the end of its range (a model's minimum
budget, what a budget leaves for a cache) is said by an inline note under the row
(`setNote`), which stays until the next change, so the keyboard keeps its focus and a
drag is never interrupted.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QSlider, QVBoxLayout, QWidget

__all__ = ["LabelledSlider"]


class LabelledSlider(QWidget):
    valueCommitted = Signal(int)

    def __init__(
        self,
        title: str,
        minimum: int,
        maximum: int,
        value: int,
        units: str,
        step: int = 1,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        if step < 1:
            raise ValueError(f"LabelledSlider {title!r}: step must be >= 1, got {step}")
        self._units = units
        self._step = int(step)
        self._quiet = 0  # >0 while code (not the user) moves the slider
        self._disabled_reason: str | None = None
        self._minimum_text: str | None = None  # the readout at the minimum, when it means more than a number
        self._last_committed: int | None = None

        self.title_label = QLabel(title, self)
        self.slider = QSlider(Qt.Orientation.Horizontal, self)
        self.slider.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.readout_label = QLabel(self)
        self.readout_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

        # Why the value sits where it does (clamped to the range the engine accepts): under the row.
        self.note_label = QLabel(self)
        self.note_label.setWordWrap(True)
        self.note_label.setStyleSheet("color: #a04000")
        self.note_label.hide()

        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        layout = QHBoxLayout()
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title_label)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.readout_label)
        column.addLayout(layout)
        column.addWidget(self.note_label)

        self.slider.setSingleStep(self._step)
        self.slider.setPageStep(self._step * 10)
        self.slider.valueChanged.connect(self._on_value_changed)
        self.slider.sliderReleased.connect(self._on_released)
        self.setRange(minimum, maximum)
        self.setValue(value)
        self._last_committed = self.value()

    # -- public API ---------------------------------------------------------------
    def value(self) -> int:
        return self.slider.value()

    def setValue(self, v: int) -> None:
        self._quiet += 1
        try:
            self.slider.setValue(self._snap(int(v)))
        finally:
            self._quiet -= 1
        self._last_committed = self.value()
        self._show_value(self.value())

    def setRange(self, lo: int, hi: int) -> None:
        if hi < lo:
            raise ValueError(f"LabelledSlider {self.title_label.text()!r}: range {lo}..{hi} is empty")
        self._quiet += 1
        try:
            self.slider.setRange(int(lo), int(hi))
            self.slider.setValue(self._snap(self.slider.value()))
        finally:
            self._quiet -= 1
        self._last_committed = self.value()
        self._reserve_readout_width()
        self._show_value(self.value())

    def setDisabledReason(self, reason: str | None, tip: str | None = None) -> None:
        """Disable with a short ``reason`` in the readout; hovering any part shows ``tip`` (the
        longer why), else the reason: the parts' own tooltips are what Qt shows, not the row's."""
        self._disabled_reason = reason or None
        enabled = self._disabled_reason is None
        self.slider.setEnabled(enabled)
        tip = "" if enabled else (tip or self._disabled_reason)
        for w in (self.title_label, self.slider, self.readout_label):
            w.setToolTip(tip)
        self._show_value(self.value())

    def setMinimumText(self, text: str | None) -> None:
        """What the readout says at the slider's minimum (like QSpinBox's specialValueText): a knob
        whose 0 means "chosen for you" shows what was chosen, not "0 MiB"; None: the number."""
        self._minimum_text = text or None
        self._reserve_readout_width()
        self._show_value(self.value())

    def setNote(self, text: str | None) -> None:
        """An inline line under the slider (None or "" hides it): why a value was clamped."""
        self.note_label.setText(text or "")
        self.note_label.setVisible(bool(text))

    def note(self) -> str:
        return self.note_label.text() if not self.note_label.isHidden() else ""

    def disabledReason(self) -> str | None:
        return self._disabled_reason

    def units(self) -> str:
        return self._units

    def readout(self) -> str:
        return self.readout_label.text()

    # -- internals ------------------------------------------------------------------
    def _snap(self, v: int) -> int:
        lo, hi = self.slider.minimum(), self.slider.maximum()
        if v <= lo:
            return lo
        if v >= hi:
            return hi  # the maximum stays reachable even when off the step grid
        return min(hi, lo + round((v - lo) / self._step) * self._step)

    def _text_for(self, v: int) -> str:
        if v == self.slider.minimum() and self._minimum_text is not None:
            return self._minimum_text
        return f"{v:,} {self._units}".rstrip()

    def _show_value(self, v: int) -> None:
        if self._disabled_reason is not None:
            self.readout_label.setText(self._disabled_reason)
            self.readout_label.setEnabled(False)
        else:
            self.readout_label.setText(self._text_for(v))
            self.readout_label.setEnabled(True)

    def _reserve_readout_width(self) -> None:
        # Wide enough for either end of the range, so the slider does not jiggle
        # sideways as the digit count changes during a drag.
        fm = self.readout_label.fontMetrics()
        widest = max(fm.horizontalAdvance(self._text_for(x)) for x in (self.slider.minimum(), self.slider.maximum()))
        self.readout_label.setMinimumWidth(widest + 4)

    def _on_value_changed(self, v: int) -> None:
        snapped = self._snap(v)
        if snapped != v:
            self.slider.setValue(snapped)  # re-enters with the snapped value
            return
        self._show_value(v)
        if self._quiet or self.slider.isSliderDown():
            return
        self._commit(v)

    def _on_released(self) -> None:
        self._commit(self.value())

    def _commit(self, v: int) -> None:
        if v != self._last_committed:
            self._last_committed = v
            self.valueCommitted.emit(v)
