"""Run one slow function (probe a model, write a synthetic one) off the GUI thread.

The GUI thread shares two cores with llama.cpp; a GGUF header parse can take
seconds on a big vocabulary, so even "quick" file work goes here. Results cross
back only through queued signals, never by touching widgets from this thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from PySide6.QtCore import QThread, Signal

from shardscope.engine.base.errors import ShardscopeError


class Cancelled(Exception):
    """Raised inside the task's progress callback once cancel() was asked for."""


def report_outcome(call: Callable[[], Any], succeeded, failed) -> None:
    """Run ``call`` and emit its value on ``succeeded``, or one line on ``failed``:
    "cancelled", the engine's own message, or "internal error: ..." for a bug — which
    must reach the user as a message, never kill the app. Shared by the worker threads."""
    try:
        result = call()
    except Cancelled:
        failed.emit("cancelled")
    except ShardscopeError as exc:
        failed.emit(str(exc))
    except Exception as exc:
        failed.emit(f"internal error: {type(exc).__name__}: {exc}")
    else:
        succeeded.emit(result)


class BackgroundTask(QThread):
    progressed = Signal(float)
    succeeded = Signal(object)
    failed = Signal(str)

    def __init__(self, fn: Callable[[Callable[[float], None]], Any], parent=None) -> None:
        super().__init__(parent)
        self._fn = fn
        self._cancel = threading.Event()

    def cancel(self) -> None:
        """Abort at the next progress report (the function cleans up, e.g. synth's partial file)."""
        self._cancel.set()

    def _progress(self, fraction: float) -> None:
        if self._cancel.is_set():
            raise Cancelled()
        self.progressed.emit(float(fraction))

    def run(self) -> None:  # noqa: D401 - QThread entry point
        report_outcome(lambda: self._fn(self._progress), self.succeeded, self.failed)
