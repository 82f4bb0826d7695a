"""The left column: model, profile, device, the knob controls and Run / Stop, scrollable."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QPushButton, QScrollArea, QVBoxLayout, QWidget

from shardscope.app.devices.device_panel import DevicePanel
from shardscope.app.files.model_panel import ModelPanel
from shardscope.app.profiles.profile_panel import ProfilePanel
from shardscope.app.profiles.profile_store import ProfileStore
from shardscope.app.profiles.settings_binding import SettingsPanel


class ControlColumn(QScrollArea):
    def __init__(self, store: ProfileStore, synth_tip: str, save_tip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(6, 6, 6, 6)
        self.model_panel = ModelPanel(synth_tip)
        self.profile_panel = ProfilePanel(store, save_tip)
        self.device_panel = DevicePanel()
        settings_box = QGroupBox("Settings (live while running)")
        self.controls = SettingsPanel()
        QVBoxLayout(settings_box).addWidget(self.controls)
        for box in (self.model_panel, self.profile_panel, self.device_panel, settings_box):
            layout.addWidget(box)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run  (Ctrl+R)")
        self.stop_button = QPushButton("Stop  (Esc)")
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        layout.addLayout(buttons)
        layout.addStretch(1)
        self.setWidget(panel)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(290)  # four columns in 1280 px (issue 48)
        self._check_gpu()

    def _check_gpu(self) -> None:
        try:
            from shardscope.engine.stream.llama_session import gpu_offload_supported

            supported = gpu_offload_supported()
        except Exception:  # a broken llama.cpp install shows up properly at Run
            supported = False
        # With a GPU build the slider is live for dense and MoE files alike: an MoE run keeps its
        # routed experts in host memory and streams them, the layers' dense tensors go to the GPU
        # (engine/stream/gpu_split.py). Without one it says why rather than moving nothing.
        if not supported:
            self.controls.set_disabled_reason("n_gpu_layers", "no GPU offload", (
                "Disabled: this llama.cpp build has no GPU offload (CPU only): every layer and every expert "
                "computes on the CPU. A profile's n_gpu_layers still runs here, as 0 (the CSV keeps what was asked)."))
