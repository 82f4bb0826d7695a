"""A request to stop, made on one thread (Ctrl-C, Stop) and heard by whichever run is open.

Why not just an Event: ``run_repetitions`` opens its run deep inside, while the request
comes from the CLI's main thread; the run registers itself here when it opens and is
stopped at once if the request came first (a Ctrl-C during planning).
"""

from __future__ import annotations

import threading


class StopSignal:
    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._run = None

    def watch(self, run) -> None:
        """``run`` (anything with ``stop()``) is the one to stop now."""
        with self._lock:
            self._run = run
        if self._event.is_set():
            run.stop()

    def request(self) -> None:
        self._event.set()
        with self._lock:
            run = self._run
        if run is not None:
            run.stop()

    def is_set(self) -> bool:
        return self._event.is_set()
