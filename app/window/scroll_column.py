"""A column that scrolls vertically instead of squeezing its rows, and is never narrower than
its content needs: the window's right column (numbers, projection, shards, text).

Below their minimum height Qt lays rows over each other (at 1280 x 800 "cache hit rate (from
RAM)" printed over "on time"); a scroll area keeps every row whole. Its width follows the
content's minimum (a wider value widens the column, as it did without the scroll area), so
nothing is clipped at the right edge.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


class ScrollColumn(QScrollArea):
    def __init__(self, content: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidget(content)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        content = self.widget().minimumSizeHint()
        return QSize(content.width() + self.verticalScrollBar().sizeHint().width(), 120)
