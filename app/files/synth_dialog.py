"""File → Write synthetic model…: make a GGUF bigger than the budget, then open it.

Streaming only shows when the model exceeds the budget, and the bundled model is
small; this lets a user make a model of any size without a download. Writing
hundreds of MB takes seconds, so it runs on a BackgroundTask with a progress bar;
Cancel aborts at the next tensor and the writer removes its partial file.

Shapes: a dense llama model, a Mixtral-style MoE, or the Kimi K2 shape (llama.cpp's
deepseek2: MLA attention, the first layer dense, 384 experts top-8 + 1 shared, a sigmoid
router with a per-expert bias) — the shape of the 1.56 TB model the README sizes.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from shardscope.app.base.background import BackgroundTask
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.synth.synth import MIN_SIZE_MB, write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec, like_kimi_k2

# (label, file-name tag, MoE spec factory or None for dense)
SHAPES = (
    ("Dense (llama)", "", None),
    ("MoE, Mixtral-style (llama: 64 experts, top-8)", "moe-", lambda: MoeSpec(64, 8, routing_skew=1.0)),
    ("Kimi K2 shape (deepseek2: 384 experts, top-8, 1 shared, dense first layer)", "kimi-k2-",
     lambda: like_kimi_k2(routing_skew=1.0)),
)


def _write(path: str, size_mb: int, progress, moe):
    """The writer, into a folder made first if it is missing (a typed path, a fresh account)."""
    folder = Path(path).expanduser().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShardscopeError(f"{folder}: cannot create the folder ({exc.strerror or exc})") from None
    return write_synthetic_model(Path(path).expanduser(), size_mb, progress=progress, moe=moe)


class SynthDialog(QDialog):
    model_written = Signal(str)  # path of the finished model

    def __init__(self, default_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Write synthetic model")
        self._default_dir = Path(default_dir)
        self.task: BackgroundTask | None = None
        self.error: str | None = None

        self.size_spin = QSpinBox(self)
        self.size_spin.setRange(int(MIN_SIZE_MB), 262_144)
        self.size_spin.setSingleStep(100)
        self.size_spin.setValue(600)
        self.size_spin.setSuffix(" MiB")  # synth sizes are MiB (engine/synth: size_mb x 2^20)
        self.size_spin.valueChanged.connect(self._suggest_path)
        self.shape_combo = QComboBox(self)
        for label, _tag, _spec in SHAPES:
            self.shape_combo.addItem(label)
        self.shape_combo.currentIndexChanged.connect(self._suggest_path)
        self.path_edit = QLineEdit(self)
        browse = QPushButton("Browse…", self)
        browse.clicked.connect(self._browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(browse)

        form = QFormLayout()
        form.addRow("Shape", self.shape_combo)
        form.addRow("Size", self.size_spin)
        form.addRow("File", path_row)
        note = QLabel("Random weights (gibberish text), a real layout llama.cpp runs: the disk and "
                      "compute work per token are those of a real model of this size and shape.", self)
        note.setWordWrap(True)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.status = QLabel("", self)
        self.status.setWordWrap(True)
        self.buttons = QDialogButtonBox(self)
        self.write_button = self.buttons.addButton("Write and open", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.start)
        self.buttons.rejected.connect(self.reject)

        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)
        self._suggest_path()

    def _suggest_path(self) -> None:
        if self.task is None:
            tag = SHAPES[self.shape_combo.currentIndex()][1]
            self.path_edit.setText(str(self._default_dir / f"synthetic-{tag}{self.size_spin.value()}mb.gguf"))

    def _browse(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Write synthetic model", self.path_edit.text(),
                                              "GGUF models (*.gguf)")
        if path:
            self.path_edit.setText(path if path.endswith(".gguf") else path + ".gguf")

    def start(self) -> None:
        """Begin writing (also what tests call after filling the fields)."""
        if self.task is not None:
            return
        path, size = self.path_edit.text().strip(), self.size_spin.value()
        make_spec = SHAPES[self.shape_combo.currentIndex()][2]
        moe = make_spec() if make_spec else None
        self.error = None
        self.status.setText(f"writing {path} …")
        self.write_button.setEnabled(False)
        self.size_spin.setEnabled(False)
        self.shape_combo.setEnabled(False)
        self.path_edit.setEnabled(False)
        self.task = BackgroundTask(lambda progress: _write(path, size, progress, moe), self)
        self.task.progressed.connect(lambda f: self.progress.setValue(int(f * 1000)))
        self.task.succeeded.connect(self._done)
        self.task.failed.connect(self._failed)
        self.task.start()

    def _done(self, info) -> None:
        self.task.wait()
        self.task = None
        experts = (f", {info.n_expert} experts top-{info.n_expert_used}, arch {info.architecture}"
                   if info.n_expert else "")
        self.status.setText(f"wrote {info.path}: {info.size_bytes / 2**20:,.0f} MiB, {info.n_layers} layers{experts}")
        self.model_written.emit(info.path)
        self.accept()

    def _failed(self, message: str) -> None:
        self.task.wait()
        self.task = None
        self.error = message
        self.status.setText(message)
        self.write_button.setEnabled(True)
        self.size_spin.setEnabled(True)
        self.shape_combo.setEnabled(True)
        self.path_edit.setEnabled(True)
        if message == "cancelled":
            super().reject()

    def reject(self) -> None:
        """Cancel (button or Esc): while writing, stop the writer first; the dialog
        closes once it has removed its partial file."""
        if self.task is not None:
            self.task.cancel()
            self.status.setText("cancelling …")
        else:
            super().reject()

    def closeEvent(self, event) -> None:
        if self.task is not None:  # never leave a writer thread behind a closed dialog
            self.task.cancel()
            self.task.wait()
        super().closeEvent(event)
