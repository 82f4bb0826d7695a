"""One search at a time, never next to the window's own run: the engine is measured alone.

A sweep or auto-tune measures cold runs and compares their tok/s. A second
llama.cpp decoding in the same process (the window's Run, or another search) would
take cores and disk from it and turn the comparison into noise, and two
StreamingRuns would evict each other's shards. So a search first stops the
window's run (waiting for ``run_finished``, which takes at most a token), then
holds the session's engine lock (``begin_search``/``end_search``) for as long as its
thread lives: Run is disabled meanwhile and says why.

The dialogs own a SearchRunner each; the window's runs (app.runs.window_runs) is the host.
"""

from __future__ import annotations

from typing import Any, Protocol

from PySide6.QtCore import QObject, Signal

from shardscope.app.search.search_thread import SearchFn, SearchThread


class SearchHost(Protocol):
    """What a search needs from the run session."""

    run_finished: Any  # Signal(): the session's run thread ended

    def is_running(self) -> bool: ...
    def stop_run(self) -> None: ...
    def search_owner(self) -> str | None: ...  # what holds the engine now ("the sweep"), or None
    def begin_search(self, what: str) -> None: ...
    def end_search(self, what: str) -> None: ...


class SearchRunner(QObject):
    waiting = Signal(str)  # the window's run is being stopped first
    started = Signal()
    item = Signal(object)
    succeeded = Signal(object)
    failed = Signal(str)
    finished = Signal()  # after succeeded/failed, once the thread has ended

    def __init__(self, host: SearchHost, what: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.host = host
        self.what = what  # "the sweep": used in the window's "Run is disabled while …"
        self.thread: SearchThread | None = None
        self._pending: SearchFn | None = None

    def busy(self) -> bool:
        return self.thread is not None or self._pending is not None

    def start(self, fn: SearchFn) -> str | None:
        """Start ``fn`` on its thread (after stopping the window's run); returns a refusal, or None."""
        if self.busy():
            return f"{self.what} is already running"
        owner = self.host.search_owner()
        if owner is not None:
            return f"{owner} is running: cancel it or wait for it to finish first"
        if self.host.is_running():
            self._pending = fn
            self.host.run_finished.connect(self._on_host_stopped)
            self.waiting.emit("stopping the window's run first (a search measures the engine alone) …")
            self.host.stop_run()
            return None
        self._launch(fn)
        return None

    def cancel(self) -> None:
        """Returns at once; ``finished`` follows (a sweep stops its run at the next token)."""
        if self._pending is not None:
            self._disconnect_host()
            self._pending = None
            self.failed.emit("cancelled")
            self.finished.emit()
        elif self.thread is not None:
            self.thread.request_stop()

    def cancel_and_wait(self, timeout_ms: int) -> bool:
        """For closing: stop and block until the thread has ended (a QThread destroyed
        while running aborts the app)."""
        self.cancel()
        thread = self.thread
        return thread.wait(timeout_ms) if thread is not None else True

    def stop_requested(self) -> bool:
        return self.thread is not None and self.thread.stop_requested()

    # ---------------------------------------------------------------- internals
    def _on_host_stopped(self) -> None:
        self._disconnect_host()
        fn, self._pending = self._pending, None
        if fn is None:
            return
        owner = self.host.search_owner()
        if owner is not None or self.host.is_running():
            self.failed.emit(f"{owner or 'a run'} started meanwhile; not starting {self.what}")
            self.finished.emit()
            return
        self._launch(fn)

    def _disconnect_host(self) -> None:
        try:
            self.host.run_finished.disconnect(self._on_host_stopped)
        except (RuntimeError, TypeError):
            pass

    def _launch(self, fn: SearchFn) -> None:
        self.host.begin_search(self.what)
        thread = SearchThread(fn, f"shardscope-{self.what.split()[-1]}", self)
        thread.item.connect(self.item)
        thread.succeeded.connect(self.succeeded)
        thread.failed.connect(self.failed)
        thread.finished.connect(self._on_thread_finished)
        self.thread = thread
        self.started.emit()
        thread.start()

    def _on_thread_finished(self) -> None:
        thread, self.thread = self.thread, None
        if thread is not None:
            thread.wait()
            thread.deleteLater()
        self.host.end_search(self.what)
        self.finished.emit()
