"""A combo box of the built-in device presets, plus "none".

The window, the sweep dialog and the auto-tune dialog all ask "project onto which
device?", and must offer the same list in the same words: the preset's own name,
with its id as the item data so code and profiles speak in ids
(``iphone-16-pro``) while people read names ("iPhone 16 Pro (USB-C SSD)").

The list is read once per combo from ``profiles/devices``; a broken preset file
is not fatal here (the window would be unusable over a projection detail): the
combo offers "none" and its tooltip carries the engine's message naming the file.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QWidget

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import Device, builtin_devices

NONE_TEXT = "none"


class DeviceCombo(QComboBox):
    def __init__(self, parent: QWidget | None = None, *, allow_none: bool = True) -> None:
        super().__init__(parent)
        self.devices: dict[str, Device] = {}
        self.load_error: str | None = None
        try:
            self.devices = builtin_devices()
        except ShardscopeError as exc:
            self.load_error = str(exc)
        if allow_none or not self.devices:
            self.addItem(NONE_TEXT, None)
            self.setItemData(0, "no projection", Qt.ItemDataRole.ToolTipRole)
        for device in self.devices.values():
            self.addItem(device.name, device.id)
            self.setItemData(self.count() - 1, f"{device.id}: {device.storage}".rstrip(": "),
                             Qt.ItemDataRole.ToolTipRole)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(14)
        self.setToolTip(self.load_error or "Device the runs are projected onto (roofline: its SSD, "
                                           "DRAM and performance cores)")

    def device_id(self) -> str | None:
        """The chosen preset's id, or None for "none"."""
        return self.currentData()

    def device(self) -> Device | None:
        chosen = self.device_id()
        return self.devices.get(chosen) if chosen else None

    def set_device_id(self, device_id: str | None) -> bool:
        """Select a preset by id (None: "none"); False, selection unchanged, for an unknown id."""
        index = self.findData(device_id) if device_id else self.findText(NONE_TEXT)
        if index < 0:
            return False
        self.setCurrentIndex(index)
        return True
