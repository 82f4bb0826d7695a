"""Expert-cache hit rate against cache size, one curve per policy: how cacheable the routing is.

The question it answers is "how much memory buys how much hit rate", so the x axis is
the cache size (MiB) and each policy a curve; the current setting is a vertical line,
and projected device tok/s, when given, is shown on the right axis. Clicking near a
point emits ``size_chosen`` with that size so the window can apply it in one click.

A curve named ``optimal`` is the limit (Belady's MIN over the same routing, which knows
the future): drawn dashed, with the band between it and the current policy's curve shaded
and the gap in points written at the current size (or where it is widest), so what a
better policy could still win is visible at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

__all__ = ["CacheabilityPlot", "POLICY_COLORS"]

POLICY_COLORS = {"auto": "#e07b00", "decay": "#8d5cc9", "lru": "#2f6fdb", "lfu": "#3a9d5d", "hot": "#d62728", "optimal": "#222222"}
_OTHER_COLOR = "#b07c2a"
PROJECTED_COLOR = "#f2a93b"  # the dotted orange projected tok/s curve
LIMIT = "optimal"  # the curve drawn as the limit (engine.experts.replay.OPTIMAL)


def _at(points: dict[float, float], x: float) -> float:
    """The curve's value at ``x``: its point there, else read off the line between its neighbours."""
    if x in points:
        return points[x]
    xs = sorted(points)
    lo = max((p for p in xs if p <= x), default=xs[0])
    hi = min((p for p in xs if p >= x), default=xs[-1])
    if hi == lo:
        return points[lo]
    return points[lo] + (points[hi] - points[lo]) * (x - lo) / (hi - lo)


class CacheabilityPlot(pg.PlotWidget):
    size_chosen = Signal(float)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.item = self.getPlotItem()
        self.item.showGrid(x=True, y=True, alpha=0.25)
        self.item.setLabel("bottom", "expert cache", units="MiB")
        self.item.setLabel("left", "expert hit rate", units="%")
        for name in ("bottom", "left"):
            self.item.getAxis(name).enableAutoSIPrefix(False)  # "kMiB" at 1,000 MiB and up only confused
        self.item.setYRange(0, 100, padding=0.02)
        # bottom right: hit-rate curves rise from the bottom left, so that corner stays empty
        self.legend = self.item.addLegend(offset=(-8, -40), labelTextColor="#222", brush=pg.mkBrush(255, 255, 255, 200))
        self._current = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#222", width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
                                        label="current", labelOpts={"position": 0.95, "color": "#222"})
        self._current.hide()
        # The marker never sets the axis: alone (before any curve) it would auto-range the
        # x axis to its own value ± 0.4, an axis reading 174.6-175.4 MiB.
        self.item.addItem(self._current, ignoreBounds=True)
        self._size_limit = 100.0
        self._show_empty_range()
        self._points: dict[str, list[tuple[float, float]]] = {}
        self._lines: dict[str, pg.PlotDataItem] = {}
        self._policy: str | None = None  # the policy in use: its gap to the limit is shaded
        self._gap_band: pg.FillBetweenItem | None = None
        # Just right of the size it names; over the curves on a pale fill, never under them.
        self._gap_text = pg.TextItem(color="#222", anchor=(-0.03, 1), fill=pg.mkBrush(255, 255, 255, 210))
        self._gap_text.setZValue(20)
        self._gap_text.hide()
        self.item.addItem(self._gap_text, ignoreBounds=True)
        self._projected: list[tuple[float, float]] = []
        self._projection_view: pg.ViewBox | None = None
        self._projected_entry: pg.PlotCurveItem | None = None
        self.scene().sigMouseClicked.connect(self._clicked)
        self.setMinimumHeight(200)

    def set_curves(self, points: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        """``{policy: [(cache_mib, hit_rate 0..1), ...]}``; replaces what was drawn."""
        for item in list(self.item.listDataItems()):
            self.item.removeItem(item)
        self.legend.clear()
        if self._projected_entry is not None:  # clear() dropped its name too: keep it while it is drawn
            self.legend.addItem(self._projected_entry, "projected tok/s (right axis)")
        self._points, self._lines = {}, {}
        if not any(points.values()):
            self._show_empty_range()
            self._show_gap()
            return
        self.item.enableAutoRange(x=True)
        for policy, pts in points.items():
            pts = sorted((float(x), float(y)) for x, y in pts if math.isfinite(y))
            self._points[policy] = pts
            color = POLICY_COLORS.get(policy, _OTHER_COLOR)
            if policy == LIMIT:
                line = self.item.plot([x for x, _ in pts], [100 * y for _, y in pts], name="optimal (limit)",
                                      pen=pg.mkPen(color, width=2, style=pg.QtCore.Qt.PenStyle.DashLine))
            else:
                line = self.item.plot([x for x, _ in pts], [100 * y for _, y in pts], name=policy,
                                      pen=pg.mkPen(color, width=2), symbol="o", symbolSize=7, symbolBrush=color)
            self._lines[policy] = line
        self._show_gap()

    def set_policy(self, policy: str | None) -> None:
        """The policy in use: the band between its curve and the limit is shaded."""
        self._policy = policy
        self._show_gap()

    def gap(self) -> tuple[float, float] | None:
        """(cache MiB, points) where the gap to the limit is written: at the current size (read
        off both curves, between their points where it falls between them), else where the gap
        is widest; None without both curves."""
        ours, limit = dict(self._points.get(self._policy or "", [])), dict(self._points.get(LIMIT, []))
        shared = sorted(set(ours) & set(limit))
        if not shared:
            return None
        current = self.current()
        if current is not None and shared[0] <= current <= shared[-1]:
            return current, 100 * (_at(limit, current) - _at(ours, current))
        at = min(shared, key=lambda x: abs(x - current)) if current is not None else \
            max(shared, key=lambda x: limit[x] - ours[x])
        return at, 100 * (limit[at] - ours[at])

    def _show_gap(self) -> None:
        if self._gap_band is not None:
            self.item.removeItem(self._gap_band)
            self._gap_band = None
        ours, limit = self._lines.get(self._policy or ""), self._lines.get(LIMIT)
        where = self.gap()
        if ours is None or limit is None or where is None:
            self._gap_text.hide()
            return
        self._gap_band = pg.FillBetweenItem(ours, limit, brush=pg.mkBrush(120, 120, 120, 45))
        self.item.addItem(self._gap_band)
        at, points = where
        y = 100 * _at(dict(self._points[LIMIT]), at)
        # three short lines: the plot is often a narrow column of the window
        self._gap_text.setText(f"{self._policy} {points:.1f} points\nbelow the optimum\nat {at:,.0f} MiB")
        # Inside the plot whatever its size: near the top the lines went past 100 % and were cut
        # (hang them below the line); beside the line on the side with room, else from the left edge.
        vb = self.item.getViewBox()
        (x_low, x_high), _ = vb.viewRange()
        per_px = vb.viewPixelSize()[0] or 1.0
        wide = self._gap_text.boundingRect().width() * 1.06 * per_px  # in cache MiB
        if x_high - at >= wide:
            x, side = at, -0.03
        elif at - x_low >= wide:
            x, side = at, 1.03
        else:
            x, side = x_low + 4 * per_px, 0.0
        if y > 70:
            self._gap_text.setAnchor((side, 0))
            self._gap_text.setPos(x, y - 4)
        else:
            self._gap_text.setAnchor((side, 1))
            self._gap_text.setPos(x, y + 6)
        self._gap_text.show()

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
        curve = pg.PlotCurveItem([x for x, _ in self._projected], [y for _, y in self._projected],
                                 pen=pg.mkPen(PROJECTED_COLOR, width=2, style=pg.QtCore.Qt.PenStyle.DotLine))
        self._projection_view.addItem(curve)
        # It lives in the right axis' own view, which the legend does not see: named by hand.
        if self._projected_entry is not None:
            self.legend.removeItem(self._projected_entry)
        self._projected_entry = curve
        self.legend.addItem(curve, "projected tok/s (right axis)")
        self._sync_views()

    def clear_all(self) -> None:
        """Nothing drawn: no curves, no projection, no note (another model was opened)."""
        self._projected = []
        if self._projection_view is not None:
            self._projection_view.clear()
        if self._projected_entry is not None:
            self.legend.removeItem(self._projected_entry)
            self._projected_entry = None
        self.set_curves({})

    def legend_names(self) -> list[str]:
        """The names in the legend, in order (tests)."""
        return [label.text for _sample, label in self.legend.items]

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
        self._show_gap()

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
