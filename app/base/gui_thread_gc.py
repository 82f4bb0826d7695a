"""Python's cyclic garbage collector, run only on the GUI thread.

Left automatic, a collection can start on whichever thread happens to allocate — the
engine's worker, say — and destroy Qt objects there. Qt's destructor then waits for
the GIL while holding Qt's object mutex, and the GUI thread, holding the GIL, waits for
that mutex: the whole app freezes (seen: a test run hung in QObject::~QObject during
a gc pass inside the worker's json.loads). pyqtgraph documents the same cure: turn
automatic collection off and collect from a GUI-thread timer.

A full collection walks every live object: its cost grows with the session (routing records,
rounds), and CPython's own collector only runs one when the objects added since the last are
a quarter of the rest, which ``gc.collect(2)`` skips. So full collections are spaced by their
own measured cost, at most FULL_DUTY of the GUI thread (a 10-minute MoE window otherwise
slowed from 0.92 to 0.67 of headless as its heap grew).
"""

from __future__ import annotations

import gc
import time

from PySide6.QtCore import QCoreApplication, QObject, QTimer

FULL_DUTY = 0.01  # the share of the GUI thread full collections may take


class GuiThreadCollector(QObject):
    """One per application: collects generation by generation, as the thresholds would."""

    def __init__(self, interval_ms: int = 500) -> None:
        super().__init__(QCoreApplication.instance())
        self.threshold = gc.get_threshold()
        self.next_full = 0.0  # perf_counter time before which no full collection runs
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
                if g2 > self.threshold[2] and time.perf_counter() >= self.next_full:
                    start = time.perf_counter()
                    gc.collect(2)
                    took = time.perf_counter() - start
                    self.next_full = start + took + took / FULL_DUTY


def freeze_built_window() -> None:
    """Once a process: what is alive when the first window is built (Qt wrappers, pyqtgraph
    items, numpy, llama_cpp's bindings; ~10^5 objects) moves out of the collector's reach.

    A full pass holds the GIL all along, so the run's decode callbacks wait for all of it;
    most of what it walked was this, which lives as long as the process. Done once, not per
    window: a test session builds hundreds of windows, and a frozen window that is closed
    later would never be collected."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def collect_garbage_on_gui_thread() -> GuiThreadCollector:
    """Install the collector once for this QApplication (idempotent)."""
    app = QCoreApplication.instance()
    existing = app.findChild(GuiThreadCollector)
    return existing if existing is not None else GuiThreadCollector()
