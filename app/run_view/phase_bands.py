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

from collections import deque

import pyqtgraph as pg
from PySide6.QtGui import QColor

from shardscope.app.run_view.charts import PLOTS

SHADES = {"loading": "#f2c14e", "prompt": "#7fb3d5"}  # translucent: the curves stay readable
MAX_BANDS = 40  # like the chart's markers: a long session keeps the recent ones


class PhaseBands:
    def __init__(self, chart) -> None:
        self.chart = chart
        self._bands: deque = deque()
        self._open: list | None = None  # the growing band's regions, one per plot
        self._open_name: str | None = None
        self._keyed: dict[str, pg.PlotDataItem] = {}  # kind → its legend swatch, added once

    def phase(self, name: str, t: float) -> None:
        """Phase ``name`` began at session time ``t``."""
        self.extend(t)
        self._open = None
        self._open_name = None
        if name not in SHADES:
            return
        color = QColor(SHADES[name])
        color.setAlpha(60)
        regions = []
        for key in PLOTS:
            item = self.chart.plot_item(key)
            region = pg.LinearRegionItem(values=(t, t), movable=False, brush=pg.mkBrush(color),
                                         pen=pg.mkPen(None))
            region.setZValue(-10)
            region.setToolTip(f"{name} phase")
            item.addItem(region, ignoreBounds=True)
            regions.append((item, region))
        self._key(name, color)
        self._bands.append((name, regions))
        self._open, self._open_name = regions, name
        while len(self._bands) > MAX_BANDS:
            for item, region in self._bands.popleft()[1]:
                item.removeItem(region)

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
        if self._open is None:
            return
        for _, region in self._open:
            start = region.getRegion()[0]
            region.setRegion((start, max(start, t)))

    def end(self, t: float) -> None:
        self.phase("", t)

    @property
    def open_phase(self) -> str | None:
        return self._open_name

    def spans(self) -> list[tuple[str, float, float]]:
        """(phase, start, end) of each span shown, oldest first (tests, the export)."""
        return [(name, *regions[0][1].getRegion()) for name, regions in self._bands]
