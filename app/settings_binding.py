"""The tuning controls, bound one-to-one to RunSettings fields.

Each slider is declared once (``CONTROL_SPECS``) with the RunSettings field it
edits, so profiles, the engine's live setters and the window all speak in field
names and nothing maps "the third slider" to "prefetch depth" by hand.

``edited(key, old, new)`` fires only for a user's committed change (slider let go,
keyboard step, combo pick), never when code sets a value (loading a profile,
reverting a refused change): the window marks the chart and pushes to the engine
exactly once per real change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.settings import POLICIES, RunSettings
from widgets import LabelledSlider, format_number


@dataclass(frozen=True)
class ControlSpec:
    key: str  # the RunSettings field
    title: str
    units: str
    minimum: int
    maximum: int  # a default: the window widens it for the model or a profile's value
    step: int = 1
    tip: str = ""


CONTROL_SPECS: tuple[ControlSpec, ...] = (
    ControlSpec("budget_mb", "Memory budget", "MB", 16, 4096,
                tip="Weights allowed in memory (globals + resident shards). "
                    "KV cache and compute buffers are charted apart as 'other RSS'."),
    ControlSpec("shard_mb", "Shard size", "MB", 1, 512,
                tip="Unit of loading and eviction. Changing it re-plans: the run restarts."),
    ControlSpec("prefetch_depth", "Prefetch depth", "shards", 0, 16,
                tip="Streamed shards loaded ahead of the layer being computed."),
    ControlSpec("threads", "Threads", "threads", 1, max(2, os.cpu_count() or 2),
                tip="llama.cpp compute threads (applies from the next token)."),
    ControlSpec("n_gpu_layers", "GPU layers", "layers", 0, 64,
                tip="Layers offloaded to the GPU. Changing it reloads the model: the run restarts."),
    ControlSpec("ssd_mb_s", "SSD emulation", "MB/s", 0, 4000, step=10,
                tip="Cap shard loads at this rate to emulate a slower disk. 0 = off (this disk's speed)."),
)

POLICY_TIPS = {
    "pinned": "pinned: keep a fixed prefix of shards resident, stream the rest",
    "lru": "lru: every shard competes; thrashes once the model exceeds the budget",
}


_SHORT = {"budget_mb": "budget", "shard_mb": "shard", "prefetch_depth": "prefetch", "threads": "threads",
          "n_gpu_layers": "GPU layers", "ssd_mb_s": "SSD", "policy": "policy", "model_path": "model"}
_MARK_UNITS = {"budget_mb": "MB", "shard_mb": "MB", "ssd_mb_s": "MB/s"}  # counts need none


def describe_change(key: str, old, new) -> str:
    """The chart-marker text for one change, e.g. "budget 600→400 MB", "SSD 860→off"."""
    def show(v):
        if key == "ssd_mb_s" and not v:
            return "off"
        if key == "model_path":
            return Path(v).name if v else "bundled"
        return format_number(v) if isinstance(v, (int, float)) else str(v)
    units = "" if key == "ssd_mb_s" and not new else _MARK_UNITS.get(key, "")
    return f"{_SHORT.get(key, key)} {show(old)}\u2192{show(new)} {units}".rstrip()


def _cast(key: str, value: int):
    """Slider ints back to the RunSettings field's type (ssd_mb_s is a float)."""
    return float(value) if key == "ssd_mb_s" else int(value)


class SettingsPanel(QWidget):
    edited = Signal(str, object, object)  # key, old value, new value

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sliders: dict[str, LabelledSlider] = {}
        self._specs = {spec.key: spec for spec in CONTROL_SPECS}
        self._committed: dict[str, object] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for spec in CONTROL_SPECS:
            slider = LabelledSlider(spec.title, spec.minimum, spec.maximum, spec.minimum, spec.units, spec.step, self)
            slider.setToolTip(spec.tip)
            slider.title_label.setMinimumWidth(slider.title_label.fontMetrics().horizontalAdvance("Prefetch depth "))
            layout.addWidget(slider)
            slider.valueCommitted.connect(lambda v, k=spec.key: self._on_commit(k, _cast(k, v)))
            self.sliders[spec.key] = slider
            self._committed[spec.key] = _cast(spec.key, slider.value())

        row = QHBoxLayout()
        row.addWidget(QLabel("Eviction policy", self))
        self.policy_combo = QComboBox(self)
        for policy in POLICIES:
            self.policy_combo.addItem(policy)
            self.policy_combo.setItemData(self.policy_combo.count() - 1, POLICY_TIPS.get(policy, ""),
                                          Qt.ItemDataRole.ToolTipRole)
        self.policy_combo.setToolTip("\n".join(POLICY_TIPS.values()))
        row.addWidget(self.policy_combo, 1)
        layout.addLayout(row)
        self._committed["policy"] = self.policy_combo.currentText()
        # activated: user picks only (currentIndexChanged also fires for code).
        self.policy_combo.activated.connect(lambda _i: self._on_commit("policy", self.policy_combo.currentText()))

    # ------------------------------------------------------------------ reading
    def value(self, key: str):
        return self._committed[key]

    def values(self) -> dict[str, object]:
        return dict(self._committed)

    def apply_to(self, base: RunSettings) -> RunSettings:
        """``base`` (prompt, n_gen, model...) with every control's value."""
        return base.with_changes(**self._committed)

    # ------------------------------------------------------------------ writing
    def set_settings(self, settings: RunSettings) -> None:
        """Show a profile's values; emits nothing (code, not the user, changed them)."""
        for key in self.sliders:
            self.set_value(key, getattr(settings, key))
        self.set_value("policy", settings.policy)

    def set_value(self, key: str, value) -> None:
        """Set one control quietly: used for profiles and to revert a refused change."""
        if key == "policy":
            self.policy_combo.setCurrentText(str(value))
            self._committed[key] = self.policy_combo.currentText()
            return
        slider = self.sliders[key]
        v = int(round(float(value)))
        lo, hi = slider.slider.minimum(), slider.slider.maximum()
        if v > hi:
            slider.setRange(lo, self._round_up(key, v))  # a profile's value must show exactly
        slider.setValue(v)
        self._committed[key] = _cast(key, slider.value())

    def set_maximum(self, key: str, maximum: int) -> None:
        """Fit a slider's range to the model (budget ~ model size); never below its value."""
        slider = self.sliders[key]
        spec = self._specs[key]
        hi = max(int(maximum), slider.value(), spec.minimum + spec.step)
        slider.setRange(spec.minimum, self._round_up(key, hi))

    def set_disabled_reason(self, key: str, reason: str | None) -> None:
        self.sliders[key].setDisabledReason(reason)

    # ------------------------------------------------------------------ internals
    def _round_up(self, key: str, v: int) -> int:
        spec = self._specs[key]
        steps = -(-(v - spec.minimum) // spec.step)
        return spec.minimum + steps * spec.step

    def _on_commit(self, key: str, new) -> None:
        old = self._committed[key]
        if new == old:
            return
        self._committed[key] = new
        self.edited.emit(key, old, new)

