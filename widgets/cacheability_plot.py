"""Expert-cache hit rate against cache size, one curve per policy: how cacheable the routing is.

The question it answers is "how much memory buys how much hit rate", so the x axis is
the cache size (MiB) and each policy a curve; the current setting is a vertical line,
and projected device tok/s, when given, is shown on the right axis. Clicking near a
point emits ``size_chosen`` with that size so the window can apply it in one click.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

__all__ = ["CacheabilityPlot", "POLICY_COLORS"]

POLICY_COLORS = {"lru": "#2f6fdb", "lfu": "#3a9d5d", "hot": "#d62728"}
_OTHER_COLOR = "#8d5cc9"


class CacheabilityPlot(pg.PlotWidget):
    size_chosen = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.item = self.getPlotItem()
        self.item.showGrid(x=True, y=True, alpha=0.25)
        self.item.setLabel("bottom", "expert cache", units="MiB")
        self.item.setLabel("left", "expert hit rate", units="%")
        self.item.setYRange(0, 100, padding=0.02)
        self.legend = self.item.addLegend(offset=(8, 8), labelTextColor="#222", brush=pg.mkBrush(255, 255, 255, 200))
        self._current = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#222", width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
                                        label="current", labelOpts={"position": 0.95, "color": "#222"})
        self._current.hide()
        # The marker never sets the axis: alone (before any curve) it would auto-range the
        # x axis to its own value ± 0.4, an axis reading 174.6-175.4 MiB.
        self.item.addItem(self._current, ignoreBounds=True)
        self._size_limit = 100.0
        self._show_empty_range()
        self._points: dict[str, list[tuple[float, float]]] = {}
        self._projected: list[tuple[float, float]] = []
        self._projection_view: pg.ViewBox | None = None
        self.scene().sigMouseClicked.connect(self._clicked)
        self.setMinimumHeight(200)

    def set_curves(self, points: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        """``{policy: [(cache_mib, hit_rate 0..1), ...]}``; replaces what was drawn."""
        for item in list(self.item.listDataItems()):
            self.item.removeItem(item)
        self.legend.clear()
        self._points = {}
        if not any(points.values()):
            self._show_empty_range()
            return
        self.item.enableAutoRange(x=True)
        for policy, pts in points.items():
            pts = sorted((float(x), float(y)) for x, y in pts)
            self._points[policy] = pts
            color = POLICY_COLORS.get(policy, _OTHER_COLOR)
            self.item.plot([x for x, _ in pts], [100 * y for _, y in pts], name=policy,
                           pen=pg.mkPen(color, width=2), symbol="o", symbolSize=7, symbolBrush=color)

    def set_projected(self, points: Sequence[tuple[float, float]], device: str) -> None:
        """Projected tok/s on ``device`` at each cache size, on a right-hand axis."""
        self._projected = sorted((float(x), float(y)) for x, y in points)
        if self._projection_view is None:
            self._projection_view = pg.ViewBox()
            self.item.showAxis("right")
            self.item.scene().addItem(self._projection_view)
            self.item.getAxis("right").linkToView(self._projection_view)
            self._projection_view.setXLink(self.item)
            self.item.vb.sigResized.connect(self._sync_views)
        self._projection_view.clear()
        self.item.getAxis("right").setLabel(f"projected tok/s ({device})")
        self._projection_view.addItem(pg.PlotCurveItem([x for x, _ in self._projected], [y for _, y in self._projected],
                                                        pen=pg.mkPen("#f2a93b", width=2, style=pg.QtCore.Qt.PenStyle.DotLine)))
        self._sync_views()

    def set_size_limit(self, max_mib: float) -> None:
        """The largest cache that makes sense (all of the model's experts): the x axis before data."""
        if max_mib > 0:
            self._size_limit = float(max_mib)
            if not self._points:
                self._show_empty_range()

    def _show_empty_range(self) -> None:
        self.item.setXRange(0, self._size_limit, padding=0.02)

    def set_current(self, cache_mib: float | None) -> None:
        if cache_mib is None:
            self._current.hide()
        else:
            self._current.setValue(float(cache_mib))
            self._current.show()

    def current(self) -> float | None:
        return float(self._current.value()) if self._current.isVisible() else None

    def curves(self) -> dict[str, list[tuple[float, float]]]:
        return {k: list(v) for k, v in self._points.items()}

    def projected(self) -> list[tuple[float, float]]:
        """The projected (cache MiB, tok/s) points drawn on the right axis."""
        return list(self._projected)

    def nearest_size(self, x: float) -> float | None:
        sizes = sorted({p[0] for pts in self._points.values() for p in pts})
        return min(sizes, key=lambda s: abs(s - x)) if sizes else None

    def _clicked(self, event) -> None:
        if not self.item.sceneBoundingRect().contains(event.scenePos()):
            return
        size = self.nearest_size(self.item.vb.mapSceneToView(event.scenePos()).x())
        if size is not None:
            self.size_chosen.emit(size)

    def _sync_views(self) -> None:
        if self._projection_view is not None:
            self._projection_view.setGeometry(self.item.vb.sceneBoundingRect())
            self._projection_view.linkedViewChanged(self.item.vb, self._projection_view.XAxis)
