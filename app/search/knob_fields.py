"""Text fields for knob lists ("16,32,64", "0-4", "1-16*2"), checked as they are typed.

Sweeps and auto-tune take the same list syntax as ``shardscope sweep``/``tune``
(``engine.knobs.knob_ranges``), so a list that works on the command line works here and
the refusal reads the same. The message appears under the field it is about, in
red, and the field gets a red frame: with five fields, "bad range" in a status bar
would leave the user hunting for which one.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtWidgets import QFormLayout, QLabel, QLineEdit, QVBoxLayout, QWidget

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_ranges import parse_knob
from shardscope.engine.knobs.knobs import KNOBS

_ERROR_STYLE = "color: #b00020"
_LIST_TIP = "A list (16,64) or ranges: 0-4, 1-8+2 (step), 1-16*2 (factor)"
_FIELD_ERROR_STYLE = "QLineEdit { border: 1px solid #b00020; }"


@dataclass(frozen=True)
class KnobField:
    key: str  # the RunSettings field
    title: str  # what the form calls it (and what an error names)
    default: str
    tip: str = ""


def knob_field(key: str, default: str) -> KnobField:
    """A field for one knob, titled and explained by its declaration."""
    spec = KNOBS[key]
    title = f"{spec.label} ({spec.unit})" if spec.unit else spec.label
    example = spec.propose or spec.tune or ",".join(spec.choices) or "16,64 or 0-4"
    return KnobField(key, title, default, f"{spec.label}: a list or range, e.g. {example}")


class KnobFields(QWidget):
    def __init__(self, fields: list[KnobField], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.specs = {f.key: f for f in fields}
        self.idle: set[str] = set()  # fields greyed: the run does not read their knob
        self.edits: dict[str, QLineEdit] = {}
        self.errors: dict[str, QLabel] = {}
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        for spec in fields:
            edit = QLineEdit(spec.default, self)
            edit.setToolTip(spec.tip or _LIST_TIP)
            error = QLabel("", self)
            error.setStyleSheet(_ERROR_STYLE)
            error.setWordWrap(True)
            error.hide()
            cell = QWidget(self)
            column = QVBoxLayout(cell)
            column.setContentsMargins(0, 0, 0, 0)
            column.setSpacing(1)
            column.addWidget(edit)
            column.addWidget(error)
            form.addRow(spec.title, cell)
            edit.textEdited.connect(lambda _t, k=spec.key: self.check(k))
            self.edits[spec.key] = edit
            self.errors[spec.key] = error

    def set_text(self, key: str, text: str) -> None:
        self.edits[key].setText(text)
        self.check(key)

    def error(self, key: str) -> str | None:
        label = self.errors[key]
        return label.text() if not label.isHidden() else None

    def check(self, key: str) -> list | None:
        """Parse one field; show (or clear) its inline message; None when refused."""
        spec, edit, label = self.specs[key], self.edits[key], self.errors[key]
        try:
            values = parse_knob(spec.title, edit.text(), key)
        except ShardscopeError as exc:
            label.setText(str(exc))
            label.show()
            edit.setStyleSheet(_FIELD_ERROR_STYLE)
            return None
        label.hide()
        label.setText("")
        edit.setStyleSheet("")
        return values

    def parse(self) -> dict[str, list] | None:
        """Every field's values in field order, or None (each bad field showing its message)."""
        parsed = {key: self.check(key) for key in self.specs}
        if any(v is None for v in parsed.values()):
            for key, values in parsed.items():
                if values is None:
                    self.edits[key].setFocus()
                    break
            return None
        return parsed  # type: ignore[return-value]

    def set_idle(self, keys, tip: str) -> None:
        """Grey the fields of knobs the run does not read (they keep their one value), with why."""
        self.idle = {k for k in keys if k in self.edits}
        for key, edit in self.edits.items():
            edit.setEnabled(key not in self.idle)
            edit.setToolTip(tip if key in self.idle else (self.specs[key].tip or _LIST_TIP))

    def set_enabled(self, enabled: bool) -> None:
        for key, edit in self.edits.items():
            edit.setEnabled(enabled and key not in self.idle)
