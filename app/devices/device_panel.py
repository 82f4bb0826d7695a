"""The "Project onto device" box: which device rounds are projected onto, and the projection.

Under the device list, the device's SSD model — sequential bandwidth, latency per request,
queue depth, each marked when unverified — because the projection's SSD term (and whether
a run is bandwidth- or latency-bound) comes from exactly these three numbers.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGroupBox, QLabel, QVBoxLayout, QWidget

from shardscope.app.devices.device_combo import DeviceCombo
from shardscope.app.devices.round_projection import RoundProjection, project_round
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import get_device
from shardscope.engine.devices.run_projection import fill_device_columns
from shardscope.engine.stream.streaming_run import RunSummary


class DevicePanel(QGroupBox):
    chosen = Signal()  # a user's pick, or set_device()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Project onto device", parent)
        self.combo = DeviceCombo()
        self.combo.activated.connect(lambda _i: self.chosen.emit())
        self.ssd_label = QLabel("", self)
        self.ssd_label.setWordWrap(True)
        self.chosen.connect(self._show_ssd)
        layout = QVBoxLayout(self)
        layout.addWidget(self.combo)
        layout.addWidget(self.ssd_label)
        self._show_ssd()

    def _show_ssd(self) -> None:
        device_id = self.device_id()
        try:
            device = get_device(device_id) if device_id else None
        except ShardscopeError:
            device = None
        self.ssd_label.setText(ssd_model_text(device) if device is not None else "")
        self.ssd_label.setToolTip("\n".join(f"{key}: {device.sources.get(key, '')}" for key in
                                             ("ssd_read_mb_s", "ssd_latency_us", "ssd_queue_depth"))
                                  if device is not None else "")

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


def ssd_model_text(device) -> str:
    """"SSD 860 MB/s*, 150 µs/request*, queue depth 32* (* unverified)"."""
    def mark(key: str) -> str:
        return "*" if not device.is_verified(key) else ""
    text = (f"SSD {device.ssd_read_mb_s:g} MB/s{mark('ssd_read_mb_s')} sequential, "
            f"{device.ssd_latency_us:g} µs/request{mark('ssd_latency_us')}, "
            f"queue depth {device.ssd_queue_depth}{mark('ssd_queue_depth')}")
    return text + (" (* unverified)" if "*" in text else "")
