"""How much of the machine others took (/proc/stat's steal), and the CPU one thread got
(CLOCK_THREAD_CPUTIME_ID): a token's compute is the decode thread's time on a CPU, not its
wall time, on a 2-core VM that others' runs share.

Steal is CPU time the host ran other guests on this VM's CPUs: a round during which it is
high was slowed by the host, not by its settings (issue 48: one 18-s host stall took a
round's projection from 16.5 to 1.52 tok/s). A reading is the machine's (steal, all) ticks;
``share`` divides the steal between two readings by all the ticks between them.
NaN where there is no /proc/stat (macOS): no flag is raised from a number never read.
"""

from __future__ import annotations

import math
import time

__all__ = ["reading", "share", "thread_cpu_s"]


def reading(stat_path: str = "/proc/stat") -> tuple[float, float]:
    """(steal, all) CPU ticks of the machine so far; (NaN, NaN) without /proc/stat."""
    try:
        with open(stat_path) as f:
            ticks = [float(v) for v in f.readline().split()[1:]]
        return ticks[7], sum(ticks[:8])
    except (OSError, IndexError, ValueError):
        return math.nan, math.nan


def share(before: tuple[float, float], after: tuple[float, float]) -> float:
    """The steal share of the CPU time between two readings (NaN when unknown or no ticks passed)."""
    steal, total = after[0] - before[0], after[1] - before[1]
    return steal / total if total > 0 and math.isfinite(steal) else math.nan


def thread_cpu_s() -> float:
    """Seconds the calling thread has run on a CPU so far (CLOCK_THREAD_CPUTIME_ID, exact: the
    scheduler's schedstat is updated only at ticks and switches, 0 or 3 ms for a 1-ms token)."""
    try:
        return time.thread_time()
    except (OSError, AttributeError):
        return math.nan
