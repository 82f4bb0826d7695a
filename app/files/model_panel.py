"""The Model box: what is open, the two ways to open another, and the probe that checks a
file off the GUI thread before it becomes the model."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from shardscope.app.base.background import BackgroundTask
from shardscope.app.files.model_probe import ModelInfo, probe_model
from shardscope.engine.base.quantity_text import bytes_text, plural
from shardscope.engine.base.units import MIB


class ModelPanel(QGroupBox):
    open_requested = Signal()
    synth_requested = Signal()
    probed = Signal(object, bool)  # ModelInfo, quiet (a re-plan, not an open)
    failed = Signal(str)

    def __init__(self, synth_tip: str, parent: QWidget | None = None) -> None:
        super().__init__("Model", parent)
        self.tasks: list[BackgroundTask] = []
        self._serial = 0
        layout = QVBoxLayout(self)
        self.label = QLabel("(probing…)")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label)
        row = QHBoxLayout()
        for text, signal, tip in (("Open GGUF…", self.open_requested, ""),
                                  ("Synthetic…", self.synth_requested, synth_tip)):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(signal)
            row.addWidget(button)
        layout.addLayout(row)

    def probe(self, path: str | None, shard_mb: int, quiet: bool) -> None:
        """Plan ``path`` on a BackgroundTask; only the latest probe reports (probed / failed)."""
        self._serial += 1
        serial = self._serial
        task = BackgroundTask(lambda _progress: probe_model(path, shard_mb), self)
        task.succeeded.connect(lambda info: serial == self._serial and self._show(info, quiet))
        task.failed.connect(lambda message: serial == self._serial and self.failed.emit(message))
        self.tasks.append(task)
        task.finished.connect(lambda: self.tasks.remove(task) if task in self.tasks else None)
        task.start()

    def _show(self, info: ModelInfo, quiet: bool) -> None:
        # The file's size as synth and size print it (decimal MB), so one file reads one number.
        self.label.setText(f"<b>{info.name}</b><br>{bytes_text(info.file_mb * MIB)} file, "
                           f"{plural(info.n_layers, 'layer')}"
                           f"<br><small>{info.path}</small>")
        self.probed.emit(info, quiet)
