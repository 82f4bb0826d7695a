"""Faint copies of earlier curves (a pinned baseline round) behind a LiveChart's live ones.

Set once with their own time axis (seconds from the baseline round's start) and moved
as a whole so their start lines up with the live round's start: the two rounds are
compared phase for phase. They never touch the chart's ring buffers and are drawn
when set or moved, not per sample, so they cost the 2-core machine nothing while it runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyqtgraph as pg

from shardscope.widgets.live_chart import LiveChart

__all__ = ["ChartGhosts"]

_GHOST_ALPHA = 80  # faint: readable as "where it was", never mistaken for the live curve
_GHOST_WIDTH = 3  # wider than the live 1 px line, so the live curve reads on top of it


class ChartGhosts:
    def __init__(self, chart: LiveChart) -> None:
        self.chart = chart
        self._items: dict[str, pg.PlotDataItem] = {}
        self._y: dict[str, np.ndarray] = {}
        self._t = np.empty(0)
        self._t0 = 0.0
        self._legend = None
        self.label = ""

    def set(self, t: np.ndarray | None, values: Mapping[str, np.ndarray] | None = None,
            label: str = "baseline") -> None:
        """Ghosts of ``values`` (curve key → y on ``t``); None removes them. Keys the chart
        has no curve for are ignored (an MoE round's expert curves on a dense chart)."""
        self._remove()
        if t is None or values is None:
            return
        self._t = np.asarray(t, dtype=float).copy()
        self.label = label
        curves = set(self.chart.curve_keys())
        for key, y in values.items():
            if key not in curves:
                continue
            y = np.asarray(y, dtype=float)
            if y.shape != self._t.shape:
                raise ValueError(f"ChartGhosts {key!r}: {y.shape[0]} values for {self._t.shape[0]} times")
            color = self.chart.curve_color(key)
            color.setAlpha(_GHOST_ALPHA)
            item = pg.PlotDataItem(pen=pg.mkPen(color, width=_GHOST_WIDTH))
            item.setZValue(-5)  # behind the live curves, above the phase spans (-10)
            self.chart.curve_plot(key).addItem(item, ignoreBounds=True)
            self._items[key], self._y[key] = item, y.copy()
            # The plot's Y range shows the ghost too: a faster baseline must not be cut off at the top.
            self.chart.hold_top(key, float(np.nanmax(y)) if np.isfinite(y).any() else None)
        if self._items:
            # One legend entry names what the faint lines are: on the top plot's first curve
            # that has a ghost (the chart's curves are in the order its plots were built).
            key = next(k for k in self.chart.curve_keys() if k in self._items)
            legend = self.chart.curve_plot(key).legend
            if legend is not None:
                legend.addItem(self._items[key], label)
                self._legend = (legend, self._items[key])
        self.place(self._t0)

    def place(self, t0: float) -> None:
        """Put the ghosts' time 0 at chart time ``t0`` (the live round's start)."""
        self._t0 = float(t0)
        for key, item in self._items.items():
            item.setData(self._t + self._t0, self._y[key])

    def keys(self) -> list[str]:
        return list(self._items)

    def data(self, curve_key: str) -> tuple[np.ndarray, np.ndarray]:
        """A ghost's (chart time, y) as drawn; empty arrays when it has none."""
        item = self._items.get(curve_key)
        x, y = item.getData() if item is not None else (None, None)
        return (np.empty(0), np.empty(0)) if x is None else (np.asarray(x), np.asarray(y))

    def _remove(self) -> None:
        if self._legend is not None:
            legend, item = self._legend
            legend.removeItem(item)
            self._legend = None
        for key, item in self._items.items():
            self.chart.curve_plot(key).removeItem(item)
            self.chart.hold_top(key, None)
        self._items, self._y, self._t = {}, {}, np.empty(0)
