"""Drive the real workbench window from a bench script (offscreen unless DISPLAY is set;
bench/lib/virtual_display.py starts an Xvfb first where one is installed).

Shared by the GUI benches: open a window on a model, start a continuous run with
given settings, pump the event loop for a while, stop cleanly.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
from PySide6.QtWidgets import QApplication

from shardscope.engine.knobs.settings import RunSettings


def application() -> QApplication:
    """Qt's application, and the GUI thread lowered as the app's ``run_gui`` lowers it (the window
    gives way to its runs: app/base/window_priority.py)."""
    from shardscope.app.base.window_priority import give_way_to_runs

    give_way_to_runs()
    return QApplication.instance() or QApplication([])


def pump(app: QApplication, seconds: float, until=None) -> None:
    """Run Qt's own event loop (as the app's exec() would, not a processEvents poll)
    until ``until()`` holds or ``seconds`` pass."""
    if until is not None and until():
        return
    loop = QEventLoop()
    deadline = QTimer()
    deadline.setSingleShot(True)
    deadline.timeout.connect(loop.quit)
    deadline.start(int(seconds * 1000))
    check = QTimer()
    if until is not None:
        check.setInterval(5)
        check.timeout.connect(lambda: loop.quit() if until() else None)
        check.start()
    loop.exec()
    check.stop()
    deadline.stop()


class StallProbe:
    """A 10 ms timer on the GUI thread: how late it fires is how long the loop stalled."""

    def __init__(self, interval_ms: int = 10):
        self.interval_ms = interval_ms
        self.stalls_ms: list[float] = []
        self._clock = QElapsedTimer()
        self._timer = QTimer()
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        self._clock.start()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def _tick(self) -> None:
        elapsed = self._clock.restart()
        self.stalls_ms.append(max(0.0, elapsed - self.interval_ms))

    def p99(self) -> float:
        data = sorted(self.stalls_ms)
        return data[min(len(data) - 1, int(len(data) * 0.99))] if data else float("nan")


def open_window(model: str, settings: RunSettings):
    from shardscope.app.window.main_window import MainWindow

    app = application()
    config = Path(tempfile.mkdtemp(prefix="shardscope-bench-"))
    window = MainWindow(config_dir=config, model_path=model)
    window.show()
    pump(app, 60, until=lambda: window.model_info is not None)
    window.apply_settings(settings.with_changes(model_path=model))
    return app, window


def window_for_screenshot(model: str | None, size=(1600, 960), profile: str | None = None):
    """The window on ``model`` (None: the bundled one) with a fresh config, shown at ``size``,
    once the model is open; error messages are kept in ``last_error`` (printed by the
    caller) rather than drawn as a modal box over the picture. Returns (app, window), or
    (app, None) after printing why the model did not open."""
    from shardscope.app.window.main_window import MainWindow

    app = application()
    path = str(Path(model).resolve()) if model else None
    window = MainWindow(config_dir=Path(tempfile.mkdtemp(prefix="shardscope-shot-")), model_path=path,
                        profile_name=profile)
    window.message_hook = lambda message: None
    window.resize(*size)
    window.show()
    pump(app, 600, until=lambda: window.last_error is not None or (
        window.model_info is not None and (path is None or window.model_info.path == path)))
    if window.model_info is None:
        print(f"error: {window.last_error}")
        return app, None
    return app, window


def stop(app: QApplication, window) -> None:
    window.stop_run()
    pump(app, 30, until=lambda: not window.is_running())
