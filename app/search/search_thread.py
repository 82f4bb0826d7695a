"""Run an engine search (a sweep, an auto-tune) on its own QThread, one result at a time.

Why not BackgroundTask: a search takes minutes and produces many results, and the
dialog shows each as it lands (a table row, a log line); BackgroundTask reports a
fraction and one final value. Why a thread at all: each result is a full
StreamingRun (a llama.cpp load and decode) that would freeze the GUI for seconds.

The search function gets two callables: ``emit(item)`` queues one intermediate
result to the GUI thread (the ``item`` signal), and ``should_stop()`` turns true
once ``request_stop()`` was called; the engine's own loops poll it
(``iter_sweep`` stops its current run at the next token, ``auto_tune`` between
runs). Its return value arrives as ``succeeded``; an error as ``failed`` with the
engine's one-line message, anything else as "internal error: ..." (never a crash).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from shardscope.app.base.background import report_outcome

SearchFn = Callable[[Callable[[Any], None], Callable[[], bool]], Any]


class SearchThread(QThread):
    item = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, fn: SearchFn, name: str, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self._fn = fn
        self._stop = threading.Event()

    def request_stop(self) -> None:
        """Thread-safe; returns at once. The search ends at its next check."""
        self._stop.set()

    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:  # noqa: D401 - QThread entry point
        report_outcome(lambda: self._fn(self.item.emit, self._stop.is_set), self.succeeded, self.failed)
