"""Tok/s against the first swept knob, one curve per combination of the other swept knobs.

A table answers "which row is fastest"; a plot answers "how does tok/s move with
shard size, and does prefetch depth change that shape" — the question a sweep is
run for. The x axis is the first swept knob (the sweep's outer loop, the CLI's
order); every distinct combination of the remaining swept knobs gets its own
curve, named in the legend ("depth 1, lru"). A policy on the x axis is a category,
placed at 0, 1, ... with its names as ticks. Failed and skipped combinations have
no point, so a curve may have gaps; partial (stopped) runs are not drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pyqtgraph as pg
from PySide6.QtWidgets import QWidget

from shardscope.engine.search.sweep import SweepResult, describe_settings
from shardscope.widgets import format_number

MAX_TICKS = 12  # more swept values than this: let pyqtgraph choose the ticks
Y_METRICS = {"avg_ts": "measured tok/s (here)", "projected_ts": "projected tok/s (device)"}


@dataclass
class Curve:
    label: str
    points: list[tuple[object, float]] = field(default_factory=list)  # (x knob value, y)


def group_curves(results: list[SweepResult], knobs: list[str], y_key: str = "avg_ts") -> list[Curve]:
    """Curves keyed by the non-x knobs' values, in first-seen order, points sorted by x."""
    if not knobs:
        return []
    x_key, others = knobs[0], knobs[1:]
    curves: dict[tuple, Curve] = {}
    for r in results:
        key = tuple(getattr(r.settings, k) for k in others)
        curve = curves.setdefault(key, Curve(describe_settings(r.settings, others) if others else "all"))
        if not r.ok:
            continue
        y = getattr(r.summary, y_key)
        if isinstance(y, (int, float)) and math.isfinite(y):
            curve.points.append((getattr(r.settings, x_key), float(y)))
    for curve in curves.values():
        curve.points.sort(key=lambda p: (isinstance(p[0], str), p[0]))
    return list(curves.values())


class SweepPlot(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.item = self.getPlotItem()
        self.item.showGrid(x=True, y=True, alpha=0.25)
        self.legend = self.item.addLegend(offset=(-8, 8), labelTextColor="#222", brush=pg.mkBrush(255, 255, 255, 200))
        self.curves: list[Curve] = []
        self.setMinimumHeight(220)

    def show_results(self, results: list[SweepResult], knobs: list[str], y_key: str = "avg_ts") -> None:
        self.item.clear()
        self.legend.clear()
        self.curves = group_curves(results, knobs, y_key)
        axis = self.item.getAxis("bottom")
        if not knobs:
            axis.setTicks(None)
            return
        x_key = knobs[0]
        xs_all = [p[0] for c in self.curves for p in c.points]
        categories = sorted({x for x in xs_all if isinstance(x, str)})
        numbers = sorted({float(x) for x in xs_all if not isinstance(x, str)})
        if categories:
            axis.setTicks([list(enumerate(categories))])
        elif 0 < len(numbers) <= MAX_TICKS:
            # Ticks at the swept values themselves: "32, 64", not "35, 40, ... 60".
            axis.setTicks([[(x, format_number(int(x) if x.is_integer() else x)) for x in numbers]])
        else:
            axis.setTicks(None)
        self.item.setLabel("bottom", x_key)
        self.item.setLabel("left", Y_METRICS.get(y_key, y_key))
        n = max(1, len(self.curves))
        drawn = 0
        for i, curve in enumerate(self.curves):
            if not curve.points:
                continue
            xs = [categories.index(x) if isinstance(x, str) else float(x) for x, _y in curve.points]
            ys = [y for _x, y in curve.points]
            color = pg.intColor(i, hues=max(n, 3), values=1, maxValue=200)
            self.item.plot(xs, ys, pen=pg.mkPen(color, width=2), symbol="o", symbolSize=7,
                           symbolBrush=color, symbolPen=None, name=curve.label)
            drawn += 1
        self._fit_view(xs_all, categories, drawn)

    def _fit_view(self, xs_all: list, categories: list[str], drawn: int) -> None:
        """Y from 0 (tok/s compared by eye must start at zero) with headroom for the legend,
        which sits top right: the data stays below it however many curves there are."""
        ys = [p[1] for c in self.curves for p in c.points]
        if not ys:
            self.item.enableAutoRange()
            return
        self.legend.setColumnCount(2 if drawn > 4 else 1)
        legend_rows = math.ceil(drawn / (2 if drawn > 4 else 1))
        top = max(ys) * (1.15 + 0.09 * legend_rows)
        self.item.setYRange(0, top if top > 0 else 1, padding=0)
        xs = list(range(len(categories))) if categories else [float(x) for x in xs_all]
        lo, hi = min(xs), max(xs)
        pad = (hi - lo) * 0.06 if hi > lo else 0.5
        self.item.setXRange(lo - pad, hi + pad, padding=0)
