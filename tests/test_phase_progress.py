"""PhaseProgress and the load's callback (LoadWatch) on a fake clock: no model, no timing.

The window and CLI tests show them on real runs; here the arithmetic: the fraction
never goes back, a finished phase shows 100 % once, the estimate follows the pace, the
emulated disk holds the load to its rate and Stop cancels it mid-wait.
"""

from __future__ import annotations

import math
import threading

from shardscope.engine.measure.phase_progress import PhaseProgress
from shardscope.engine.measure.progress_words import progress_text
from shardscope.engine.stream.load_progress import LoadWatch


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_fraction_never_goes_back_and_a_finished_phase_shows_100_percent_once():
    clock = FakeClock()
    p = PhaseProgress(clock)
    assert p.snapshot() is None
    p.begin("loading", total_bytes=1000, read_bytes=500, bytes_from_reads=True)
    first = p.snapshot(read_bytes=500)
    assert first.fraction == 0.0 and first.done_bytes == 0
    clock.t = 1.0
    assert p.snapshot(read_bytes=800).fraction == 0.3  # 300 of 1000 bytes read since the start
    p.report(fraction=0.2)  # a source behind the reads does not pull the bar back
    clock.t = 2.0
    s = p.snapshot(read_bytes=800)
    assert s.fraction == 0.3 and s.read_bytes == 300
    clock.t = 3.0
    s = p.snapshot(read_bytes=1100)
    assert s.fraction == 0.6 and math.isclose(s.eta_s, 0.4 * 3.0 / 0.6)  # 0.6 in 3 s: 0.4 more in 2 s
    assert "loading 60 %" in progress_text(s) and "600 B" not in progress_text(s)
    p.end(completed=True, read_bytes=1200)
    final = p.snapshot()
    assert final.fraction == 1.0 and final.eta_s == 0.0
    assert p.snapshot() is None  # once


def test_layers_give_the_prompt_pass_its_fraction_and_a_stopped_phase_no_100_percent():
    p = PhaseProgress(FakeClock())
    p.begin("prompt", n_layers=16)
    assert math.isnan(p.snapshot().fraction)  # nothing says how far yet: busy, not 0 %
    p.at_layer(8)
    s = p.snapshot()
    assert s.fraction == 0.5 and s.layer == 8 and "layer 9 of 16" in progress_text(s)
    p.end()  # stopped
    assert p.snapshot() is None


def test_an_emulated_disk_holds_the_load_to_its_rate_and_stop_cancels_the_wait():
    clock, reads, stop = FakeClock(), [0], threading.Event()
    p = PhaseProgress(clock)
    watch = LoadWatch(p, stop, file_bytes=100_000_000, ssd_mb_s=10, read_bytes=lambda: reads[0], clock=clock,
                      sleep=clock.sleep)
    reads[0] = 100_000_000  # MAP_POPULATE read the whole file before the first callback
    assert watch(0.0) is True
    assert math.isclose(clock.t, 10.0, rel_tol=1e-6)  # 100 MB at 10 MB/s
    assert p.snapshot().done_bytes == 100_000_000
    # Stop while the emulated disk is still delivering: the callback says "cancel".
    clock2, stop2 = FakeClock(), threading.Event()
    p2 = PhaseProgress(clock2)

    def sleep_then_stop(s: float) -> None:
        clock2.sleep(s)
        if clock2.t > 1.0:
            stop2.set()

    reads2 = [0]
    watch2 = LoadWatch(p2, stop2, file_bytes=100_000_000, ssd_mb_s=10, read_bytes=lambda: reads2[0],
                       clock=clock2, sleep=sleep_then_stop)
    reads2[0] = 100_000_000
    assert watch2(0.0) is False and clock2.t < 1.2  # within a slice of the stop
    # No emulation: the callback never waits, and Stop cancels at the next tensor.
    watch3 = LoadWatch(PhaseProgress(), stop, file_bytes=1, ssd_mb_s=0, read_bytes=lambda: 0)
    assert watch3(0.5) is True
    stop.set()
    assert watch3(0.6) is False


def test_a_finish_is_shown_even_when_the_next_phase_began_before_anyone_looked():
    p = PhaseProgress(FakeClock())
    p.begin("loading", total_bytes=10)
    p.report(fraction=0.5)
    p.end(completed=True)
    p.begin("prompt", n_layers=4)  # a quick cold start: no sample in between
    p.at_layer(1)
    assert (p.snapshot().phase, p.snapshot().phase) == ("loading", "prompt")
