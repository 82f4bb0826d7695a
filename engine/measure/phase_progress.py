"""How far a long phase has got: the load, the prompt pass, a synthetic model's writing.

Why its own object: the figures come from several threads — llama.cpp's load callback
(on the loading thread), the layer hooks (on the decode thread), the kernel's
``read_bytes`` (read by the sampler) — and must reach the window's status bar and the
CLI's progress line as one consistent snapshot. Writers only store numbers under a
lock; ``snapshot`` does the arithmetic on the reader's thread.

The fraction never goes back (a running maximum): a bar that jumps back reads as a
bug, and each source alone can only move forward within a phase. The rate is the
fraction's own speed (work done per second), so the estimate follows what the bar
shows; the kernel's read rate is charted next to it on the SSD chart.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One phase's progress at one moment (what the status bar and the CLI line show)."""

    phase: str  # "loading", "prompt", "synth"
    fraction: float  # 0..1; NaN while nothing says how far (the bar then shows "busy")
    done_bytes: int  # bytes of the phase's work done
    total_bytes: int  # 0 when unknown
    rate_mb_s: float  # 10^6 B/s of done_bytes over the last seconds (NaN before two readings)
    eta_s: float  # seconds left at the recent pace (NaN when unknown)
    layer: int | None  # the layer being worked on, 0-based position (None when unknown)
    n_layers: int
    elapsed_s: float
    read_bytes: int  # the kernel's read_bytes since the phase began (/proc/self/io)
    batch: int = 0  # the prompt's micro-batch being decoded, 0-based
    n_batches: int = 0  # micro-batches of the prompt (0 or 1: one pass)

    @property
    def percent(self) -> float:
        return 100.0 * self.fraction if math.isfinite(self.fraction) else math.nan


class PhaseProgress:
    """Thread-safe progress of the current phase; ``None`` snapshots between phases."""

    RATE_WINDOW_S = 3.0

    def __init__(self, clock=time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._phase: str | None = None
        self._total = 0
        self._n_layers = 0
        self._start = 0.0
        self._read0 = 0
        self._reported = math.nan  # a fraction a source reported directly (load callback, writer)
        self._done = 0  # bytes a source reported directly
        self._layer: int | None = None
        self._batch = (0, 0)  # (micro-batch, of how many) of an expert-streamed prompt
        self._bytes_from_reads = False
        self._best = 0.0
        self._history: deque = deque()
        self._final: Progress | None = None  # a finished phase's last figures, shown once

    def begin(self, phase: str, *, total_bytes: int = 0, n_layers: int = 0, read_bytes: int = 0,
              bytes_from_reads: bool = False) -> None:
        """A new phase; ``bytes_from_reads``: the kernel's read_bytes since now *are* its work."""
        with self._lock:
            self._phase = phase
            self._total = max(0, int(total_bytes))
            self._n_layers = max(0, int(n_layers))
            self._start = self._clock()
            self._read0 = read_bytes
            self._reported = math.nan
            self._done = 0
            self._layer = None
            self._batch = (0, 0)
            self._bytes_from_reads = bytes_from_reads
            self._best = 0.0
            self._history.clear()
            # An unshown finish of the phase before stays queued: the next phase may begin
            # within one sample interval (a quick cold start), and its 100 % must still show.

    def end(self, completed: bool = False, read_bytes: int = 0) -> None:
        """The phase is over; ``completed``: it finished (not stopped or failed), so the
        next snapshot shows it at 100 % once — the sampler may not have looked since the
        last step, and a bar that never reaches its end looks like a stall."""
        with self._lock:
            if self._phase is None:
                return
            if completed:
                self._best = 1.0
                self._reported = 1.0
        final = self._current(read_bytes) if completed else None
        with self._lock:
            self._phase = None
            self._final = final

    @property
    def phase(self) -> str | None:
        return self._phase

    def report(self, fraction: float | None = None, done_bytes: int | None = None) -> None:
        """A source's own figure (llama.cpp's load fraction, bytes written)."""
        with self._lock:
            if fraction is not None and math.isfinite(fraction):
                self._reported = fraction if math.isnan(self._reported) else max(self._reported, fraction)
            if done_bytes is not None:
                self._done = max(self._done, int(done_bytes))

    def at_layer(self, position: int) -> None:
        """The layer (0-based position in compute order) the phase is working on now."""
        self._layer = position  # one store: read under the GIL, no lock needed on the hot path

    def at_batch(self, batch: int, n_batches: int) -> None:
        """The prompt goes in ``n_batches`` micro-batches; ``batch`` (0-based) starts now."""
        self._batch = (batch, n_batches)  # one store, as at_layer

    def snapshot(self, read_bytes: int = 0) -> Progress | None:
        """The current phase's figures (a finished phase's 100 % first, once); ``read_bytes``:
        the kernel's counter now."""
        with self._lock:
            if self._final is not None or self._phase is None:
                final, self._final = self._final, None
                return final
        return self._current(read_bytes)

    def _current(self, read_bytes: int) -> Progress | None:
        with self._lock:
            if self._phase is None:
                return None
            now = self._clock()
            reads = max(0, read_bytes - self._read0)
            total, layer, n_layers = self._total, self._layer, self._n_layers
            batch, n_batches = self._batch
            done = self._done
            if self._bytes_from_reads:
                done = max(done, reads)
            candidates = [self._reported]
            if total > 0 and (self._bytes_from_reads or self._done):
                candidates.append(done / total)
            if layer is not None and n_layers > 0:  # the layer at work is not done yet
                candidates.append((batch + layer / n_layers) / max(n_batches, 1))
            known = [c for c in candidates if math.isfinite(c)]
            fraction = math.nan
            if known:
                self._best = max(self._best, min(1.0, max(known)))
                fraction = self._best
            if total > 0 and math.isfinite(fraction):
                done = max(done, int(fraction * total))
            self._history.append((now, fraction, done))
            while len(self._history) > 2 and now - self._history[0][0] > self.RATE_WINDOW_S:
                self._history.popleft()
            t_old, _, d_old = self._history[0]
            span = now - t_old
            rate = (done - d_old) / 1e6 / span if span > 0 else math.nan
            eta = math.nan
            if fraction >= 1.0:
                eta = 0.0
            else:  # at the pace since the oldest reading that had a fraction
                first = next(((t, f) for t, f, _ in self._history if math.isfinite(f)), None)
                if first is not None and fraction > first[1] and now > first[0]:
                    eta = (1.0 - fraction) * (now - first[0]) / (fraction - first[1])
            return Progress(self._phase, fraction, done, total, rate, eta, layer, n_layers, now - self._start, reads,
                            batch, n_batches)
