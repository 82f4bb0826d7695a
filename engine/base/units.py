"""The project's units, stated once: memory in MiB, bandwidth in 10^6 bytes/s.

Memory follows the kernel and llama.cpp (pages, MiB); bandwidth follows disk vendors
and the device presets (an "860 MB/s" SSD reads 860·10^6 B/s). The SSD emulator, the
sampler, the run summary, the CSVs and the chart axis all divide by these two.
"""

from __future__ import annotations

MIB = 2**20  # what a field ending in _mb counts
MB_S = 1_000_000  # bytes per second in one unit of a field ending in _mb_s


def mb_per_s(n_bytes: float, seconds: float) -> float:
    """A bandwidth in 10^6 B/s; 0 when no time has passed."""
    return n_bytes / MB_S / seconds if seconds > 0 else 0.0
