"""Change markers and shaded spans on a strip chart's time axis: kept as history, drawn only
while in view, with Qt's own items.

Why not pyqtgraph's InfiniteLine and LinearRegionItem: both compute their bounding rects
in Python on every repaint, and a region is two such lines. A profiled 2.5-minute MoE
session (docs/decisions.md) spent a quarter of its GUI thread there, holding the GIL the
decode thread's expert callbacks wait for, and a session added a span every round and a
marker every knob change. Here a mark is plain data until it scrolls into view; then it
is one QGraphicsLineItem or QGraphicsRectItem per plot (bounding rect and paint in C++),
stretched to the plot's current Y range at each sync, and taken out again once it
scrolls off. A marker's label is drawn once, on the top plot, only where it has room.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPen
from PySide6.QtWidgets import QGraphicsLineItem, QGraphicsRectItem

__all__ = ["TimeMarks"]

_LABEL_ALPHA = 200
# A span narrower than this on screen is not drawn (it stays in the history). A small MoE
# runs four rounds a second, each with a prompt pass of a few milliseconds: the 60 s view
# held 200 hairline spans, three scene items each, that shaded the plots grey and took most
# of a chart repaint, showing no phase anyone could see.
MIN_SPAN_PX = 2.0


@dataclass
class _Mark:
    t0: float
    t1: float  # == t0 for a marker
    text: str
    color: QColor | None = None  # a span's fill; None for a marker
    width_px: float = 0.0  # a marker label's width on screen, measured once
    items: list = field(default_factory=list)  # (plot item, graphics item) while in the scene
    label: pg.TextItem | None = None


class TimeMarks:
    def __init__(self, plots, fg: QColor, bg: QColor, font_metrics: QFontMetrics, max_markers: int = 200,
                 max_spans: int = 200, max_markers_in_view: int = 24) -> None:
        self._by_key = plots  # the chart's plots by key (objects with an ``item`` PlotItem), top first
        self.fg, self.bg = fg, bg
        self._fm = font_metrics
        self.max_markers, self.max_spans, self.max_markers_in_view = max_markers, max_spans, max_markers_in_view
        self._markers: deque[_Mark] = deque()
        self._spans: deque[_Mark] = deque()
        self._view = (-math.inf, math.inf)
        self._label_position = 0.92  # of the top plot's height; set by sync (under its legend)

    def _plots(self) -> list:
        return [p.item for p in self._by_key.values()]

    # -- history ----------------------------------------------------------------------
    def add_marker(self, t: float, text: str) -> None:
        self._markers.append(_Mark(float(t), float(t), text, width_px=self._fm.horizontalAdvance(text) + 8.0))
        while len(self._markers) > self.max_markers:
            self._take_out(self._markers.popleft())

    def add_span(self, t: float, color: QColor, tooltip: str) -> None:
        self._spans.append(_Mark(float(t), float(t), tooltip, color=QColor(color)))
        while len(self._spans) > self.max_spans:
            self._take_out(self._spans.popleft())

    def extend_span(self, t: float) -> None:
        """The newest span reaches ``t`` (it grows with each sample while its phase lasts)."""
        if self._spans:
            span = self._spans[-1]
            span.t1 = max(span.t0, float(t))

    def clear(self) -> None:
        for m in (*self._markers, *self._spans):
            self._take_out(m)
        self._markers.clear()
        self._spans.clear()

    def markers(self) -> list[tuple[float, str]]:
        return [(m.t0, m.text) for m in self._markers]

    def spans(self) -> list[tuple[str, float, float]]:
        return [(m.text, m.t0, m.t1) for m in self._spans]

    def markers_in_scene(self) -> list[tuple[float, str, bool]]:
        return [(m.t0, m.text, m.label is not None) for m in self._markers if m.items]

    def spans_in_scene(self) -> int:
        return sum(1 for m in self._spans if m.items)

    def marker_lines(self, plot) -> list[float]:
        """Times of the marker lines drawn on ``plot`` (tests)."""
        return [m.t0 for m in self._markers for p, _ in m.items if p is plot]

    def labels(self) -> list[pg.TextItem]:
        return [m.label for m in self._markers if m.label is not None]

    # -- scene --------------------------------------------------------------------------
    def sync(self, x0: float, x1: float, keep_clear: list[QRectF] = ()) -> None:
        """Put in the scene what overlaps [x0, x1], take out the rest, and stretch what is in
        to each plot's current Y range. ``keep_clear``: rects in the top plot's view pixels
        (other labels there) no marker label may cover."""
        self._view = (x0, x1)
        plots = self._plots()
        if not plots:
            return
        # Stretched a whole range past each end: an auto-ranged plot pads its range after this
        # sync, and the view clips what lies outside anyway.
        y_ranges = [(lo - (hi - lo), hi + (hi - lo)) for lo, hi in (p.getViewBox().viewRange()[1] for p in plots)]
        width = plots[0].getViewBox().width()
        min_s = MIN_SPAN_PX * (x1 - x0) / width if width > 0 and math.isfinite(x1 - x0) else 0.0
        for span in self._spans:
            if span.t1 >= x0 and span.t0 <= x1 and span.t1 - span.t0 >= min_s:
                if not span.items:
                    self._add_rects(span, plots)
                for (_, rect), (y0, y1) in zip(span.items, y_ranges):
                    rect.setRect(span.t0, y0, span.t1 - span.t0, y1 - y0)
            elif span.items:
                self._take_out(span)
        inside = [m for m in self._markers if x0 <= m.t0 <= x1][-self.max_markers_in_view:]
        keep = {id(m) for m in inside}
        for m in self._markers:
            if m.items and id(m) not in keep:
                self._take_out(m)
        for m in inside:
            if not m.items:
                self._add_lines(m, plots)
            for (_, line), (y0, y1) in zip(m.items, y_ranges):
                line.setLine(m.t0, y0, m.t0, y1)
        self._place_labels(inside, plots[0], x0, x1, plots[0].getViewBox().viewRange()[1], keep_clear)

    def _place_labels(self, inside: list[_Mark], top, x0: float, x1: float, y_range,
                      keep_clear: list[QRectF]) -> None:
        """Labels end at their line (text on its left), so the newest change reads at the
        right edge; walking from the newest, an older label shows only where it ends left of
        the last shown one's start and begins inside the plot. Just under the top plot's
        legend, never under it."""
        vb = top.getViewBox()
        px_per_s = vb.width() / (x1 - x0) if x1 > x0 and math.isfinite(x1 - x0) else 0.0
        legend_h = top.legend.boundingRect().height() if top.legend is not None and top.legend.items else 0.0
        line_h = self._fm.lineSpacing() + 4
        height = max(1.0, vb.height())
        # The labels' row, in view pixels from the top: under the legend where the plot is tall
        # enough for it, else along the bottom (a short plot: 1280 x 800 with the MoE row).
        row_top = legend_h + 6 if legend_h + 6 + line_h <= 0.55 * height else max(0.0, height - line_h - 4)
        frac = 1.0 - (row_top + line_h / 2) / height
        if legend_h:  # a short plot has no row under its legend: labels only where it is not
            legend_w = top.legend.boundingRect().width()
            keep_clear = [*keep_clear, QRectF(vb.width() - legend_w - 4, 0.0, legend_w + 4, legend_h + 4)]
        y = y_range[0] + frac * (y_range[1] - y_range[0])
        free_until = math.inf  # pixels from x0 where the last shown label begins
        for m in reversed(inside):
            at = (m.t0 - x0) * px_per_s
            shown = at <= free_until - 4 and at - m.width_px >= 0 and not any(
                r.intersects(QRectF(at - m.width_px, row_top, m.width_px, line_h)) for r in keep_clear)
            if shown:
                free_until = at - m.width_px
                if m.label is None:
                    fill = QColor(self.bg)
                    fill.setAlpha(_LABEL_ALPHA)
                    m.label = pg.TextItem(m.text, color=self.fg, fill=pg.mkBrush(fill), anchor=(1, 0.5))
                    m.label.setZValue(6)
                    top.addItem(m.label, ignoreBounds=True)
                m.label.setPos(m.t0, y)
            elif m.label is not None:
                self._drop_label(m)

    def _add_lines(self, m: _Mark, plots) -> None:
        pen = QPen(self.fg, 1, Qt.PenStyle.DotLine)
        pen.setCosmetic(True)  # 1 px whatever the view's scale
        for plot in plots:
            line = QGraphicsLineItem()
            line.setPen(pen)
            line.setZValue(4)
            line.setToolTip(m.text)  # the text of a label left out for room
            plot.addItem(line, ignoreBounds=True)
            m.items.append((plot, line))

    def _add_rects(self, span: _Mark, plots) -> None:
        for plot in plots:
            rect = QGraphicsRectItem()
            rect.setPen(QPen(Qt.PenStyle.NoPen))
            rect.setBrush(QBrush(span.color))
            rect.setZValue(-10)
            rect.setToolTip(span.text)
            plot.addItem(rect, ignoreBounds=True)
            span.items.append((plot, rect))

    def _drop_label(self, m: _Mark) -> None:
        label, m.label = m.label, None
        if label is not None:
            self._plots()[0].removeItem(label)

    def _take_out(self, m: _Mark) -> None:
        for plot, item in m.items:
            plot.removeItem(item)
        m.items.clear()
        self._drop_label(m)
