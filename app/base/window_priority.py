"""The window's threads give way to the run they measure (issue 32).

On two cores a decode fills both, and llama.cpp's threads meet at a barrier every graph node:
each time the GUI thread woke (a chart, the numbers, the expert map: 5-7 % of a core in all) it
preempted one decode thread and the other waited for it. The MoE run in the window computed
5-15 % longer a token than the same run headless in the same minutes. At nice +10 the kernel runs
the window's work in the gaps the run leaves (its expert reads, its sampling) rather than in the
middle of a token: compute per token equal to headless's within noise (docs/decisions.md, stop 45).
The window still gets the few per cent it needs when the cores are full (a nice-10 thread gets
~10 % of a core beside a nice-0 one), later: the event loop's stall p99 was 18-43 ms in the drift
sessions and 36 ms beside a CPU-bound dense run that leaves no gaps (24 ms at nice 0), within the
50 ms goal. Nice 5 did not close the MoE gap in its one session.

Only the window's own threads are lowered: the run process must run at the priority a user's
shell gives ``shardscope bench``. A process inherits the nice value of the thread that starts it
and cannot lower it again without privileges, so runs are started (``at_normal_priority``) from a
thread made before the lowering. Threads the GUI thread starts later (a search's, a background
task's) inherit the lowering: within the window nothing changes relative to anything else.

Linux only: there a nice value belongs to a thread. On macOS it is the whole process's and its
children's, so there the window leaves its priority alone.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

__all__ = ["WINDOW_NICE", "at_normal_priority", "give_way_to_runs"]

WINDOW_NICE = 10

T = TypeVar("T")

_lock = threading.Lock()
# One worker, made before the lowering and reused for every call: a worker made later would be
# made by the (lowered) caller and inherit its priority.
_launcher: ThreadPoolExecutor | None = None


def give_way_to_runs() -> int | None:
    """Lowers the calling thread (the GUI thread) by WINDOW_NICE, once per process; returns its nice
    value now, or None where the window keeps its priority (not Linux, or the kernel refused)."""
    global _launcher
    if sys.platform != "linux":
        return None
    tid = threading.get_native_id()
    with _lock:
        if _launcher is None:
            launcher = ThreadPoolExecutor(1, thread_name_prefix="normal-priority")
            launcher.submit(lambda: None).result()  # its thread made now, before the lowering
            try:
                os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + WINDOW_NICE))
            except OSError:
                launcher.shutdown()
                return None
            _launcher = launcher
        return os.getpriority(os.PRIO_PROCESS, tid)


def at_normal_priority(fn: Callable[[], T]) -> T:
    """``fn()`` (start a run process, a bench's headless child) on a thread at the priority the
    process started with; called here directly when nothing was lowered."""
    launcher = _launcher
    return fn() if launcher is None else launcher.submit(fn).result()
