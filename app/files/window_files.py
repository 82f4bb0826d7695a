"""The window's file actions: open a GGUF (dialog or drop), write a synthetic one, export.

A mixin of MainWindow (it uses the window's model, session and chart), kept apart so
the window module stays about drawing.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog

from shardscope.app.base.background import BackgroundTask
from shardscope.app.files.export import ExportPaths, base_from_chosen, expert_cache_as_ran, export_session
from shardscope.app.files.synth_dialog import SynthDialog
from shardscope.app.rounds.rounds import rounds_csv_rows
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.user_dirs import cache_dir


def synth_default_dir() -> Path:
    """Where a synthetic model goes unless the user picks a file: the Documents folder where it
    exists, else the user cache's models folder (created here; a fresh account has no Documents)."""
    documents = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
    if documents and Path(documents).is_dir():
        return Path(documents)
    folder = cache_dir() / "models"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class WindowFiles:
    def _open_dialog(self) -> None:
        start = str(Path(self.model_info.path).parent) if self.model_info else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open GGUF model", start, "GGUF models (*.gguf);;All files (*)")
        if path:
            self.open_model(path)

    def _synth_dialog_open(self) -> None:
        dialog = SynthDialog(synth_default_dir(), self)
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
        """Write <base>.csv, <base>-timeline.csv, <base>-rounds.csv and <base>.png; shows and
        returns None on refusal."""
        try:
            rounds = expert_cache_as_ran(*rounds_csv_rows(self.rounds, self.rounds_table.baseline()), self.rounds)
            paths = export_session(base_from_chosen(base_path), self.summaries, list(self.timeline),
                                   self.chart.export_png, rounds)
        except ShardscopeError as exc:
            self.show_error(str(exc))
            return None
        self.statusBar().showMessage(f"exported {', '.join(p.name for p in paths.all())} to {paths.png.parent}", 8000)
        return paths

    def _export_dialog(self) -> None:
        if not self.summaries and not self.timeline:
            self.show_error("nothing to export yet: press Run first")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export session (base name)",
                                              str(Path.home() / "shardscope-run.csv"),
                                              "CSV (*.csv)")
        if path:
            self.export_to(path)

    # -- calibration: llama-bench rows from a device fit its speed (engine.devices.calibrate) ---------
    def _calibrate_dialog(self) -> None:
        device_id = self.device_id()
        if not device_id:
            self.show_error("Calibrate: choose a device under 'Project onto device' first")
            return
        if self.runs.is_running():
            self.show_error("Calibrate: stop the run first (calibration times the bundled model on this machine)")
            return
        path, _ = QFileDialog.getOpenFileName(self, f"llama-bench results measured on {device_id}", str(Path.home()),
                                              "llama-bench results (*.jsonl *.json *.csv);;All files (*)")
        if path:
            self.calibrate_from(device_id, path)

    def calibrate_from(self, device_id: str, path: str) -> BackgroundTask:
        """Runs the bundled model here for the reference rows, so off the GUI thread."""
        from shardscope.engine.devices.calibrate import calibrate
        from shardscope.engine.runs.calibration_reference import measure_here

        task = BackgroundTask(lambda _progress: calibrate(device_id, path, measure_here=measure_here), self)
        task.succeeded.connect(lambda result: self._calibrated(device_id, result))
        task.failed.connect(lambda message: self.show_error(f"Calibrate: {message}"))
        self.statusBar().showMessage(f"calibrating {device_id} from {Path(path).name} …")
        self._calibrate_task = task
        task.start()
        return task

    def _calibrated(self, device_id: str, result) -> None:
        fit, stored = result
        self.statusBar().showMessage(f"{device_id}: compute scale {fit.compute_scale:.3g}, saved to {stored}", 10000)
        self.set_device(device_id)
        self._on_device_chosen()  # re-project with the calibrated device
