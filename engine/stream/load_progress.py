"""The model load's progress callback: reports how far it got, emulates the set disk, stops on request.

llama.cpp calls the load progress callback once per tensor on the loading thread;
returning False cancels the load (``llama_model_load_from_file`` returns NULL). That
makes it the one place a load can be stopped.

How far the load got is measured two ways, because where the bytes are read depends
on how the mapping is made: llama.cpp maps with MAP_POPULATE, so the kernel reads the
whole file inside the mmap call, before the first callback (its ``read_bytes`` count
is the progress, read by the sampler); a loader that drops the populate reads little
or nothing during the load and the callback's fraction is the progress. The phase
takes the larger of the two (engine/measure/phase_progress.py).

On an emulated disk (``ssd_mb_s`` > 0) the bytes the load read may not arrive faster
than that rate: each callback waits until the emulated disk has delivered what the
kernel says was read, in slices short enough that Stop is seen within 50 ms. A file
already in the page cache is read from RAM on a phone too, so it loads at once.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from shardscope.engine.measure.phase_progress import PhaseProgress

SLICE_S = 0.05  # longest sleep between looks at the stop flag


class LoadWatch:
    def __init__(self, progress: PhaseProgress, stop: threading.Event, *, file_bytes: int, ssd_mb_s: float,
                 read_bytes: Callable[[], int], clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.progress = progress
        self.stop = stop
        self.ssd_mb_s = max(0.0, float(ssd_mb_s))
        self._read_bytes = read_bytes
        self._clock = clock
        self._sleep = sleep
        self._t0 = clock()
        self._read0 = read_bytes()
        # Emulated: the bar shows what the emulated disk delivered, not the real reads.
        progress.begin("loading", total_bytes=file_bytes, read_bytes=self._read0,
                       bytes_from_reads=self.ssd_mb_s <= 0)

    def __call__(self, fraction: float) -> bool:
        """llama.cpp's callback: False cancels the load."""
        if self.stop.is_set():
            return False
        if self.ssd_mb_s > 0 and not self._emulate_disk():
            return False
        self.progress.report(fraction=fraction)
        return not self.stop.is_set()

    def _emulate_disk(self) -> bool:
        """Wait until the emulated disk has delivered what was read; False if stopped meanwhile."""
        while True:
            read = max(0, self._read_bytes() - self._read0)
            delivered = (self._clock() - self._t0) * self.ssd_mb_s * 1e6
            self.progress.report(done_bytes=int(min(read, delivered)))
            if delivered >= read:
                return True
            if self.stop.is_set():
                return False
            self._sleep(min(SLICE_S, (read - delivered) / (self.ssd_mb_s * 1e6)))
