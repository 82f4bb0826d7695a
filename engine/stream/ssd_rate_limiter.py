"""An emulated SSD: sequential bandwidth, a latency per request and a queue depth.

A read of an expert's 0.35 MiB costs more than its bytes ÷ bandwidth: each request
waits a fixed latency before its data flows, and a device overlaps only so many
requests (its queue depth). The model, used both by the emulator below and by the
projection (``engine.devices.projection``), so the two cannot disagree:

- a read is split into requests of at most ``REQUEST_BYTES`` (one per contiguous
  range at least: an expert's three tensor slices are three requests);
- a request takes a free queue slot (``queue_depth`` of them), waits ``latency_s``,
  then its bytes flow through the one shared channel at ``mb_s`` (10^6 B/s), after
  the bytes booked before it; the slot frees when its last byte has arrived.

So a lone small read costs latency + bytes/rate; many requests in flight hide the
latency behind each other's transfers, and a device of queue depth 1 pays it per
request. With latency 0 this is the old bandwidth-only emulator exactly.

Idle time is never banked — a real disk cannot read ahead of its requests — so after
a pause the next read starts afresh, not in a burst.

Two ways to pace a real read (both keep a caller's bytes no faster than the device):
``throttle(n)`` waits *before* the read until the emulated transfer would start (the
host's own read time then stands in for the transfer); ``with limiter.pacing(sizes):``
does the read first and sleeps *after* it until the emulated finish, so a load takes
max(emulated, this host's real read) — the faithful one where the host disk is faster
than the emulated device.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

REQUEST_BYTES = 512 * 1024  # largest request a read is split into (PowerInfer-2's "512 KB reads")

# Latency and queue depth of the emulated device for this process (bench --ssd-latency-us /
# --ssd-queue-depth set them); the bandwidth is each run's own ssd_mb_s knob.
_emulated = {"latency_s": 0.0, "queue_depth": 32}


def configure_emulation(latency_us: float = 0.0, queue_depth: int = 32) -> None:
    """Every SSD limiter created after this call emulates this request latency and queue depth."""
    if not (isinstance(latency_us, (int, float)) and math.isfinite(latency_us) and latency_us >= 0):
        raise ValueError(f"ssd latency must be a finite number of µs ≥ 0, got {latency_us!r}")
    if isinstance(queue_depth, bool) or not isinstance(queue_depth, int) or queue_depth < 1:
        raise ValueError(f"ssd queue depth must be a whole number ≥ 1, got {queue_depth!r}")
    _emulated.update(latency_s=latency_us * 1e-6, queue_depth=queue_depth)


def emulated_latency() -> tuple[float, int]:
    """(latency in seconds, queue depth) new limiters take."""
    return _emulated["latency_s"], _emulated["queue_depth"]


def split_requests(range_bytes: Iterable[int]) -> list[int]:
    """Request sizes for reads of these contiguous ranges (each range ≥ 1 request)."""
    out: list[int] = []
    for n in range_bytes:
        n = int(n)
        if n <= 0:
            continue
        full, rest = divmod(n, REQUEST_BYTES)
        out += [REQUEST_BYTES] * full + ([rest] if rest else [])
    return out


def _schedule(now: float, sizes: list[int], channel_free: float, slots: list[float],
              rate_b_s: float, latency_s: float) -> tuple[float, float]:
    """Book ``sizes`` at ``now``; returns (finish of the last byte, the channel's new free time).
    ``slots`` (a heap of slot free times) is updated in place."""
    finish = now
    for size in sizes:
        start = max(now, heapq.heappop(slots))
        begin = max(start + latency_s, channel_free)
        channel_free = begin + size / rate_b_s
        heapq.heappush(slots, channel_free)
        finish = max(finish, channel_free)
    return finish, channel_free


@dataclass(frozen=True)
class SsdModel:
    """A device's reads: sequential MB/s, seconds of latency per request, requests in flight."""

    mb_s: float
    latency_s: float = 0.0
    queue_depth: int = 32

    def batch_seconds(self, sizes: list[int]) -> float:
        """Seconds to read requests of ``sizes`` issued together on an idle device."""
        if not sizes:
            return 0.0
        finish, _ = _schedule(0.0, list(sizes), 0.0, [0.0] * self.queue_depth, self.mb_s * 1e6, self.latency_s)
        return finish

    def read_seconds(self, n_bytes: float, n_requests: float, n_batches: float = 1.0) -> float:
        """Seconds for ``n_bytes`` in ``n_requests`` equal requests, spread over ``n_batches``
        reads that each wait for the one before (a MoE layer's misses are one batch). Fractional
        requests per batch interpolate between the whole numbers around them."""
        if n_bytes <= 0:
            return 0.0
        if n_requests <= 0 or n_batches <= 0 or self.latency_s <= 0:
            return n_bytes / (self.mb_s * 1e6)
        per_batch = n_requests / n_batches
        size = n_bytes / n_requests
        lo = max(1, math.floor(per_batch))
        hi = max(lo, math.ceil(per_batch))
        t_lo = self.batch_seconds([size] * lo) * per_batch / lo if per_batch < 1 else self.batch_seconds([size] * lo)
        t_hi = self.batch_seconds([size] * hi)
        frac = 0.0 if hi == lo else (per_batch - lo) / (hi - lo)
        return n_batches * (t_lo + frac * (t_hi - t_lo))

    def describe(self) -> str:
        return (f"{self.mb_s:g} MB/s sequential, {self.latency_s * 1e6:g} µs per request, "
                f"queue depth {self.queue_depth}")


class SsdRateLimiter:
    def __init__(self, mb_s: float = 0.0, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep, latency_s: float | None = None,
                 queue_depth: int | None = None):
        self._mb_s = max(0.0, float(mb_s))
        default_latency, default_depth = emulated_latency()
        self.latency_s = default_latency if latency_s is None else max(0.0, float(latency_s))
        self._queue_depth = default_depth if queue_depth is None else max(1, int(queue_depth))
        self._clock = clock
        self._sleep = sleep
        self._free_at = 0.0  # when the emulated channel has delivered everything booked
        self._slots = [0.0] * self._queue_depth
        self._lock = threading.Lock()

    @property
    def mb_s(self) -> float:
        """The emulated rate in 10^6 B/s; 0 = no emulation."""
        return self._mb_s

    @mb_s.setter
    def mb_s(self, value: float) -> None:
        self._mb_s = max(0.0, float(value))

    @property
    def queue_depth(self) -> int:
        return self._queue_depth

    @property
    def model(self) -> SsdModel:
        return SsdModel(self._mb_s, self.latency_s, self._queue_depth)

    def _book(self, sizes: list[int]) -> tuple[float, float]:
        """(now, emulated finish) of requests ``sizes`` booked now; finish = now when off."""
        now = self._clock()
        rate = self._mb_s
        if rate <= 0 or not sizes:
            return now, now
        with self._lock:
            if len(self._slots) != self._queue_depth:
                self._slots = [0.0] * self._queue_depth
            finish, self._free_at = _schedule(now, sizes, self._free_at, self._slots, rate * 1e6, self.latency_s)
        return now, finish

    def reserve(self, n_bytes: int) -> float:
        """Book ``n_bytes`` on the emulated disk; seconds to wait before reading them."""
        now, finish = self._book(split_requests([n_bytes]) if self.latency_s > 0 else [max(0, int(n_bytes))])
        if finish <= now:
            return 0.0
        return max(0.0, finish - n_bytes / (self._mb_s * 1e6) - now)

    def throttle(self, n_bytes: int) -> None:
        """Wait until the emulated disk may start reading ``n_bytes`` (blocking)."""
        delay = self.reserve(n_bytes)
        if delay > 0:
            self._sleep(delay)

    @contextmanager
    def pacing(self, range_bytes: Iterable[int]) -> Iterator[None]:
        """Around a real read of these contiguous ranges: it ends no sooner than the emulated one."""
        _, finish = self._book(split_requests(range_bytes))
        yield
        left = finish - self._clock()
        if left > 0:
            self._sleep(left)
