"""The window's file actions: open a GGUF (dialog or drop), write a synthetic one, export.

A mixin of MainWindow (it uses the window's model, session and chart), kept apart so
the window module stays about drawing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog

from app.export import ExportPaths, base_from_chosen, export_session
from app.synth_dialog import SynthDialog
from engine.errors import ShardscopeError


class WindowFiles:
    def _open_dialog(self) -> None:
        start = str(Path(self.model_info.path).parent) if self.model_info else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open GGUF model", start, "GGUF models (*.gguf);;All files (*)")
        if path:
            self.open_model(path)

    def _synth_dialog_open(self) -> None:
        default_dir = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) \
            or str(Path.home())
        dialog = SynthDialog(Path(default_dir), self)
        dialog.model_written.connect(self.open_model)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._synth_dialog = dialog
        dialog.open()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        event.acceptProposedAction() if self._dropped_gguf(event.mimeData()) else event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        path = self._dropped_gguf(event.mimeData())
        if path is None:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_model(path)

    @staticmethod
    def _dropped_gguf(mime) -> str | None:
        for url in mime.urls() if mime.hasUrls() else []:
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf"):
                return url.toLocalFile()
        return None

    def export_to(self, base_path: str | Path) -> ExportPaths | None:
        """Write <base>.csv, <base>-timeline.csv and <base>.png; shows and returns None on refusal."""
        try:
            paths = export_session(base_from_chosen(base_path), self.summaries, list(self.timeline),
                                   self.chart.export_png)
        except ShardscopeError as exc:
            self.show_error(str(exc))
            return None
        self.statusBar().showMessage(f"exported {', '.join(p.name for p in paths.all())} to {paths.png.parent}", 8000)
        return paths

    def _export_dialog(self) -> None:
        if not self.summaries and not self.timeline:
            self.show_error("nothing to export yet: press Run first")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export session (base name)", str(Path.home() / "shardscope-run.csv"),
                                              "CSV (*.csv)")
        if path:
            self.export_to(path)
