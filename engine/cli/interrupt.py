"""Ctrl-C for commands that run llama.cpp: stop the run within a second, exit 130.

Why a worker thread: Python runs signal handlers on the main thread only, between
bytecodes. When the main thread itself decodes, the handler's KeyboardInterrupt lands
inside a ctypes callback (the layer hook), where ctypes prints "Exception ignored on
calling ctypes callback" and llama.cpp carries on. Here the run works on a worker
thread and the main thread only waits, so Ctrl-C reaches it at once; it asks the run to
stop (the run's own stop path: load cancelled, prompt pass aborted, decode ended at the
next layer) and waits a moment for it to unwind.

A run stuck in one system call cannot hear the request: llama.cpp's MAP_POPULATE reads
the whole file inside mmap. Nothing has been written by then (rows are written after
the run), so after ``GRACE_S`` the process exits 130 without waiting for it.

Once the run has stopped and closed, the process exits at once (``os._exit``): the
interpreter's own teardown of a loaded llama.cpp and its thread pools took 0.3-0.7 s
on this shared 2-core machine, which would spend most of the second on nothing to save.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Callable, TypeVar

from shardscope.engine.base.errors import RunStopped
from shardscope.engine.runs.stop_signal import StopSignal

T = TypeVar("T")
GRACE_S = 0.7  # Ctrl-C to exit stays under a second with the message printed


def run_interruptibly(work: Callable[[], T], stop: StopSignal, grace_s: float = GRACE_S,
                      before_exit: Callable[[], None] | None = None) -> T:
    """``work()`` on a worker thread; Ctrl-C requests ``stop``, waits up to ``grace_s`` for
    the run to unwind, calls ``before_exit`` (clear a progress line) and exits 130."""
    outcome: dict = {}

    def body() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
            outcome["error"] = exc

    worker = threading.Thread(target=body, name="shardscope-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        stop.request()
        try:
            worker.join(grace_s)
        except KeyboardInterrupt:  # pressed again: do not wait any longer
            pass
        if before_exit is not None:
            before_exit()
        _exit_now()
    if "error" in outcome:
        if isinstance(outcome["error"], RunStopped) and stop.is_set():
            raise KeyboardInterrupt from None
        raise outcome["error"]
    if stop.is_set():  # Ctrl-C arrived as the run ended: still an interrupted command
        raise KeyboardInterrupt
    return outcome["value"]


def _exit_now() -> None:
    print("shardscope: interrupted", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
