"""The long phases (the load, the prompt pass) as named, shaded spans on every chart.

Why spans and not change markers: a phase has a length — a user looking at a chart of
a 30 GB model sees the 45 s of the load and the minute of the prompt pass as what they
are, and the marker count keeps meaning "settings changed". A span opens when its
phase begins, grows with each sample and closes when the next phase begins.

Each kind is named once, in the top chart's legend (a swatch of its shade), not on
each span: every round has its prompt pass, and after a few rounds per-span labels
overprinted each other ("loadinprompt prompt prompt"). A span's own name is on hover.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor

from shardscope.app.run_view.charts import PLOTS

SHADES = {"loading": "#f2c14e", "prompt": "#7fb3d5"}  # translucent: the curves stay readable


class PhaseBands:
    """The chart holds the spans (history; in the scene only while in view, drawn with Qt's
    own items: widgets/time_marks.py); this names their kinds and says when each begins."""

    def __init__(self, chart) -> None:
        self.chart = chart
        self._open_name: str | None = None
        self._keyed: dict[str, pg.PlotDataItem] = {}  # kind → its legend swatch, added once

    def phase(self, name: str, t: float) -> None:
        """Phase ``name`` began at session time ``t``."""
        self.extend(t)
        self._open_name = None
        if name not in SHADES:
            return
        color = QColor(SHADES[name])
        color.setAlpha(60)
        self._key(name, color)
        self.chart.add_span(t, color, name)
        self._open_name = name

    def _key(self, name: str, color: QColor) -> None:
        """The kind's name once, in the top chart's legend, with a swatch of its shade."""
        legend = self.chart.plot_item(PLOTS[0]).legend
        if name in self._keyed or legend is None:
            return
        swatch = pg.PlotDataItem(pen=pg.mkPen(None), fillLevel=0, brush=pg.mkBrush(color))
        legend.addItem(swatch, name)
        self._keyed[name] = swatch

    def legend_names(self) -> list[str]:
        """The phase kinds named in the legend, in the order they first appeared (tests)."""
        return list(self._keyed)

    def extend(self, t: float) -> None:
        """A sample at ``t``: the open span reaches it."""
        if self._open_name is not None:
            self.chart.extend_span(t)

    def end(self, t: float) -> None:
        self.phase("", t)

    @property
    def open_phase(self) -> str | None:
        return self._open_name

    def spans(self) -> list[tuple[str, float, float]]:
        """(phase, start, end) of each span held, oldest first (tests, the export)."""
        return self.chart.marks.spans()

    def spans_in_scene(self) -> int:
        """How many spans are drawn now (tests)."""
        return self.chart.marks.spans_in_scene()
