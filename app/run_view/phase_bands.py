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
MAX_BANDS = 200  # history; only those in view are in the scene


class _Band:
    __slots__ = ("name", "start", "end", "regions")

    def __init__(self, name: str, start: float) -> None:
        self.name, self.start, self.end = name, start, start
        self.regions: list = []  # (plot item, region) while in the scene, else empty


class PhaseBands:
    """Spans as plain (name, start, end) history; in the scene only while they overlap the
    chart's view (the chart says when its view moves), like its change markers: a repaint
    costs what is on screen, not how many rounds the session has had."""

    def __init__(self, chart) -> None:
        self.chart = chart
        self._bands: deque[_Band] = deque()
        self._open: _Band | None = None  # the growing band
        self._keyed: dict[str, pg.PlotDataItem] = {}  # kind → its legend swatch, added once
        self._view = (-float("inf"), float("inf"))
        chart.on_view(self._on_view)

    def phase(self, name: str, t: float) -> None:
        """Phase ``name`` began at session time ``t``."""
        self.extend(t)
        self._open = None
        if name not in SHADES:
            return
        band = _Band(name, t)
        self._key(name, self._color(name))
        self._bands.append(band)
        self._open = band
        self._place(band)
        while len(self._bands) > MAX_BANDS:
            self._take_out(self._bands.popleft())

    @staticmethod
    def _color(name: str) -> QColor:
        color = QColor(SHADES[name])
        color.setAlpha(60)
        return color

    def _place(self, band: _Band) -> None:
        """In the scene iff it overlaps the view."""
        x0, x1 = self._view
        inside = band.end >= x0 and band.start <= x1
        if inside and not band.regions:
            brush = pg.mkBrush(self._color(band.name))
            for key in PLOTS:
                item = self.chart.plot_item(key)
                region = pg.LinearRegionItem(values=(band.start, band.end), movable=False, brush=brush,
                                             pen=pg.mkPen(None))
                region.setZValue(-10)
                region.setToolTip(f"{band.name} phase")
                item.addItem(region, ignoreBounds=True)
                band.regions.append((item, region))
        elif not inside and band.regions:
            self._take_out(band)

    @staticmethod
    def _take_out(band: _Band) -> None:
        for item, region in band.regions:
            item.removeItem(region)
        band.regions.clear()

    def _on_view(self, x0: float, x1: float) -> None:
        self._view = (x0, x1)
        for band in self._bands:
            self._place(band)

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
        band = self._open
        if band is None:
            return
        band.end = max(band.start, t)
        for _, region in band.regions:
            region.setRegion((band.start, band.end))

    def end(self, t: float) -> None:
        self.phase("", t)

    @property
    def open_phase(self) -> str | None:
        return self._open.name if self._open is not None else None

    def spans(self) -> list[tuple[str, float, float]]:
        """(phase, start, end) of each span held, oldest first (tests, the export)."""
        return [(b.name, b.start, b.end) for b in self._bands]

    def spans_in_scene(self) -> int:
        """How many spans are drawn now (tests)."""
        return sum(1 for b in self._bands if b.regions)
