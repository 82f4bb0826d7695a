"""The "Project onto device" box: which device rounds are projected onto, and the projection."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGroupBox, QVBoxLayout, QWidget

from shardscope.app.device_combo import DeviceCombo
from shardscope.app.round_projection import RoundProjection, project_round
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.run_projection import fill_device_columns
from shardscope.engine.stream.streaming_run import RunSummary


class DevicePanel(QGroupBox):
    chosen = Signal()  # a user's pick, or set_device()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Project onto device", parent)
        self.combo = DeviceCombo()
        self.combo.activated.connect(lambda _i: self.chosen.emit())
        QVBoxLayout(self).addWidget(self.combo)

    def device_id(self) -> str | None:
        """The device rounds are projected onto (None: no projection)."""
        return self.combo.device_id()

    def set_device(self, device_id: str | None) -> None:
        """Choose the device (an unknown id chooses none)."""
        if not self.combo.set_device_id(device_id):
            self.combo.set_device_id(None)
        self.chosen.emit()

    def project(self, summary: RunSummary | None) -> RoundProjection | None:
        """Fill the summary's device columns for the chosen device (so the CSV has them)."""
        device_id = self.device_id()
        if not device_id or summary is None:
            return None
        try:
            projection = project_round(summary, device_id)
        except ShardscopeError:
            return None  # a round stopped before its second token has no tok/s to project
        fill_device_columns(summary, device_id, projection.projection)
        return projection
