"""An emulated SSD: loads wait so that bytes arrive no faster than a set rate.

Rates are 10^6 B/s (the project's bandwidth unit). Idle time is never banked — a real
disk cannot read ahead of its requests — so after a pause the next read starts at the
emulated rate, not in a burst. The price: a late wake-up on a busy CPU is lost, a few
% below the set rate.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class SsdRateLimiter:
    def __init__(self, mb_s: float = 0.0, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        self._mb_s = max(0.0, float(mb_s))
        self._clock = clock
        self._sleep = sleep
        self._free_at = 0.0  # when the emulated disk finishes what it was given
        self._lock = threading.Lock()

    @property
    def mb_s(self) -> float:
        """The emulated rate in 10^6 B/s; 0 = no emulation."""
        return self._mb_s

    @mb_s.setter
    def mb_s(self, value: float) -> None:
        self._mb_s = max(0.0, float(value))

    def reserve(self, n_bytes: int) -> float:
        """Book ``n_bytes`` on the emulated disk; seconds to wait before reading them."""
        rate = self._mb_s
        if rate <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            begin = max(now, self._free_at)
            self._free_at = begin + n_bytes / (rate * 1e6)
            return begin - now

    def throttle(self, n_bytes: int) -> None:
        """Wait until the emulated disk may start reading ``n_bytes`` (blocking)."""
        delay = self.reserve(n_bytes)
        if delay > 0:
            self._sleep(delay)
