"""The status bar's progress for a long phase: a bar and one line of figures.

"prompt 56 % · layer 9 of 16 · 1.2 GB read · 700 MB/s · about 0:40 left": the same
words as the CLI's progress line (engine/measure/progress_words.py). Hidden between
phases; a phase whose extent is unknown shows a busy bar, not a made-up percentage.

It appears once a phase has lasted LONG_PHASE_S. A small MoE runs four rounds a second,
each with a prompt pass of a few milliseconds: showing the bar for each made the status
bar appear, lay out and repaint (QProgressBar repaints at once, not on the next frame)
ten times a second, a tenth of the GUI thread, for a bar nobody could read.
"""

from __future__ import annotations

import math

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from shardscope.engine.measure.phase_progress import Progress
from shardscope.engine.measure.progress_words import progress_text

STEPS = 1000
LONG_PHASE_S = 1.0  # a phase shorter than this passes without the bar


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
        """Per sample (10 Hz): a label text and a bar value (no paint while hidden), no
        relayout unless it appears."""
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
        if not self.isVisible() and p.elapsed_s >= LONG_PHASE_S:
            self.show()

    def percent(self) -> float:
        """What the bar holds for the current phase, in % (NaN while busy or between phases);
        shown once the phase has lasted LONG_PHASE_S."""
        if self.shown is None or self.bar.maximum() == 0:
            return math.nan
        return 100.0 * self.bar.value() / STEPS
