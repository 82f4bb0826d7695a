"""The status bar's progress for a long phase: a bar and one line of figures.

"prompt 56 % · layer 9 of 16 · 1.2 GB read · 700 MB/s · about 0:40 left": the same
words as the CLI's progress line (engine/measure/progress_words.py). Hidden between
phases; a phase whose extent is unknown shows a busy bar, not a made-up percentage.
"""

from __future__ import annotations

import math

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from shardscope.engine.measure.phase_progress import Progress
from shardscope.engine.measure.progress_words import progress_text

STEPS = 1000


class PhaseProgressBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel("", self)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, STEPS)
        self.bar.setTextVisible(False)
        self.bar.setFixedWidth(160)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        self.shown: Progress | None = None
        self.hide()

    def show_progress(self, p: Progress | None) -> None:
        """Per sample (10 Hz): a label text and a bar value, no relayout unless it appears."""
        self.shown = p
        if p is None:
            if self.isVisible():
                self.hide()
            return
        if math.isfinite(p.fraction):
            if self.bar.maximum() != STEPS:
                self.bar.setRange(0, STEPS)
            self.bar.setValue(int(round(p.fraction * STEPS)))
        elif self.bar.maximum() != 0:
            self.bar.setRange(0, 0)  # busy: nothing says how far
        self.label.setText(progress_text(p))
        if not self.isVisible():
            self.show()

    def percent(self) -> float:
        """What the bar shows now, in % (NaN while busy or hidden)."""
        if not self.isVisible() or self.bar.maximum() == 0:
            return math.nan
        return 100.0 * self.bar.value() / STEPS
