"""The Profile box: built-in and user profiles (a ProfileStore) to pick from, and Save."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from shardscope.app.profiles.profile_store import ProfileStore
from shardscope.engine.knobs.profile_file import Profile


class ProfilePanel(QGroupBox):
    chosen = Signal(object)  # the Profile a user picked
    save_requested = Signal()

    def __init__(self, store: ProfileStore, save_tip: str, parent: QWidget | None = None) -> None:
        super().__init__("Profile", parent)
        self.store = store
        column = QVBoxLayout(self)
        layout = QHBoxLayout()
        column.addLayout(layout)
        # What the profile changes on the open model (tuned for another, a value it cannot run): before Run.
        self.fit_label = QLabel("")
        self.fit_label.setWordWrap(True)
        self.fit_label.setStyleSheet("color: #a04000")
        self.fit_label.hide()
        column.addWidget(self.fit_label)
        self.combo = QComboBox()
        self.combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.combo.setMinimumContentsLength(12)
        self.combo.activated.connect(self._on_activated)
        save_button = QPushButton("Save…")
        save_button.setToolTip(save_tip)
        save_button.clicked.connect(self.save_requested)
        layout.addWidget(self.combo, 1)
        layout.addWidget(save_button)

    def refresh(self, current: Profile | None) -> list[str]:
        """Re-read the profiles; the one-line errors of files left out."""
        profiles, errors = self.store.refresh()
        self.combo.clear()
        for p in profiles:
            self.combo.addItem(f"{p.name}{' (built-in)' if p.builtin else ''}", p.name)
            self.combo.setItemData(self.combo.count() - 1, p.description or str(p.path), Qt.ItemDataRole.ToolTipRole)
        if current is not None:
            self.select(current)
        return errors

    def show_fit(self, text: str) -> None:
        """The line under the profile saying what applying it to the open model changed ("" hides it)."""
        self.fit_label.setText(text)
        self.fit_label.setToolTip(text)
        self.fit_label.setVisible(bool(text))

    def fit(self) -> str:
        return self.fit_label.text() if not self.fit_label.isHidden() else ""

    def select(self, profile: Profile) -> None:
        for i in range(self.combo.count()):
            text = self.combo.itemText(i)
            if self.combo.itemData(i) == profile.name and text.endswith("(built-in)") == profile.builtin:
                self.combo.setCurrentIndex(i)
                return

    def names(self) -> list[str]:
        return [self.combo.itemData(i) for i in range(self.combo.count())]

    def _on_activated(self, index: int) -> None:
        builtin = self.combo.itemText(index).endswith("(built-in)")
        name = self.combo.itemData(index)
        profile = next((p for p in self.store.profiles if p.name == name and p.builtin == builtin), None)
        if profile is not None:
            self.chosen.emit(profile)
