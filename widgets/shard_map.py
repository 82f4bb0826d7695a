"""Where every shard of the model lives right now, at a glance.

A model can have hundreds of shards and their states change every token, so the
map paints all cells itself in one pass (one `drawRects` per state) instead of
owning a widget per cell, and it repaints only when a state or the highlighted
shard really changed. Cells shrink when the space given is too small to show
every shard at the preferred size: a complete map beats a cropped one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QColor, QHelpEvent, QPainter, QPaintEvent, QPalette, QPen, QResizeEvent
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from shardscope.widgets.swatch_legend import MARGIN as _MARGIN  # one margin for the map and its legend
from shardscope.widgets.swatch_legend import legend_height, natural_width, paint_legend

__all__ = [
    "EVICTED",
    "LOADING",
    "RESIDENT",
    "PINNED",
    "GLOBAL",
    "STATE_NAMES",
    "STATE_COLORS",
    "ShardMap",
]

EVICTED = 0
LOADING = 1
RESIDENT = 2
PINNED = 3
GLOBAL = 4

STATE_NAMES: dict[int, str] = {
    EVICTED: "evicted",
    LOADING: "loading",
    RESIDENT: "resident",
    PINNED: "pinned",
    GLOBAL: "global",
}

# Hex strings rather than QColor so non-Qt code (pyqtgraph pens, HTML reports) can
# reuse the exact same colours. Chosen to read on light and dark backgrounds alike.
STATE_COLORS: dict[int, str] = {
    EVICTED: "#c9ced6",
    LOADING: "#f2a93b",
    RESIDENT: "#3a9d5d",
    PINNED: "#2f6fdb",
    GLOBAL: "#8d5cc9",
}
_UNKNOWN_COLOR = "#e8467c"  # a state this widget does not know: make it loud

_MIN_CELL = 4


class ShardMap(QWidget):
    def __init__(self, parent: QWidget | None = None, cell_size: int = 16, gap: int = 2) -> None:
        super().__init__(parent)
        self.cell_size = cell_size
        self.gap = gap
        self._labels: list[str] = []
        self._states: list[int] = []
        self._counts: Counter[int] = Counter()
        self._layout_top = 0
        self._current: int | None = None
        self._layout_cache: tuple[int, int, int] | None = None  # (cell, gap, columns)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self._colors = {state: QColor(c) for state, c in STATE_COLORS.items()}

    # -- public API ---------------------------------------------------------------
    def set_shards(self, labels: list[str]) -> None:
        """A new model or a new plan: every shard starts evicted, nothing is highlighted."""
        self._labels = list(labels)
        self._states = [EVICTED] * len(self._labels)
        self._counts = Counter(self._states)
        self._current = None
        self._layout_cache = None
        self.updateGeometry()
        self.update()

    def set_states(self, states: Sequence[int]) -> None:
        new = [int(s) for s in states]
        if new == self._states:
            return
        if len(new) != len(self._states):
            # Trust the states over a stale label list: showing every shard matters more
            # than having a name for it.
            self._labels = (self._labels + [f"shard {i}" for i in range(len(self._labels), len(new))])[: len(new)]
            self._layout_cache = None
            self.updateGeometry()
            if self._current is not None and self._current >= len(new):
                self._current = None
        self._states = new
        self._counts = Counter(new)
        self.update()

    def states(self) -> list[int]:
        return list(self._states)

    def labels(self) -> list[str]:
        return list(self._labels)

    def set_current(self, index: int | None) -> None:
        if index is not None and not 0 <= index < len(self._states):
            index = None
        if index != self._current:
            self._current = index
            self.update()

    def current(self) -> int | None:
        return self._current

    def counts(self) -> dict[int, int]:
        return {state: self._counts.get(state, 0) for state in STATE_NAMES}

    def index_at(self, pos: QPoint) -> int | None:
        cell, gap, cols = self._grid()
        pitch = cell + gap
        x, y = pos.x() - _MARGIN, pos.y() - self._grid_top()
        if x < 0 or y < 0 or x % pitch >= cell or y % pitch >= cell:
            return None
        col, row = x // pitch, y // pitch
        if col >= cols:
            return None
        index = row * cols + col
        return index if index < len(self._states) else None

    # -- sizing -----------------------------------------------------------------------
    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        pitch = self.cell_size + self.gap
        cols = max(1, (width - 2 * _MARGIN + self.gap) // pitch)
        rows = max(1, -(-len(self._states) // cols))
        return self._grid_top() + rows * pitch - self.gap + _MARGIN

    def sizeHint(self) -> QSize:
        pitch = self.cell_size + self.gap
        cols = max(1, min(32, len(self._states)))
        width = max(self._legend_width(), 2 * _MARGIN + cols * pitch - self.gap)
        return QSize(width, self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:
        return QSize(min(self._legend_width(), 200), self._grid_top() + _MIN_CELL + _MARGIN)

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._layout_cache = None
        super().resizeEvent(event)

    # -- painting -----------------------------------------------------------------------
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        try:
            self._paint_legend(painter)
            self._paint_cells(painter)
        finally:
            painter.end()

    def legend_items(self) -> list[tuple[QColor, str]]:
        """One entry per state with its count. "global" only when the plan has global shards: a plan
        that keeps the globals out of its shards (they stay resident) would read "global 0"."""
        return [(self._colors[state], f"{name} {self._counts.get(state, 0)}") for state, name in STATE_NAMES.items()
                if state != GLOBAL or self._counts.get(GLOBAL, 0)]

    def _paint_legend(self, painter: QPainter) -> None:
        paint_legend(painter, self.fontMetrics(), self.legend_items(), self.width(),
                     self.palette().color(QPalette.ColorRole.WindowText))

    def _paint_cells(self, painter: QPainter) -> None:
        if not self._states:
            return
        cell, gap, cols = self._grid()
        pitch = cell + gap
        top = self._grid_top()
        by_state: dict[int, list[QRect]] = {}
        for i, state in enumerate(self._states):
            row, col = divmod(i, cols)
            by_state.setdefault(state, []).append(QRect(_MARGIN + col * pitch, top + row * pitch, cell, cell))
        painter.setPen(Qt.PenStyle.NoPen)
        for state, rects in by_state.items():
            painter.setBrush(self._colors.get(state, QColor(_UNKNOWN_COLOR)))
            painter.drawRects(rects)
        if self._current is not None:
            row, col = divmod(self._current, cols)
            outline = QRect(_MARGIN + col * pitch, top + row * pitch, cell, cell).adjusted(-1, -1, 1, 1)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(self.palette().color(QPalette.ColorRole.WindowText), 2))
            painter.drawRect(outline)

    # -- tooltips -----------------------------------------------------------------------
    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            index = self.index_at(event.pos())
            if index is None:
                QToolTip.hideText()
                event.ignore()
            else:
                state = self._states[index]
                name = STATE_NAMES.get(state, f"state {state}")
                QToolTip.showText(event.globalPos(), f"{self._labels[index]} \u2014 {name}", self)
            return True
        return super().event(event)

    # -- geometry -----------------------------------------------------------------------
    def _grid_top(self) -> int:
        return 2 * _MARGIN + legend_height(self.fontMetrics(), self.legend_items(), self.width())

    def _legend_width(self) -> int:
        fm = self.fontMetrics()
        return natural_width(fm, [(c, f"{n} 000") for c, n in self.legend_items()])

    def _grid(self) -> tuple[int, int, int]:
        """Largest cell (up to cell_size) at which every shard fits in the current size."""
        top = self._grid_top()  # the legend may wrap onto another line as its counts grow
        if self._layout_cache is None or self._layout_top != top:
            self._layout_top = top
            width = max(1, self.width() - 2 * _MARGIN)
            height = max(1, self.height() - top - _MARGIN)
            n = max(1, len(self._states))
            cell, gap = self.cell_size, self.gap
            while True:
                pitch = cell + gap
                cols = max(1, (width + gap) // pitch)
                rows = -(-n // cols)
                if rows * pitch - gap <= height or cell <= _MIN_CELL:
                    break
                cell -= 1
                gap = 1 if cell < 10 else self.gap
            self._layout_cache = (cell, gap, cols)
        return self._layout_cache
