"""Stacked strip charts of a live run (memory, bandwidth, tok/s...) on one time axis.

The chart shares two CPU cores with llama.cpp, so the work is split the way
pyqtgraph's scrolling-plot examples do it: `append` only writes one float per
curve into preallocated numpy buffers, and a QTimer redraws at a modest rate,
only when something new arrived and only while the chart is on screen. Curves,
level lines and markers are created once and then fed with `setData`/`setValue`;
nothing is created per sample. A redraw costs what is on screen, not what the
session holds: while following the latest samples only the visible window (plus a
margin) is handed to the curves, and change markers are kept as plain (time, text)
history, in the scene only while they are inside the view (a long session profiled at
minute 3 spent most of each repaint in the bounding rects of markers scrolled off long
before; docs/decisions.md).

Buffers are twice the capacity: samples are written at increasing positions and,
once the end is reached, the newest `capacity` samples are moved back to the
front. Every sample costs one store per curve, the held window is always one
contiguous slice, and the move happens once per `capacity` samples.

A drag or a zoom inside a plot stops the chart following the newest samples; while it does
not follow, a banner over the top plot's title row says so, at which time the view ends and
how to go back ("paused at t = 84 s (live 212 s) — End or double-click to follow").
Double-clicking a plot follows again (End is the window's shortcut for follow_latest).

The chart takes its colours from the Qt palette so it matches the rest of the
application whether that is light or dark.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPalette
from PySide6.QtWidgets import QGraphicsItem, QLabel, QWidget

from shardscope.widgets.draw_budget import DrawBudget
from shardscope.widgets.number_format import format_number
from shardscope.widgets.time_marks import TimeMarks

__all__ = ["LiveChart", "elide_words"]

_LEGEND_ALPHA = 200
# Samples come at 10 Hz: a silence this long is time the run did not run (paused, suspended,
# wedged), drawn as a gap in every curve.
GAP_S = 3.0
_FILL_ALPHA = 50
_LEFT_AXIS_WIDTH = 64


@dataclass
class _Plot:
    item: pg.PlotItem
    units: str
    curve_keys: list[str] = field(default_factory=list)
    from_zero: float = 0.0  # > 0: Y runs from 0 to this many times the visible top (see scale_from_zero)
    level_within: float = 0.0  # > 0: a level line higher than this many times the data's top is not drawn
    tip: str = ""  # what the plot's words mean, under the whole title in its tooltip
    fixed_top: float = 0.0  # > 0: Y runs from 0 to at least this (a percentage's 100), the legend's band above
    title: str = ""
    title_note: str = ""
    title_width: int = 0  # the width the shown title was elided to
    above: list = field(default_factory=list)  # level texts named in the title: far above the data


@dataclass
class _Level:
    plot_key: str
    line: pg.InfiniteLine
    label: str
    shown: bool = False  # set_level gave it a value (the line may still be off-range, see level_within)


def title_never_widens(label: pg.LabelItem) -> None:
    """A plot title that is cut at the plot's width instead of setting the chart's minimum
    width: pyqtgraph sizes a LabelItem to its text, so one long title (or a note added to
    it during a run) made the whole chart wider than its pane, and the legends and the
    newest samples went past the window's edge."""
    def update_min() -> None:
        height = label.itemRect().height()
        label.setMinimumWidth(0)
        label.setMinimumHeight(height)
        label._sizeHint = {Qt.SizeHint.MinimumSize: (0, height), Qt.SizeHint.PreferredSize: (0, height),
                           Qt.SizeHint.MaximumSize: (-1, -1), Qt.SizeHint.MinimumDescent: (0, 0)}
        label.updateGeometry()

    label.updateMin = update_min  # pyqtgraph calls it after every setText
    label.setFlag(QGraphicsItem.GraphicsItemFlag.ItemClipsChildrenToShape)


def elide_words(metrics: QFontMetrics, text: str, width: int) -> str:
    """``text`` cut at a word boundary to fit ``width`` px, ending in "…" when cut ("Cache hits,
    on time (per s…" read as a word of its own); a first word too long is cut where it must be."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    words = text.split(" ")
    while len(words) > 1:
        words.pop()
        shown = " ".join(words).rstrip(" ,;:\u2014-(") + "\u2026"
        if metrics.horizontalAdvance(shown) <= width:
            return shown
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)


def _escape_format(text: str) -> str:
    # InfLineLabel runs str.format on its text; a label such as "{x}" must survive.
    return text.replace("{", "{{").replace("}", "}}")


class LiveChart(pg.GraphicsLayoutWidget):
    follow_seconds: float = 60.0
    # the share of one core the charts may take to draw (5 % cost an MoE run 25 %: docs/decisions.md)
    draw_duty: float = 0.02
    max_markers: int = 200  # history kept for export and panning back
    max_markers_in_view: int = 24  # drawn at once: a slider dragged for a minute must not fill the scene

    def __init__(self, capacity: int = 6000, refresh_hz: float = 15.0, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # GraphicsLayoutWidget binds the layout's clear() onto the instance, which
        # would shadow our clear() (empty the data) with "remove every plot".
        if "clear" in self.__dict__:
            del self.clear
        if capacity < 2:
            raise ValueError(f"LiveChart capacity must be at least 2 points, got {capacity}")
        self.capacity = int(capacity)
        self.refresh_count = 0
        self._t = np.full(2 * self.capacity, np.nan)
        self._y: dict[str, np.ndarray] = {}
        self._end = 0  # one past the newest sample in the buffers
        self._len = 0  # samples held, <= capacity
        self._dirty = False
        self._following = True

        self._plots: dict[str, _Plot] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        self._curve_plot: dict[str, str] = {}
        self._levels: dict[str, _Level] = {}
        self._colors: dict[str, QColor] = {}
        self._short_names: dict[str, str] = {}  # a curve's legend name -> its short form (small plots)
        self._held_tops: dict[str, float] = {}  # curve key -> a value its plot's Y range must show

        self._grid = False
        self._fg = QColor()
        self._bg = QColor()
        self._read_palette()
        # The plots' dict, not a lambda over self: a reference cycle kept the Python chart alive
        # after its C++ object went with its parent window.
        self.marks = TimeMarks(self._plots, self._fg, self._bg,
                               self.fontMetrics(), max_markers=self.max_markers,
                               max_markers_in_view=self.max_markers_in_view)
        self.ci.setContentsMargins(4, 4, 4, 4)
        self.ci.setSpacing(2)
        # Over the top plot's title row (left-aligned titles are elided short of it while shown).
        self.paused_label = QLabel(self)
        self.paused_label.setStyleSheet("QLabel { background: #fff3cd; color: #5c4400; border: 1px solid #d9b44a;"
                                        " border-radius: 3px; padding: 0px 6px; }")
        self.paused_label.setToolTip("The charts stopped following the newest samples (a drag or zoom in a plot). "
                                     "Press End, double-click a plot, or Run \u2192 Follow latest to follow again.")
        self.paused_label.hide()

        # A redraw's cost decides how often it may come (widgets/draw_budget.py): at most
        # ``refresh_hz``, and never more than ``draw_duty`` of a core.
        self.draw_budget = DrawBudget(max_hz=refresh_hz, duty=self.draw_duty)
        self._paint_s = 0.0  # seconds painting since the last tick
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._tick)
        self.set_refresh_hz(refresh_hz)
        self._timer.start()

    # -- building the chart ---------------------------------------------------------
    def add_plot(self, key: str, title: str, units: str) -> None:
        if key in self._plots:
            raise ValueError(f"LiveChart already has a plot {key!r}")
        item: pg.PlotItem = self.ci.addPlot(row=len(self._plots), col=0)
        title_never_widens(item.titleLabel)
        item.setTitle(title, size="9pt", color=self._fg.name())
        item.setLabel("left", units)
        item.setLabel("bottom", "time", units="s")
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.enableAutoSIPrefix(False)  # "kMB" and "ks" only confuse
        # Same left-axis width on every row, or the linked time axes do not line up.
        item.getAxis("left").setWidth(_LEFT_AXIS_WIDTH)
        item.showGrid(x=self._grid, y=self._grid, alpha=0.25)
        # No clip-to-view or downsampling: the curves are handed the visible window only
        # (see _redraw), and both passes re-ran on every setData and paint.
        item.setClipToView(False)
        item.setDownsampling(auto=False)
        item.setMenuEnabled(True)
        vb = item.getViewBox()
        # Time is the axis people explore; values stay auto-ranged on what is visible.
        vb.setMouseEnabled(x=True, y=False)
        vb.enableAutoRange(x=False, y=True)
        vb.setAutoVisible(y=True)
        vb.sigRangeChangedManually.connect(self._on_user_moved_view)
        # Compact (no outer margin above and below the rows): its band is taken from the plot's height
        legend = item.addLegend(offset=(6, 2), colCount=1, labelTextSize="8pt", horSpacing=10)
        legend.layout.setContentsMargins(3, 0, 3, 0)
        legend.setZValue(10)
        # Legends, titles and the value axis rarely change: drawn once into a pixmap and
        # blitted until they do (they were a fifth of each frame, profiled).
        for static in (legend, item.titleLabel, item.getAxis("left")):
            static.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        vb.sigResized.connect(lambda *_a, k=key: self._resized(k))

        if self._plots:
            first = next(iter(self._plots.values())).item
            item.setXLink(first)
            # Only the bottom plot shows time tick labels; the others share them.
            # (Hidden, not just unlabelled: each drawn time axis cost a ms per frame.)
            previous_last = list(self._plots.values())[-1].item
            previous_last.hideAxis("bottom")
        self._plots[key] = _Plot(item=item, units=units, title=title)
        self._style_plot(item)

    def add_curve(self, plot_key: str, curve_key: str, label: str, color: str, fill_to_zero: bool = False,
                  short: str = "") -> None:
        """``short``: the legend's name for the curve where the plot is too small for ``label``."""
        plot = self._plot(plot_key)
        if short:
            self._short_names[label] = short
        if curve_key in self._curves or curve_key in self._levels:
            raise ValueError(f"LiveChart already has a curve or level line {curve_key!r}")
        kwargs: dict[str, object] = {"pen": pg.mkPen(color, width=1), "name": label}
        if fill_to_zero:
            fill = QColor(color)
            fill.setAlpha(_FILL_ALPHA)
            kwargs.update(fillLevel=0.0, brush=fill)
        curve = plot.item.plot(**kwargs)
        self._colors[curve_key] = QColor(color)
        self._curves[curve_key] = curve
        self._curve_plot[curve_key] = plot_key
        plot.curve_keys.append(curve_key)
        # A curve that joins mid-run has no history: its past is NaN, drawn as a gap.
        self._y[curve_key] = np.full(2 * self.capacity, np.nan)
        self.fit_legend(plot_key)
        self._dirty = True

    def add_level_line(self, plot_key: str, line_key: str, label: str, color: str) -> None:
        plot = self._plot(plot_key)
        if line_key in self._levels or line_key in self._curves:
            raise ValueError(f"LiveChart already has a curve or level line {line_key!r}")
        label_bg = QColor(self._bg)
        label_bg.setAlpha(_LEGEND_ALPHA)
        line = pg.InfiniteLine(
            angle=0,
            movable=False,
            pen=pg.mkPen(color, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
            label="",
            # Left-aligned at the left end: the legend holds the top right, and the newest
            # change markers the right; below the line when it sits in the top half of the
            # plot so the text is never cut off.
            labelOpts={"position": 0.01, "color": color, "fill": label_bg, "anchors": [(0, 0), (0, 1)]},
        )
        # Below the live curves (0), above the baseline ghosts (-5): its label's fill hid the curve it
        # sits on while the two were close (the projection over tok/s in a dense run's first ~30 s).
        line.setZValue(-1)
        line.setVisible(False)
        # Not ignoreBounds: a visible level (e.g. the memory budget) pulls the Y range
        # so it stays on screen next to the curve it limits.
        plot.item.addItem(line)
        self._levels[line_key] = _Level(plot_key=plot_key, line=line, label=label)

    def set_level(self, line_key: str, value: float | None, text: str | None = None) -> None:
        """Show a level line at ``value`` (None hides it), labelled "<label> <value> <units>" or ``text``."""
        try:
            level = self._levels[line_key]
        except KeyError:
            raise KeyError(f"LiveChart has no level line {line_key!r}; add_level_line() it first") from None
        if value is None or not math.isfinite(value):
            level.shown = False
            level.line.setVisible(False)
            self._dirty = True
            return
        units = self._plots[level.plot_key].units
        if text is None:
            text = f"{level.label} {format_number(float(value))} {units}".strip()
        # A label the legend covered stays hidden (named in the title, _place_level_labels); it is
        # shown while its text is set, since pyqtgraph updates only a visible label's text.
        placed_away = level.shown and not level.line.label.isVisibleTo(level.line)
        level.shown = True
        level.line.setVisible(True)
        level.line.label.setVisible(True)
        level.line.setValue(float(value))
        level.line.label.setFormat(_escape_format(text))
        if placed_away:
            level.line.label.setVisible(False)
        self._dirty = True

    def scale_from_zero(self, plot_key: str, headroom: float = 1.33, level_within: float = 0.0) -> None:
        """Y from 0 to ``headroom`` × the highest visible value (curves and shown levels).

        pyqtgraph's auto-range pads a flat line by ±0.5 in data units: a steady 0.01 tok/s
        then draws on the floor of a 0–1 axis, as if it were zero. Scaling to the data's
        own top keeps a slow but steady rate a visible line at any magnitude.
        """
        plot = self._plot(plot_key)
        plot.from_zero = float(headroom)
        plot.level_within = float(level_within)
        plot.item.getViewBox().enableAutoRange(y=False)
        self._dirty = True

    def set_plot_tip(self, plot_key: str, tip: str) -> None:
        """What the plot's words mean (e.g. "on time"), shown under its whole title on hover."""
        plot = self._plot(plot_key)
        plot.tip = tip
        plot.title_width = -1  # the next redraw sets the tooltip
        plot.item.titleLabel.setToolTip(plot.title + (f"\n{tip}" if tip else ""))
        self._dirty = True

    def fixed_range(self, plot_key: str, top: float, headroom: float = 1.25) -> None:
        """Y from 0 to ``headroom`` × ``top`` (a percentage: 0 to 125 %, never 99.6-100.4 at a
        steady 100 %), or higher where the legend needs a taller band above ``top``."""
        plot = self._plot(plot_key)
        plot.fixed_top = float(top)
        plot.from_zero = float(headroom)
        plot.item.getViewBox().enableAutoRange(y=False)
        self._dirty = True

    def _fixed_ticks(self, plot: _Plot, headroom: float) -> None:
        """Ticks up to the fixed top only (the band above is the legend's, not a 300 % hit rate):
        0, half and the top where the plot is tall enough for three labels, else 0 and the top."""
        top = plot.fixed_top
        tall = plot.item.getViewBox().height() / headroom >= 3 * self.fontMetrics().height()
        ticks = [(0.0, "0"), (top / 2, f"{top / 2:g}"), (top, f"{top:g}")] if tall else [(0.0, "0"), (top, f"{top:g}")]
        if getattr(plot, "_ticks", None) != ticks:
            plot._ticks = ticks
            plot.item.getAxis("left").setTicks([ticks])

    def _legend_headroom(self, plot: _Plot) -> float:
        """The Y headroom that keeps the data's top below the legend: the legend sits in the plot's
        top band and must cover no curve (it covered the memory lines and a 100 % hit rate)."""
        legend, vb = plot.item.legend, plot.item.getViewBox()
        height = vb.height()
        if legend is None or not legend.items or not legend.isVisible() or height <= 0:
            return 1.0
        band = legend.boundingRect().height() + 8  # its offset from the top, and a margin under it
        return height / (height - band) if height > 1.2 * band else 6.0

    def set_grid(self, visible: bool) -> None:
        """Off by default: pyqtgraph replays grid lines through a QPicture on every
        frame, which measured 2-3x the cost of the whole rest of a redraw."""
        self._grid = bool(visible)
        for plot in self._plots.values():
            plot.item.showGrid(x=self._grid, y=self._grid, alpha=0.25)

    def set_refresh_hz(self, refresh_hz: float) -> None:
        if not refresh_hz > 0:
            raise ValueError(f"LiveChart refresh rate must be positive, got {refresh_hz}")
        self.draw_budget.max_hz = float(refresh_hz)
        self.draw_budget.min_hz = min(self.draw_budget.min_hz, float(refresh_hz))
        self._timer.setInterval(self.draw_budget.interval_ms())

    # -- feeding data -----------------------------------------------------------------
    def append(self, t: float, values: dict[str, float]) -> None:
        """Called at sample rate from the engine's callbacks: stores only, never draws. After a
        silence over GAP_S the curves break: a line across it would draw figures nobody measured."""
        if self._end and t - self._t[self._end - 1] > GAP_S:
            self._put(0.5 * (t + float(self._t[self._end - 1])), {})
        self._put(t, values)

    def _put(self, t: float, values: dict[str, float]) -> None:
        if self._end == self._t.shape[0]:
            self._shift()
        i = self._end
        self._t[i] = t
        nan = math.nan
        for key, buf in self._y.items():
            buf[i] = values.get(key, nan)
        self._end = i + 1
        if self._len < self.capacity:
            self._len += 1
        self._dirty = True

    def mark_event(self, t: float, label: str) -> None:
        """A vertical marker at ``t`` on every plot, labelled once (on the top plot). Stored
        here; the next redraw puts it in the scene if it is in view."""
        self.marks.max_markers = self.max_markers
        self.marks.add_marker(t, label)
        self._dirty = True

    def add_span(self, t: float, color: QColor, tooltip: str) -> None:
        """A shaded span from ``t`` on every plot (a long phase); extend_span grows it."""
        self.marks.add_span(t, color, tooltip)
        self._dirty = True

    def extend_span(self, t: float) -> None:
        self.marks.extend_span(t)

    def marker_count(self) -> int:
        """Markers held (the history), in view or not."""
        return len(self.marks.markers())

    def markers(self) -> list[tuple[float, str]]:
        """(time, text) of every marker held, oldest first (export, tests)."""
        return self.marks.markers()

    def markers_in_scene(self) -> list[tuple[float, str, bool]]:
        """(time, text, label shown) of the markers drawn now (tests, benches)."""
        return self.marks.markers_in_scene()

    def clear(self) -> None:
        """A new run: drop every sample and marker, keep plots, curves and level lines."""
        self._t.fill(np.nan)
        for buf in self._y.values():
            buf.fill(np.nan)
        self._end = 0
        self._len = 0
        self.marks.clear()
        self._following = True
        self._dirty = True

    # -- view -------------------------------------------------------------------------
    def follow_latest(self) -> None:
        """Go back to showing the last `follow_seconds` after the user panned or zoomed."""
        self._following = True
        for plot in self._plots.values():
            plot.item.getViewBox().enableAutoRange(x=False, y=True)
        self._dirty = True

    def is_following(self) -> bool:
        return self._following

    def paused_text(self) -> str:
        """The banner's whole text while the chart does not follow ("" while it does); a narrow
        chart shows a shorter form of it."""
        return getattr(self, "_paused_full", "") if not self.paused_label.isHidden() else ""

    def mouseDoubleClickEvent(self, event) -> None:
        """A double-click on the charts follows the newest samples again."""
        self.follow_latest()
        self._show_paused()
        event.accept()

    def _show_paused(self, x1: float | None = None) -> None:
        if self._following or not self._plots:
            if not self.paused_label.isHidden():
                self.paused_label.hide()
                for plot in self._plots.values():
                    plot.title_width = -1  # the top title has its whole row back
            return
        if x1 is None:
            x1 = next(iter(self._plots.values())).item.getViewBox().viewRange()[0][1]
        newest = float(self._t[self._end - 1]) if self._len else None
        at = min(x1, newest) if newest is not None else x1
        live = f" (live {newest:,.0f} s)" if newest is not None and newest > at + 0.5 else ""
        head = f"paused at t = {max(at, 0.0):,.0f} s"
        full = f"{head}{live} \u2014 End or double-click to follow"
        # the longest that leaves the top title some room (a narrow chart at 1280 x 800); whole on hover
        room = 0.7 * self.viewport().width() - 16
        fm = self.paused_label.fontMetrics()
        text = next((t for t in (full, f"{head} \u2014 End or double-click to follow", f"{head} \u2014 End: follow",
                                 head) if fm.horizontalAdvance(t) <= room), head)
        self.paused_label.setToolTip(f"{full}. The charts stopped following the newest samples (a drag or zoom "
                                     "in a plot); End, a double-click or Run \u2192 Follow latest follows again.")
        self._paused_full = full
        if text != self.paused_label.text() or self.paused_label.isHidden():
            self.paused_label.setText(text)
            self.paused_label.adjustSize()
            first = next(iter(self._plots.values())).item
            rect = self.mapFromScene(first.titleLabel.sceneBoundingRect()).boundingRect()
            height = max(rect.height(), self.paused_label.height())
            self.paused_label.move(max(0, self.viewport().width() - self.paused_label.width() - 6),
                                   max(0, rect.top() + (rect.height() - height) // 2))
            was_hidden = self.paused_label.isHidden()
            self.paused_label.show()
            self.paused_label.raise_()
            if was_hidden:
                first_plot = next(iter(self._plots.values()))
                first_plot.title_width = -1  # elide the top title short of the banner
                self._set_title_note(first_plot, first_plot.title_note)

    def export_png(self, path: str) -> None:
        self._redraw()  # the picture must include samples that arrived since the last tick
        if not self.grab().save(path, "PNG"):
            raise OSError(f"could not save the chart as a PNG to {path!r}: is the folder there and writable?")

    # -- introspection (tests, benches) ------------------------------------------------
    def point_count(self, curve_key: str) -> int:
        """Samples held for the curve, gaps (NaN) included: every curve shares the time axis."""
        self._buffer(curve_key)
        return self._len

    def curve_data(self, curve_key: str) -> tuple[np.ndarray, np.ndarray]:
        buf = self._buffer(curve_key)
        start = self._end - self._len
        return self._t[start : self._end].copy(), buf[start : self._end].copy()

    def _resized(self, plot_key: str) -> None:
        self.fit_legend(plot_key)  # narrower plot: fewer columns
        self._dirty = True  # the marker labels' room changed: place them again

    def fit_legend(self, plot_key: str) -> None:
        """As many legend columns (up to 4) as fit the plot's width, so no entry is pushed past
        the plot's left edge (four MoE entries on one row were cut: "cache hit rate (fr"). Where
        the legend would still take over half the plot's height (a narrow, short plot at
        1280 x 800), the curves' short names are used, so the data keeps room under it."""
        item = self.plot_item(plot_key)
        legend = item.legend
        if legend is None or not legend.items:
            return
        vb = item.getViewBox()
        room = vb.width() - 8
        for short in (False, True):
            for _sample, label in legend.items:
                full = getattr(label, "full_name", None) or label.text
                label.full_name = full
                shown = self._short_names.get(full, full) if short else full
                if label.text != shown:
                    label.setText(shown)
            for columns in range(min(4, len(legend.items)), 0, -1):
                legend.setColumnCount(columns)
                legend.updateSize()
                if legend.width() <= room or columns == 1:
                    break
            if vb.height() <= 0 or legend.boundingRect().height() <= 0.5 * vb.height():
                return

    def legend_names(self, plot_key: str) -> list[str]:
        """The names a plot's legend shows now (full or short), in order (tests)."""
        legend = self.plot_item(plot_key).legend
        return [label.text for _sample, label in legend.items] if legend is not None else []

    def plot_item(self, plot_key: str) -> pg.PlotItem:
        return self._plot(plot_key).item

    def level_line(self, line_key: str) -> pg.InfiniteLine:
        return self._levels[line_key].line

    def curve_keys(self) -> list[str]:
        return list(self._curves)

    def curve_plot(self, curve_key: str) -> pg.PlotItem:
        """The plot a curve is drawn on (ChartGhosts draws a curve's faint copy there)."""
        self._buffer(curve_key)
        return self._plots[self._curve_plot[curve_key]].item

    def hold_top(self, curve_key: str, value: float | None) -> None:
        """Keep ``value`` inside the Y range of the curve's plot (a ghost drawn there); None lets go."""
        self._buffer(curve_key)
        if value is None or not math.isfinite(value):
            self._held_tops.pop(curve_key, None)
        else:
            self._held_tops[curve_key] = float(value)
        self._dirty = True

    def curve_color(self, curve_key: str) -> QColor:
        self._buffer(curve_key)
        return QColor(self._colors[curve_key])

    # -- internals ----------------------------------------------------------------------
    def _shift(self) -> None:
        keep = self._len
        start = self._end - keep
        self._t[:keep] = self._t[start : self._end]
        for buf in self._y.values():
            buf[:keep] = buf[start : self._end]
        self._end = keep

    def _tick(self) -> None:
        try:
            if not self._following and any(
                p.item.getViewBox().autoRangeEnabled()[0] for p in self._plots.values()
            ):
                # The user pressed the plot's "A" button or chose "View all": take that as
                # "show me the live data again".
                self.follow_latest()
            if not self._dirty or not self.isVisible():
                return
            start = time.perf_counter()
            self._redraw()
            # This hand-over, and the paints since the last one (the frame it scheduled comes
            # after this returns; it is counted at the next tick).
            painted, self._paint_s = self._paint_s, 0.0
            self.draw_budget.spent(time.perf_counter() - start + painted)
            self.refresh_count += 1
        finally:
            self._timer.start(self.draw_budget.interval_ms())

    def paintEvent(self, event) -> None:
        start = time.perf_counter()
        super().paintEvent(event)
        self._paint_s += time.perf_counter() - start

    def _redraw(self) -> None:
        self._dirty = False
        start = self._end - self._len
        if self._following and self._len:
            # Only the visible window (and a tenth more on the left, so a pan that begins
            # at once shows no hole): the curves' cost per frame is bounded by
            # follow_seconds, not by how long the session has run.
            newest = float(self._t[self._end - 1])
            oldest = float(self._t[start])
            lo = max(oldest, newest - self.follow_seconds)
            start = start + int(np.searchsorted(self._t[start:self._end], lo - 0.1 * self.follow_seconds))
        else:
            lo = -math.inf
        # Copies, not views: pyqtgraph keeps the arrays it is given and may re-read them
        # on a pan, after our buffers have been shifted underneath.
        t = self._t[start : self._end].copy()
        for key, curve in self._curves.items():
            curve.setData(t, self._y[key][start : self._end].copy())
        if self._following and self._len and self._plots:
            first = next(iter(self._plots.values())).item
            first.setXRange(lo, lo + self.follow_seconds, padding=0)
            x0, x1 = lo, lo + self.follow_seconds
        elif self._plots:
            x0, x1 = next(iter(self._plots.values())).item.getViewBox().viewRange()[0]
        else:
            x0, x1 = lo, math.inf
        self._scale_from_zero(t, start, lo)
        self._show_paused(None if self._following else x1)
        self._place_level_labels()
        # Every redraw: the Y ranges move with the data even when the time axis stands still.
        self.marks.sync(x0, x1, self._level_label_rects())

    def _scale_from_zero(self, t: np.ndarray, start: int, t_lo: float) -> None:
        visible = t >= t_lo
        for key, plot in self._plots.items():
            if plot.from_zero <= 0:
                continue
            headroom = max(plot.from_zero, self._legend_headroom(plot))
            if plot.fixed_top > 0:
                plot.item.setYRange(0.0, plot.fixed_top * headroom, padding=0)
                self._fixed_ticks(plot, headroom)
                continue
            tops = [np.nanmax(v) for v in (self._y[k][start : self._end][visible] for k in plot.curve_keys)
                    if v.size and not np.isnan(v).all()]
            tops += [v for k, v in self._held_tops.items() if self._plots[self._curve_plot[k]] is plot]
            data_top = max((x for x in tops if math.isfinite(x)), default=0.0)
            above = []
            for lv in self._levels.values():
                if lv.plot_key != key or not lv.shown:
                    continue
                value = lv.line.value()
                # A level far above the data (an 860 MB/s emulated SSD over 20 MB/s of reads)
                # would flatten the curve: it is then named in the title instead of drawn.
                far = plot.level_within > 0 and data_top > 0 and value > plot.level_within * data_top
                lv.line.setVisible(not far)
                if far:
                    above.append(lv.line.label.toPlainText())
                else:
                    tops.append(value)
            plot.above = [f"{text} \u2191 above" for text in above]
            top = max((x for x in tops if math.isfinite(x)), default=0.0)
            plot.item.setYRange(0.0, top * headroom if top > 0 else 1.0, padding=0)

    def _place_level_labels(self) -> None:
        """A level line's label that the legend would cover (a narrow plot, a wide legend, the
        line near the top) is named in the plot's title instead; the line stays drawn."""
        line_h = self.fontMetrics().lineSpacing() + 4
        for key, plot in self._plots.items():
            vb, legend = plot.item.getViewBox(), plot.item.legend
            (y0, y1), width = vb.viewRange()[1], vb.width()
            covered = []
            if legend is not None and legend.items and y1 > y0:
                box = legend.boundingRect()
                legend_rect = QRectF(width - box.width() - 4, 0.0, box.width() + 4, box.height() + 4)
                for lv in self._levels.values():
                    if lv.plot_key != key or not lv.shown or not lv.line.isVisible():
                        continue
                    y = (y1 - lv.line.value()) / (y1 - y0) * vb.height()
                    w = self.fontMetrics().horizontalAdvance(lv.line.label.toPlainText()) + 12
                    hit = QRectF(0.01 * width, y - line_h, w, 2 * line_h).intersects(legend_rect)
                    lv.line.label.setVisible(not hit)
                    if hit:
                        covered.append(lv.line.label.toPlainText())
            self._set_title_note(plot, ", ".join([*plot.above, *covered]))

    def _level_label_rects(self) -> list[QRectF]:
        """Where the top plot's level-line labels sit, in its view pixels (a line's label may
        be on either side of it: both are kept clear)."""
        if not self._plots:
            return []
        key, plot = next(iter(self._plots.items()))
        vb = plot.item.getViewBox()
        (y0, y1), width, height = vb.viewRange()[1], vb.width(), vb.height()
        line_h = self.fontMetrics().lineSpacing() + 4
        rects = []
        for lv in self._levels.values():
            if lv.plot_key != key or not lv.line.isVisible() or not lv.line.label.isVisible() or y1 <= y0:
                continue
            y = (y1 - lv.line.value()) / (y1 - y0) * height
            w = self.fontMetrics().horizontalAdvance(lv.line.label.toPlainText()) + 12
            rects.append(QRectF(0.0, y - line_h, 0.01 * width + w, 2 * line_h))
        return rects

    def _set_title_note(self, plot: _Plot, note: str) -> None:
        # The title is cut at the plot's width (title_never_widens); a note that does not fit
        # ends in "…" rather than mid-number ("…(USB-C SSD): 19" read as 19 tok/s at 1280 × 800).
        width = int(plot.item.getViewBox().width()) - 8  # the title spans the view, not the axis
        if not self.paused_label.isHidden() and self._plots and plot is next(iter(self._plots.values())):
            width -= self.paused_label.width() + 12  # the paused banner sits at the row's right end
        if note == plot.title_note and width == plot.title_width:
            return
        plot.title_note, plot.title_width = note, width
        text = f"{plot.title} \u2014 {note}" if note else plot.title
        font = QFont(self.font())
        font.setPointSizeF(9.0)
        metrics = QFontMetrics(font)
        plot.item.titleLabel.setToolTip(text + (f"\n{plot.tip}" if plot.tip else ""))  # the whole title
        if not note and (width <= 0 or metrics.horizontalAdvance(text) <= width):
            plot.item.setTitle(text, size="9pt", color=self._fg.name())  # as add_plot set it
            return
        if width > 0:
            text = elide_words(metrics, text, width)
        plot.item.setTitle(text, size="9pt", color=self._fg.name(), justify="left")

    def _on_user_moved_view(self, *_: object) -> None:
        self._following = False
        self._dirty = True  # the marks in view change with the view, samples or not

    def _plot(self, plot_key: str) -> _Plot:
        try:
            return self._plots[plot_key]
        except KeyError:
            raise KeyError(f"LiveChart has no plot {plot_key!r}; plots are {list(self._plots)}") from None

    def _buffer(self, curve_key: str) -> np.ndarray:
        try:
            return self._y[curve_key]
        except KeyError:
            raise KeyError(f"LiveChart has no curve {curve_key!r}; curves are {list(self._y)}") from None

    # -- palette --------------------------------------------------------------------------
    def _read_palette(self) -> None:
        pal = self.palette()
        self._bg = pal.color(QPalette.ColorRole.Base)
        self._fg = pal.color(QPalette.ColorRole.Text)
        self.setBackground(self._bg)
        if hasattr(self, "marks"):
            self.marks.fg, self.marks.bg = self._fg, self._bg
        for plot in getattr(self, "_plots", {}).values():
            self._style_plot(plot.item)

    def _style_plot(self, item: pg.PlotItem) -> None:
        axis_pen = pg.mkPen(self._fg)
        for name in ("left", "bottom"):
            axis = item.getAxis(name)
            axis.setPen(axis_pen)
            axis.setTextPen(axis_pen)
        item.titleLabel.setText(item.titleLabel.text, color=self._fg.name())
        legend = item.legend
        if legend is not None:
            bg = QColor(self._bg)
            bg.setAlpha(_LEGEND_ALPHA)
            legend.setBrush(pg.mkBrush(bg))
            legend.setPen(pg.mkPen(QColor(self._fg.red(), self._fg.green(), self._fg.blue(), 60)))
            legend.setLabelTextColor(self._fg)

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:
            self._read_palette()
        super().changeEvent(event)
