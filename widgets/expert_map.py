"""Layers × experts of an MoE model: where each routed expert lives and how often it is picked.

A Kimi-class model has 61 × 384 = 23,424 experts, so the map is one RGBA image with a
pixel per expert, rebuilt with numpy and scaled onto the widget in one `drawImage`:
per-cell painting would stall the event loop at that size. Two views share the grid:
"state" (evicted/loading/resident/pinned, picked cells on top) and "heat" (picks over
the last N tokens, white to dark red). The tooltip names the cell under the mouse.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QImage, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from shardscope.widgets.shard_map import EVICTED, LOADING, PINNED, RESIDENT, STATE_COLORS, STATE_NAMES
from shardscope.widgets.swatch_legend import MARGIN as _MARGIN
from shardscope.widgets.swatch_legend import legend_height, paint_legend

__all__ = ["ExpertMap", "PICKED_COLOR", "VIEWS"]

VIEWS = ("state", "heat")
PICKED_COLOR = "#d62728"  # picked by the token being computed: drawn over its state
_HEAT_LOW = np.array([255, 255, 255], dtype=np.float32)
_HEAT_HIGH = np.array([140, 20, 20], dtype=np.float32)
_KNOWN_STATES = (EVICTED, LOADING, RESIDENT, PINNED)


def _rgb(hex_color: str) -> tuple[int, int, int]:
    c = QColor(hex_color)
    return c.red(), c.green(), c.blue()


class ExpertMap(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._states = np.zeros((0, 0), dtype=np.uint8)
        self._heat = np.zeros((0, 0), dtype=np.float32)
        self._picked = np.zeros((0, 0), dtype=bool)
        self._heat_window = 0
        self._current_layer: int | None = None
        self._view = "state"
        self._pixels: np.ndarray | None = None  # each cell's RGBA, (layers, experts, 4); None: no map
        self._blit: tuple[tuple[int, int], QImage, np.ndarray] | None = None  # (size, image, its buffer)
        lut = np.zeros((256, 4), dtype=np.uint8)
        lut[:, :3] = _rgb("#e8467c")  # an unknown state is loud
        lut[:, 3] = 255
        for state in _KNOWN_STATES:
            lut[state, :3] = _rgb(STATE_COLORS[state])
        self._lut = lut
        self._picked_rgba = np.array([*_rgb(PICKED_COLOR), 255], dtype=np.uint8)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)

    # -- public API ---------------------------------------------------------------
    def set_shape(self, n_layers: int, n_experts: int) -> None:
        """A new model: every expert evicted, nothing picked, no heat."""
        self._states = np.zeros((n_layers, n_experts), dtype=np.uint8)
        self._heat = np.zeros((n_layers, n_experts), dtype=np.float32)
        self._picked = np.zeros((n_layers, n_experts), dtype=bool)
        self._heat_window = 0
        self._current_layer = None
        self._rebuild()

    def shape(self) -> tuple[int, int]:
        return tuple(self._states.shape)  # type: ignore[return-value]

    def set_states(self, states) -> None:
        new = np.asarray(states, dtype=np.uint8)
        if new.shape != self._states.shape:
            raise ValueError(f"states shape {new.shape} != map shape {self._states.shape}")
        if np.array_equal(new, self._states):
            return
        self._states = new.copy()
        self._rebuild()

    def set_picked(self, picked) -> None:
        """Boolean layers × experts: the experts the current token's routers picked."""
        new = np.asarray(picked, dtype=bool)
        if new.shape != self._states.shape:
            raise ValueError(f"picked shape {new.shape} != map shape {self._states.shape}")
        if np.array_equal(new, self._picked):
            return
        self._picked = new.copy()
        self._rebuild()

    def set_heat(self, counts, window: int) -> None:
        """Pick counts over the last ``window`` tokens (one count per layer × expert)."""
        new = np.asarray(counts, dtype=np.float32)
        if new.shape != self._states.shape:
            raise ValueError(f"heat shape {new.shape} != map shape {self._states.shape}")
        self._heat = new.copy()
        self._heat_window = int(window)
        if self._view == "heat":
            self._rebuild()

    def set_current_layer(self, layer: int | None) -> None:
        if layer is not None and not 0 <= layer < self._states.shape[0]:
            layer = None
        if layer != self._current_layer:
            self._current_layer = layer
            self.update()

    def set_view(self, view: str) -> None:
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
        if view != self._view:
            self._view = view
            self._rebuild()

    def view(self) -> str:
        return self._view

    def states(self) -> np.ndarray:
        return self._states.copy()

    def cell_rgb(self, layer: int, expert: int) -> tuple[int, int, int]:
        """The colour drawn for one cell (what a test or a screenshot reader checks)."""
        if self._pixels is None:
            raise ValueError("empty map")
        return tuple(int(v) for v in self._pixels[layer, expert, :3])  # type: ignore[return-value]

    def cell_at(self, pos: QPoint) -> tuple[int, int] | None:
        rect = self._grid_rect()
        n_layers, n_experts = self._states.shape
        if n_layers == 0 or not rect.contains(pos):
            return None
        expert = (pos.x() - rect.left()) * n_experts // max(1, rect.width())
        layer = (pos.y() - rect.top()) * n_layers // max(1, rect.height())
        return min(layer, n_layers - 1), min(expert, n_experts - 1)

    def describe_cell(self, layer: int, expert: int) -> str:
        state = STATE_NAMES.get(int(self._states[layer, expert]), f"state {self._states[layer, expert]}")
        text = f"layer {layer}, expert {expert} \u2014 {state}"
        if self._picked[layer, expert]:
            text += ", picked by this token"
        if self._heat_window:
            text += f"; picked {int(self._heat[layer, expert])} of the last {self._heat_window} tokens"
        return text

    # -- image ------------------------------------------------------------------------
    def _rebuild(self) -> None:
        n_layers, n_experts = self._states.shape
        if n_layers == 0 or n_experts == 0:
            self._pixels, self._blit = None, None
            self.update()
            return
        if self._view == "state":
            pixels = self._lut[self._states]
            pixels[self._picked] = self._picked_rgba
        else:
            peak = float(self._heat.max()) if self._heat.size else 0.0
            share = (self._heat / peak) if peak > 0 else np.zeros_like(self._heat)
            rgb = _HEAT_LOW + share[..., None] * (_HEAT_HIGH - _HEAT_LOW)
            pixels = np.empty((n_layers, n_experts, 4), dtype=np.uint8)
            pixels[..., :3] = rgb.astype(np.uint8)
            pixels[..., 3] = 255
        self._pixels = pixels
        self._blit = None
        self.update()

    def _blit_image(self, width: int, height: int) -> QImage:
        """The map at the grid's size in pixels, in the window's own format (0xffRRGGBB).

        Why not ``drawImage(rect, image of the cells)``: a scaled RGBA image is converted and
        scaled on Qt's GUI thread pool while the GUI thread waits for it, holding the GIL
        the decode thread's callbacks need (py-spy --gil --native: QLatch::waitInternal
        under ExpertMap.paintEvent; docs/decisions.md, issue 32). A same-size RGB32 image
        is a plain copy."""
        if self._blit is not None and self._blit[0] == (width, height):
            return self._blit[1]
        assert self._pixels is not None
        n_layers, n_experts = self._pixels.shape[:2]
        rows = np.arange(height) * n_layers // height
        cols = np.arange(width) * n_experts // width
        # One 32-bit word a cell (bytes B, G, R, A: alpha is 255 in every colour), then scaled by
        # two 1-D takes: 0.3 ms at 300 x 360 where a 2-D gather of four bytes a pixel took 6.8 ms,
        # 7 % of a core at 10 Hz on the GUI thread (py-spy, docs/decisions.md).
        cells = np.ascontiguousarray(self._pixels[..., [2, 1, 0, 3]]).view(np.uint32)[..., 0]
        bgra = np.ascontiguousarray(cells.take(rows, axis=0).take(cols, axis=1))
        image = QImage(bgra.data, width, height, 4 * width, QImage.Format.Format_RGB32)
        self._blit = ((width, height), image, bgra)
        return image

    # -- painting -----------------------------------------------------------------------
    def sizeHint(self) -> QSize:
        n_layers, n_experts = self._states.shape
        cell = 12 if n_experts <= 32 else 2 if n_experts <= 200 else 1
        return QSize(max(240, 2 * _MARGIN + n_experts * cell),
                     self._grid_top() + max(40, n_layers * max(cell, 4)) + _MARGIN)

    def minimumSizeHint(self) -> QSize:
        return QSize(120, self._grid_top() + 40)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        try:
            self._paint_legend(painter)
            if self._pixels is None:
                return
            rect = self._grid_rect()
            if rect.width() > 0 and rect.height() > 0:
                painter.drawImage(rect.topLeft(), self._blit_image(rect.width(), rect.height()))
            if self._current_layer is not None:
                n_layers = self._states.shape[0]
                top = rect.top() + self._current_layer * rect.height() // n_layers
                bottom = rect.top() + (self._current_layer + 1) * rect.height() // n_layers
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.setPen(QPen(self.palette().color(QPalette.ColorRole.WindowText), 2))
                painter.drawRect(QRect(rect.left() - 1, top - 1, rect.width() + 1, max(2, bottom - top) + 1))
        finally:
            painter.end()

    def _legend_items(self) -> list[tuple[str, str]]:
        if self._view == "heat":
            window = f" (last {self._heat_window} tokens)" if self._heat_window else ""
            return [("#ffffff", "never picked"), ("#8c1414", f"most picked{window}")]
        items = [(STATE_COLORS[s], STATE_NAMES[s]) for s in _KNOWN_STATES]
        return items + [(PICKED_COLOR, "picked now")]

    def _paint_legend(self, painter: QPainter) -> None:
        paint_legend(painter, self.fontMetrics(), self._legend_items(), self.width(),
                     self.palette().color(QPalette.ColorRole.WindowText), outline=True)

    # -- tooltips -----------------------------------------------------------------------
    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            cell = self.cell_at(event.pos())
            if cell is None:
                QToolTip.hideText()
                event.ignore()
            else:
                QToolTip.showText(event.globalPos(), self.describe_cell(*cell), self)
            return True
        return super().event(event)

    # -- geometry -----------------------------------------------------------------------
    def _grid_top(self) -> int:
        """Below the legend, however many lines it wraps onto at this width."""
        return 2 * _MARGIN + legend_height(self.fontMetrics(), self._legend_items(), self.width())

    def _grid_rect(self) -> QRect:
        """The whole room under the legend, cells scaled to it (a 5 x 128 map in a tall panel is
        not a strip in its corner); snapped to whole pixels per cell where that keeps 90 % of it."""
        n_layers, n_experts = self._states.shape
        width = max(1, self.width() - 2 * _MARGIN)
        height = max(1, self.height() - self._grid_top() - _MARGIN)
        return QRect(_MARGIN, self._grid_top(), _snapped(width, n_experts), _snapped(height, n_layers))


def _snapped(room: int, cells: int) -> int:
    """``room`` cut to a whole number of pixels per cell when that loses under 10 % of it."""
    if cells and room >= cells:
        whole = room // cells * cells
        if whole >= 0.9 * room:
            return whole
    return room
