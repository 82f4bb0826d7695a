"""The tuning controls, one per enabled knob that declares a slider or choices, or is a bool
(a check box) (engine.knobs).

Titles, units, ranges, steps and tips come from the knob's declaration, so profiles, the
engine and the window all speak in RunSettings field names and nothing maps "the third
slider" to a knob by hand.

``edited(key, old, new)`` fires only for a user's committed change (slider let go,
keyboard step, combo pick, box ticked), never when code sets a value (loading a profile,
reverting a refused change): the window marks the chart and pushes to the engine
exactly once per real change.

``set_limits`` fits a slider to the range the engine accepts for the open model and the
other knobs (app/files/knob_limits.py) and moves a value outside it inside, saying so: the
slider then offers only values that run. The expert cache's lowest position is its 0
("auto"), the next one the smallest cache the engine accepts, so a keyboard step from
"auto" lands on a size that runs.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from shardscope.engine.knobs.knobs import ENABLED, KNOBS, Knob
from shardscope.engine.knobs.settings import RunSettings
from shardscope.widgets import LabelledSlider, format_number

SLIDERS: tuple[Knob, ...] = tuple(KNOBS[k] for k in ENABLED if KNOBS[k].slider)
COMBOS: tuple[Knob, ...] = tuple(KNOBS[k] for k in ENABLED if KNOBS[k].choices)
CHECKS: tuple[Knob, ...] = tuple(KNOBS[k] for k in ENABLED if KNOBS[k].type is bool)


def describe_change(key: str, old, new) -> str:
    """The chart-marker text for one change, e.g. "budget 600→400 MiB", "SSD 860→off"."""
    spec = KNOBS[key]

    def show(v):
        if spec.off and not v:
            return spec.off
        if isinstance(v, bool):
            return "on" if v else "off"
        if key == "model_path":
            return Path(v).name if v else "bundled"
        return format_number(v) if isinstance(v, (int, float)) else str(v)
    units = "" if spec.off and not new else spec.unit
    return f"{spec.short} {show(old)}\u2192{show(new)} {units}".rstrip()


def _cast(key: str, value: int):
    """Slider ints back to the RunSettings field's type (a float knob stays a float)."""
    return KNOBS[key].type(value)


class SettingsPanel(QWidget):
    edited = Signal(str, object, object)  # key, old value, new value

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sliders: dict[str, LabelledSlider] = {}
        self.combos: dict[str, QComboBox] = {}
        self.checks: dict[str, QCheckBox] = {}
        self._committed: dict[str, object] = {}
        self._limits: dict[str, tuple[int, int, bool]] = {}  # key -> (low, high, lowest position = 0)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        widest = max((spec.label for spec in SLIDERS), key=len) + " "
        for spec in SLIDERS:
            low, high, step = spec.slider
            slider = LabelledSlider(spec.label, low, high, low, spec.unit or spec.counts, step, self)
            slider.setToolTip(spec.tip)
            slider.title_label.setMinimumWidth(slider.title_label.fontMetrics().horizontalAdvance(widest))
            layout.addWidget(slider)
            slider.valueCommitted.connect(lambda v, k=spec.name: self._on_commit(k, self._from_slider(k, v)))
            self.sliders[spec.name] = slider
            self._committed[spec.name] = _cast(spec.name, slider.value())

        for spec in COMBOS:
            row = QHBoxLayout()
            row.addWidget(QLabel(spec.label, self))
            combo = QComboBox(self)
            tips = dict(zip(spec.choices, spec.tip.splitlines())) if spec.tip.count("\n") + 1 == len(
                spec.choices) else {}
            for choice in spec.choices:
                combo.addItem(choice)
                combo.setItemData(combo.count() - 1, tips.get(choice, ""), Qt.ItemDataRole.ToolTipRole)
            combo.setToolTip(spec.tip)
            row.addWidget(combo, 1)
            layout.addLayout(row)
            self._committed[spec.name] = combo.currentText()
            # activated: user picks only (currentIndexChanged also fires for code).
            combo.activated.connect(lambda _i, k=spec.name, c=combo: self._on_commit(k, c.currentText()))
            self.combos[spec.name] = combo
        for spec in CHECKS:
            box = QCheckBox(spec.label, self)
            box.setToolTip(spec.tip)
            box.setChecked(bool(spec.default))
            layout.addWidget(box)
            self._committed[spec.name] = box.isChecked()
            # clicked: user toggles only (toggled also fires for code).
            box.clicked.connect(lambda checked, k=spec.name: self._on_commit(k, bool(checked)))
            self.checks[spec.name] = box
        self.policy_combo = self.combos["policy"]

    # ------------------------------------------------------------------ reading
    def value(self, key: str):
        return self._committed[key]

    def values(self) -> dict[str, object]:
        return dict(self._committed)

    def apply_to(self, base: RunSettings) -> RunSettings:
        """``base`` (prompt, n_gen, model...) with every control's value."""
        return base.with_changes(**self._committed)

    # ------------------------------------------------------------------ writing
    def set_settings(self, settings: RunSettings, *, refit: bool = False) -> None:
        """Show a profile's values; emits nothing (code, not the user, changed them).
        ``refit``: the sliders with limits take the values as given, for set_limits to move
        inside the limits of the new values together (a larger budget and cache at once)."""
        for key in self._committed:
            if refit and key in self._limits:
                self._committed[key] = _cast(key, getattr(settings, key))
            else:
                self.set_value(key, getattr(settings, key))

    def set_value(self, key: str, value) -> None:
        """Set one control quietly: used for profiles and to revert a refused change. A slider
        with limits (set_limits) takes the nearest value inside them."""
        if key in self.checks:
            self.checks[key].setChecked(bool(value))
            self._committed[key] = bool(value)
            return
        if key in self.combos:
            self.combos[key].setCurrentText(str(value))
            self._committed[key] = self.combos[key].currentText()
            return
        slider = self.sliders[key]
        if key in self._limits:
            shown = self._clamped(key, value)
            slider.setValue(self._to_slider(key, shown))
            self._committed[key] = shown
            return
        v = int(round(float(value)))
        lo, hi = slider.slider.minimum(), slider.slider.maximum()
        if v > hi:
            slider.setRange(lo, self._round_up(key, v))  # a profile's value must show exactly
        elif v < lo and v >= KNOBS[key].slider[0]:  # below a model's floor (set_maximum): shown, not raised
            slider.setRange(v, hi)
        slider.setValue(v)
        self._committed[key] = _cast(key, slider.value())

    def commit(self, key: str, value) -> None:
        """Set one control as if the user had (a click elsewhere chose the value): emits ``edited``."""
        old = self._committed[key]
        self.set_value(key, value)
        if self._committed[key] != old:
            self.edited.emit(key, old, self._committed[key])

    def set_limits(self, key: str, low: int, high: int, *, off_below: bool = False) -> tuple | None:
        """Offer ``low``..``high`` only (``off_below``: and 0 at the lowest position, below ``low``).
        The value is moved inside, quietly; returns (old, new) when it moved."""
        slider = self.sliders[key]
        low = int(low)
        high = max(int(high), low - 1 if off_below else low)
        self._limits[key] = (low, high, off_below)
        old = self._committed[key]
        new = self._clamped(key, old)
        slider.setRange(low - 1 if off_below else low, max(high, low - 1 if off_below else low))
        slider.setValue(self._to_slider(key, new))
        self._committed[key] = new
        return (old, new) if new != old else None

    def drop_limits(self, key: str) -> None:
        """The knob no longer depends on the model (a dense model's expert cache): its value stays."""
        if self._limits.pop(key, None) is not None:
            self.set_value(key, self._committed[key])

    def limits(self, key: str) -> tuple[int, int, bool] | None:
        return self._limits.get(key)

    def offered(self, key: str) -> list:
        """Every value the slider offers, lowest first (a test steps through them)."""
        s = self.sliders[key].slider
        return list(dict.fromkeys(self._from_slider(key, v) for v in range(s.minimum(), s.maximum() + 1)))

    def set_note(self, key: str, text: str | None) -> None:
        """The inline note beside a slider (why its value or range is what it is); None clears it."""
        if key in self.sliders:
            self.sliders[key].setNote(text)

    def _clamped(self, key: str, value):
        low, high, off_below = self._limits[key]
        if off_below and not value:
            return _cast(key, 0)
        if off_below and high < low:  # only 0 runs (the budget leaves no room for a set size)
            return _cast(key, 0)
        return _cast(key, min(max(int(round(float(value))), low), high))

    def _to_slider(self, key: str, value) -> int:
        limits = self._limits.get(key)
        if limits is not None and limits[2] and not value:
            return limits[0] - 1
        return int(round(float(value)))

    def _from_slider(self, key: str, position: int):
        limits = self._limits.get(key)
        if limits is not None and limits[2] and position < limits[0]:
            return _cast(key, 0)
        return _cast(key, position)

    def set_maximum(self, key: str, maximum: int, minimum: int | None = None) -> None:
        """Fit a slider's range to the model (budget ~ model size); never below its value.
        ``minimum``: the model's own floor (an MoE's minimum budget); never above the value either,
        so a value the engine refuses stays shown and its refusal names the slider."""
        slider = self.sliders[key]
        low, _high, step = KNOBS[key].slider
        if minimum is not None:
            low = max(low, min(int(minimum), slider.value()))
        hi = max(int(maximum), slider.value(), low + step)
        slider.setRange(low, self._round_up(key, hi))

    def set_disabled_reason(self, key: str, reason: str | None, tip: str | None = None) -> None:
        """Disable a control with a short ``reason`` (a slider's readout) and a ``tip`` saying why;
        None enables it again with its knob's own tooltip."""
        if key in self.sliders:
            self.sliders[key].setDisabledReason(reason, tip)
            widget = self.sliders[key]
        else:
            widget = self.combos.get(key) or self.checks[key]
            widget.setEnabled(reason is None)
        widget.setToolTip(KNOBS[key].tip if reason is None else (tip or reason))

    # ------------------------------------------------------------------ internals
    def _round_up(self, key: str, v: int) -> int:
        low, _high, step = KNOBS[key].slider
        steps = -(-(v - low) // step)
        return low + steps * step

    def _on_commit(self, key: str, new) -> None:
        old = self._committed[key]
        if new == old:
            return
        self._committed[key] = new
        self.edited.emit(key, old, new)

