"""What the sweep and auto-tune dialogs share: a status line, the Apply / Save / Close
row, and a search that is cancelled (not orphaned) when the dialog goes away."""

from __future__ import annotations

from typing import Callable, Protocol

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QDialog, QHBoxLayout, QPushButton

from shardscope.app.search.search_runner import SearchHost
from shardscope.engine.knobs.settings import RunSettings


class DialogHost(Protocol):
    """What a search dialog needs from the window that opens it (handed in, never imported)."""

    session: SearchHost  # holds the engine lock while a search runs
    last_error: str | None
    last_round: object  # the last complete RunSummary, or None: the time estimate before Start

    def current_settings(self) -> RunSettings: ...
    def device_id(self) -> str | None: ...
    def model_name(self) -> str: ...
    def apply_settings(self, settings: RunSettings, label: str | None = None) -> None: ...
    def set_device(self, device_id: str | None) -> None: ...
    def save_profile_as(self, name: str, settings: RunSettings | None = None, *, device: str | None = None,
                        description: str | None = None): ...


class SearchDialog(QDialog):
    """Subclasses set ``self.runner`` (a SearchRunner), ``self.status`` (a QLabel),
    ``self.fields`` (the knob fields), ``cancel_message`` and ``close_wait_ms`` (how long
    closing may wait for the current run to give up)."""

    close_wait_ms = 15_000

    def _run_buttons(self, cancel_tip: str) -> QHBoxLayout:
        """Start and Cancel (``start`` / ``cancel``), side by side."""
        self.start_button = QPushButton("Start", self)
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip(cancel_tip)
        self.cancel_button.clicked.connect(self.cancel)
        row = QHBoxLayout()
        row.addWidget(self.start_button)
        row.addWidget(self.cancel_button)
        return row

    def _result_buttons(self, apply_text: str, apply_tip: str, on_apply: Callable[[], None],
                        on_save: Callable[[], None]) -> QHBoxLayout:
        self.apply_button = QPushButton(apply_text, self)
        self.apply_button.setToolTip(apply_tip)
        self.apply_button.clicked.connect(on_apply)
        self.save_button = QPushButton("Save as profile…", self)
        self.save_button.clicked.connect(on_save)
        close_button = QPushButton("Close", self)
        close_button.clicked.connect(self.close)
        row = QHBoxLayout()
        row.addWidget(self.apply_button)
        row.addWidget(self.save_button)
        row.addStretch(1)
        row.addWidget(close_button)
        return row

    cancel_message = "cancelling …"

    def is_running(self) -> bool:
        return self.runner.busy()

    def cancel(self) -> None:
        if self.runner.busy():
            self.runner.cancel()
            self._say(self.cancel_message)

    def _parsed_fields(self) -> dict | None:
        """The fields' values to start a search with; None while one runs, or when a
        field is refused (then the status line says so)."""
        if self.runner.busy():
            return None
        values = self.fields.parse()
        if values is None:
            self._say("Fix the marked field first.", error=True)
        return values

    def _say(self, text: str, error: bool = False) -> None:
        self.message = text
        self.status.setText(text)
        self.status.setStyleSheet("color: #b00020" if error else "")

    def reject(self) -> None:
        """Esc: cancel a running search first (a second Esc closes)."""
        if self.runner.busy():
            self.cancel()
        else:
            super().reject()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.runner.busy():
            self.runner.cancel_and_wait(self.close_wait_ms)
        super().closeEvent(event)
