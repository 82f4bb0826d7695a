"""Python's cyclic garbage collector, run only on the GUI thread.

Left automatic, a collection can start on whichever thread happens to allocate — the
engine's worker, say — and destroy Qt objects there. Qt's destructor then waits for
the GIL while holding Qt's object mutex, and the GUI thread, holding the GIL, waits for
that mutex: the whole app freezes (seen: a test run hung in QObject::~QObject during
a gc pass inside the worker's json.loads). pyqtgraph documents the same cure: turn
automatic collection off and collect from a GUI-thread timer.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer


class GuiThreadCollector(QObject):
    """One per application: collects generation by generation, as the thresholds would."""

    def __init__(self, interval_ms: int = 500) -> None:
        super().__init__(QCoreApplication.instance())
        self.threshold = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect)
        self.timer.start(interval_ms)

    def collect(self) -> None:
        g0, g1, g2 = gc.get_count()
        if g0 > self.threshold[0]:
            gc.collect(0)
            if g1 > self.threshold[1]:
                gc.collect(1)
                if g2 > self.threshold[2]:
                    gc.collect(2)


def collect_garbage_on_gui_thread() -> GuiThreadCollector:
    """Install the collector once for this QApplication (idempotent)."""
    app = QCoreApplication.instance()
    existing = app.findChild(GuiThreadCollector)
    return existing if existing is not None else GuiThreadCollector()
