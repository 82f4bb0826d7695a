"""How often a live widget may redraw: as often as asked, but never more than a set share of
one core, measured on the widget's own draws.

The window shares the machine with the run it measures: on 2 cores, llama.cpp's two
threads and the GUI thread compete, and the GUI thread also holds the GIL the decode
thread's callbacks wait for. A fixed refresh rate costs whatever a frame costs on this
machine, at this window size, with this many plots: 12 Hz of a 50 ms frame took 60 % of
a core and slowed the run under it by a third (docs/decisions.md). So a widget times its
draws (paint and data hand-over together), keeps a moving average, and waits at least
cost ÷ duty between draws; a cheap frame on a fast machine still gets ``max_hz``.

A draw is timed on the wall clock, on purpose: the window's GUI thread gives way to the run it
measures (app/base/window_priority.py), so a draw the run preempted takes longer when the cores
are full, and the charts then draw less often. Charged only its CPU (``thread_time``), the window
drew more beside a busy run: its run fell to 0.89-0.91 of headless and the stall p99 rose to
49-53 ms, against 0.97 and 18-24 ms timed on the wall (docs/decisions.md, stop 45).
"""

from __future__ import annotations

__all__ = ["DrawBudget"]


class DrawBudget:
    def __init__(self, max_hz: float, duty: float, min_hz: float = 0.5, smoothing: float = 0.2) -> None:
        if not max_hz > 0 or not 0 < duty <= 1 or not 0 < min_hz <= max_hz:
            raise ValueError(f"DrawBudget: need max_hz > 0, 0 < duty <= 1, 0 < min_hz <= max_hz "
                             f"(got {max_hz}, {duty}, {min_hz})")
        self.max_hz, self.duty, self.min_hz = float(max_hz), float(duty), float(min_hz)
        self.smoothing = smoothing
        self.cost_s = 0.0  # moving average of one draw's seconds
        self.draws = 0

    def spent(self, seconds: float) -> None:
        """One draw took ``seconds`` of the GUI thread."""
        self.draws += 1
        a = 1.0 if self.draws == 1 else self.smoothing
        self.cost_s += a * (max(0.0, seconds) - self.cost_s)

    def interval_ms(self) -> int:
        """Milliseconds to wait before the next draw."""
        seconds = max(1.0 / self.max_hz, self.cost_s / self.duty)
        return max(1, round(1000.0 * min(seconds, 1.0 / self.min_hz)))

    def share(self, interval_ms: float) -> float:
        """The share of a core the draws take at ``interval_ms`` apart (benches print it)."""
        return self.cost_s / max(interval_ms / 1000.0, 1e-9)
