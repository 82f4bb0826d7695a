"""Calls that arrive faster than a person reads are applied together, a few times a second.

A run hands the window a token every 10–20 ms and a sample every 100 ms. Applying each as
it comes means a label's relayout and a repaint per event, on the GUI thread that shares
two cores with llama.cpp's threads and holds the GIL the decode thread's callbacks need:
a visible window at 60–100 events a second ran an MoE stream at two thirds of its headless
speed (docs/decisions.md, issue 32). Text and numbers read the same at 4 Hz.

``CoalescedCalls(interval_ms, apply, keep)``: ``push(item)`` stores the item and, if no
call is pending, arms one single-shot timer; when it fires, ``apply`` gets every item
pushed since (``keep="all"``) or the newest one alone (``keep="last"``). Nothing is lost
and nothing is late by more than ``interval_ms``; an idle window has no timer running.
``flush()`` applies what is pending now (a run that ended must show its last token).
``leading=True``: a push after a quiet ``interval_ms`` is applied at once (the first phase
of a run shows when it begins); only what follows within the interval waits.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from PySide6.QtCore import QObject, QTimer

__all__ = ["CoalescedCalls"]


class CoalescedCalls:
    def __init__(self, interval_ms: int, apply: Callable[[Any], None], keep: str = "all",
                 parent: QObject | None = None, leading: bool = False) -> None:
        """``parent``: the widget whose parts ``apply`` touches; the timer dies with it."""
        if keep not in ("all", "last"):
            raise ValueError(f"CoalescedCalls: keep must be 'all' or 'last', not {keep!r}")
        self._apply, self._keep = apply, keep
        self._leading, self._interval_s = leading, interval_ms / 1000.0
        self._applied_at = -float("inf")  # time.monotonic() of the last apply
        self._pending: list = []
        self._timer = QTimer(parent)
        self._timer.setSingleShot(True)
        self._timer.setInterval(int(interval_ms))
        self._timer.timeout.connect(self.flush)

    def push(self, item: Any) -> None:
        if self._leading and not self._pending and time.monotonic() - self._applied_at >= self._interval_s:
            self._applied_at = time.monotonic()
            self._apply([item] if self._keep == "all" else item)
            return
        if self._keep == "last":
            self._pending[:] = [item]
        else:
            self._pending.append(item)
        if not self._timer.isActive():
            self._timer.start()

    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> None:
        self._timer.stop()
        if not self._pending:
            return
        items, self._pending = self._pending, []
        self._applied_at = time.monotonic()
        self._apply(items if self._keep == "all" else items[-1])

    def clear(self) -> None:
        """Drop what is pending (a new model: the old run's text must not land on it)."""
        self._timer.stop()
        self._pending = []
