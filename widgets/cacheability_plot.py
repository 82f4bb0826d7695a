"""Expert-cache hit rate against cache size, one curve per policy: how cacheable the routing is.

The question it answers is "how much memory buys how much hit rate", so the x axis is
the cache size (MiB) and each policy a curve; the current setting is a vertical line,
and projected device tok/s, when given, is shown on the right axis. Clicking near a
point emits ``size_chosen`` with that size so the window can apply it in one click.

A curve named ``optimal`` is the limit (Belady's MIN over the same routing, which knows
the future): drawn dashed, with the band between it and the current policy's curve shaded
and the gap in points written at the current size (or where it is widest), so what a
better policy could still win is visible at a glance.

No text is drawn over the curves: the legend is a label under the plot (``legend_label``,
for the panel to place; it wraps in a narrow column, where a legend inside the plot took half
its height or covered the curves), the size in use is named on the size axis, and the gap
note is the plot's title, above the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QLabel, QWidget

from shardscope.widgets.live_chart import elide_words, title_never_widens

__all__ = ["CacheabilityPlot", "POLICY_COLORS"]

POLICY_COLORS = {"auto": "#e07b00", "decay": "#8d5cc9", "lru": "#2f6fdb", "lfu": "#3a9d5d", "hot": "#d62728",
                 "optimal": "#222222"}
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
        self.item.setLabel("bottom", "expert cache (MiB)")
        self.item.setLabel("left", "expert hit rate", units="%")
        for name in ("bottom", "left"):
            self.item.getAxis(name).enableAutoSIPrefix(False)  # "kMiB" at 1,000 MiB and up only confused
        self.item.setYRange(0, 100, padding=0.02)
        # top left, in the band above 100 % that _fit_band keeps free of data
        self.legend = self.item.addLegend(offset=(4, 1), colCount=2, labelTextColor="#222", labelTextSize="8pt",
                                          horSpacing=10, brush=pg.mkBrush(255, 255, 255, 200))
        self.legend.layout.setContentsMargins(3, 0, 3, 0)
        self.legend.hide()  # its entries are kept (legend_names); legend_label shows them, off the plot
        self.legend_label = QLabel()
        self.legend_label.setWordWrap(True)
        self.legend_label.setTextFormat(pg.QtCore.Qt.TextFormat.RichText)
        current_pen = pg.mkPen("#222", width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
        self._current = pg.InfiniteLine(angle=90, movable=False, pen=current_pen)
        self.item.getAxis("left").setTicks([[(v, f"{v}") for v in range(0, 101, 20)]])
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
        self._gap_note = ""  # "decay 25.0 points below the optimum at 190 MiB", the plot's title
        self._projected: list[tuple[float, float]] = []
        self._projection_view: pg.ViewBox | None = None
        self._projected_entry: pg.PlotCurveItem | None = None
        self.scene().sigMouseClicked.connect(self._clicked)
        self.item.vb.sigResized.connect(self._fit_band)
        self.setMinimumHeight(150)  # the expert column's map, legend and notes share 800 px
        self._fit_band()

    def set_curves(self, points: Mapping[str, Sequence[tuple[float, float]]]) -> None:
        """``{policy: [(cache_mib, hit_rate 0..1), ...]}``; replaces what was drawn."""
        for item in list(self.item.listDataItems()):
            self.item.removeItem(item)
        self.legend.clear()

        self._points, self._lines = {}, {}
        if not any(points.values()):
            self._show_empty_range()
            self._show_gap()
            self._fit_band()
            self._show_legend_label()
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
        self._fit_band()
        self._show_legend_label()

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
            self._set_note("")
            return
        self._gap_band = pg.FillBetweenItem(ours, limit, brush=pg.mkBrush(120, 120, 120, 45))
        self.item.addItem(self._gap_band)
        at, points = where
        self._set_note(f"{self._policy} {points:.1f} points below the optimum at {at:,.0f} MiB")

    def _set_note(self, text: str) -> None:
        """The gap note, as the plot's title: above the data, never over a curve; on two lines
        (the plot is often a narrow column), each cut at a word to the plot's width, whole on hover."""
        self._gap_note = text
        label = self.item.titleLabel
        if not getattr(label, "never_widens", False):
            title_never_widens(label)  # a long note made the plot wider than its column: cut, not widened
            label.never_widens = True
        font = QFont(self.font())
        font.setPointSizeF(8.0)
        width = int(self.item.vb.width()) if self.item.vb.width() > 0 else 10_000
        lines = [elide_words(QFontMetrics(font), line, width) for line in text.replace(" at ", "\n at ").split("\n")]
        self.item.setTitle("<br>".join(line.strip() for line in lines) if text else None, size="8pt", color="#222",
                           justify="left")
        label.setToolTip(text)

    def _show_legend_label(self) -> None:
        parts = []
        for policy in self._points:
            color = POLICY_COLORS.get(policy, _OTHER_COLOR)
            mark = "\u2504\u2504" if policy == LIMIT else "\u25cf"
            name = "optimal (limit)" if policy == LIMIT else policy
            parts.append(f'<span style="color:{color}">{mark}</span>&nbsp;{name.replace(" ", "&nbsp;")}')
        if self._projected:
            parts.append('<span '
                         f'style="color:{PROJECTED_COLOR}">\u2508\u2508</span>&nbsp;projected&nbsp;tok/s&nbsp;(right)')
        self.legend_label.setText(" &nbsp; ".join(parts))
        self.legend_label.setVisible(bool(parts))
        self._fit_legend_label()

    def _fit_legend_label(self) -> None:
        """The label keeps the height of its wrapped lines: squeezed below it, it printed over the
        plot's size axis (a wrapped label's height is not its size hint)."""
        width, label = self.width(), self.__dict__.get("legend_label")
        if label is not None and width > 0 and label.text():
            label.setMinimumHeight(label.heightForWidth(width))

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit_legend_label()

    def gap_note(self) -> str:
        return self._gap_note

    def _fit_band(self, *_args) -> None:
        if self._gap_note and _args:  # resized: the note is cut to the new width
            self._set_note(self._gap_note)
        self._fit_y()

    def _fit_y(self) -> None:
        """The Y range: 0 to 100 % and a band above it tall enough for the legend, so no curve
        point (a hit rate is at most 100 %) ever lies under it; the right axis' view likewise."""
        legend, vb = self.legend, self.item.vb
        for columns in (3, 2, 1):  # as many columns as fit the plot's width
            legend.setColumnCount(columns)
            legend.updateSize()
            if legend.boundingRect().width() <= vb.width() - 8 or columns == 1:
                break
        height = vb.height()
        band = legend.boundingRect().height() + 6 if legend.items and legend.isVisible() else 0
        scale = height / (height - band) if height > 1.5 * band and band else (3.0 if band else 1.02)
        top = 100 * max(1.02, scale)
        self.item.setYRange(0, top, padding=0)
        if self._projection_view is not None and self._projected:
            most = max(y for _x, y in self._projected) or 1.0
            self._projection_view.setYRange(0, 1.05 * most * top / 100, padding=0)

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
        # Named by its axis' label (the dotted line is the only curve on the right axis): a legend
        # entry made the legend's band taller than a narrow column's plot could give.
        self._projected_entry = curve
        self._sync_views()
        self._show_legend_label()
        self._fit_band()

    def clear_all(self) -> None:
        """Nothing drawn: no curves, no projection, no note (another model was opened)."""
        self._projected = []
        if self._projection_view is not None:
            self._projection_view.clear()
        self._projected_entry = None
        if self._projection_view is not None:
            self.item.getAxis("right").setLabel("")
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
        """The cache size in use: a dashed line, named on the size axis (not by a label over the curves)."""
        if cache_mib is None:
            self._current.hide()
        else:
            self._current.setValue(float(cache_mib))
            self._current.show()
        self.item.setLabel("bottom", "expert cache (MiB)" + (f", {cache_mib:,.0f} in use" if cache_mib else ""))
        self._show_gap()
        self._fit_band()

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
