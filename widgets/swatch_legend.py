"""A row of colour swatches with names, painted above a map, wrapped onto more lines when the
widget is narrower than the row: a legend entry is never cut at the widget's edge.

The shard map and the expert map both paint one; the maps ask ``legend_height`` for the
room above their grid, so the grid always starts below the last legend line.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter

MARGIN = 4
SWATCH = 10
_AFTER_SWATCH = 4
_BETWEEN = 12

Item = tuple[QColor | str, str]  # (swatch colour, name)


def _placed(fm: QFontMetrics, items: Sequence[Item], width: int) -> list[tuple[int, int, Item]]:
    """(x, line, item) for each entry: a new line whenever the next entry would pass ``width``."""
    out, x, line = [], MARGIN, 0
    for item in items:
        need = SWATCH + _AFTER_SWATCH + fm.horizontalAdvance(item[1])
        if x > MARGIN and x + need > width - MARGIN:
            x, line = MARGIN, line + 1
        out.append((x, line, item))
        x += need + _BETWEEN
    return out


def legend_height(fm: QFontMetrics, items: Sequence[Item], width: int) -> int:
    """Pixels the legend takes at this width (one text line per legend line)."""
    placed = _placed(fm, items, width)
    lines = (placed[-1][1] + 1) if placed else 1
    return lines * fm.height()


def paint_legend(painter: QPainter, fm: QFontMetrics, items: Sequence[Item], width: int, text: QColor,
                 outline: bool = False) -> None:
    for x, line, (color, name) in _placed(fm, items, width):
        top = MARGIN + line * fm.height()
        mid = top + fm.height() // 2
        swatch = QRect(x, mid - SWATCH // 2, SWATCH, SWATCH)
        painter.fillRect(swatch, QColor(color))
        painter.setPen(text)
        if outline:  # light swatches (white "never picked") need an edge to be seen
            painter.drawRect(swatch)
        left = x + SWATCH + _AFTER_SWATCH
        painter.drawText(QRect(left, top, fm.horizontalAdvance(name) + 2, fm.height()),
                         Qt.AlignmentFlag.AlignVCenter, name)


def natural_width(fm: QFontMetrics, items: Sequence[Item]) -> int:
    """The width at which the legend fits on one line."""
    return 2 * MARGIN + sum(SWATCH + _AFTER_SWATCH + fm.horizontalAdvance(n) + _BETWEEN for _c, n in items) - _BETWEEN
