"""Which of a round's tokens the host stalled, and a per-token compute time they cannot move. Pure.

A token's wall time is its compute, its wait for loads (the streamer counts it) and any
stall: the process stopped (SIGSTOP, a pause of its own), the host stealing the CPU, a
swap-in. A projection that divides a round's decode seconds by its tokens takes a stall as
compute (issue 48: an 18-s host stall took a round's projection from 16.5 to 1.52 tok/s).

* A token **stalled** when its wall time exceeds ``STALL_RATIO`` × the round's median token
  time and the median by ``STALL_MIN_S`` — a bound no token of an unchanged setting reaches
  by its own work on the models here (a token's read and compute vary by 2-3x at most).
* The round's **compute per token** is the median over its un-stalled tokens of the decode
  thread's time on a CPU during the token (at most wall time − wait): half the tokens would have
  to stall to move it, and time other processes held the CPU (this 2-core VM is shared) or the
  thread slept is not the settings' compute. (Run-queue time cannot be subtracted from the wall
  time instead: a thread woken from a wait for a load queues for the CPU inside that wait, so
  both would count it.) Where no CPU times were read (not Linux): wall time − wait.
* A round is **flagged** when a token stalled, the time between its tokens' decodes (callbacks,
  a pause that fell there) exceeds ``STALL_MIN_S`` and half its decode time, its prompt pass took ``STALL_RATIO`` × the
  usual and ``STALL_MIN_S`` more, or the host's steal over the round reached ``STEAL_LIMIT``.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

__all__ = ["STALL_RATIO", "STALL_MIN_S", "STEAL_LIMIT", "stalled_tokens", "robust_compute_s", "stall_text"]

STALL_RATIO = 4.0
STALL_MIN_S = 0.25
STEAL_LIMIT = 0.2


def _outlier(x: float, usual: float) -> bool:
    return x > STALL_RATIO * usual and x - usual > STALL_MIN_S


def stalled_tokens(token_s: Sequence[float]) -> list[int]:
    """Indices of the tokens the host stalled (module doc)."""
    if len(token_s) < 2:
        return []
    usual = statistics.median(token_s)
    return [i for i, dt in enumerate(token_s) if _outlier(dt, usual)]


def robust_compute_s(token_s: Sequence[float], token_wait_s: Sequence[float],
                     token_cpu_s: Sequence[float] = ()) -> float | None:
    """The median over un-stalled tokens of min(CPU time, wall − wait); None without per-token times."""
    if not token_s or len(token_wait_s) != len(token_s):
        return None
    cpu = list(token_cpu_s) if len(token_cpu_s) == len(token_s) else [math.inf] * len(token_s)
    out = set(stalled_tokens(token_s))
    kept = [max(0.0, min(dt - w, c if math.isfinite(c) else math.inf))
            for i, (dt, w, c) in enumerate(zip(token_s, token_wait_s, cpu)) if i not in out]
    return statistics.median(kept) if kept else None


def stall_text(token_s: Sequence[float], steal_share: float = math.nan, ttft_s: float = math.nan,
               usual_ttft_s: float = math.nan, between_s: float = 0.0) -> str:
    """"" for a clean round, else what stalled: "host stalled 5.0 s (token 3); steal 31 %"."""
    parts = []
    stalled = stalled_tokens(token_s)
    if stalled:
        usual = statistics.median(token_s)
        extra = sum(token_s[i] - usual for i in stalled)
        where = ", ".join(str(i + 2) for i in stalled[:3]) + ("…" if len(stalled) > 3 else "")
        parts.append(f"host stalled {extra:.1f} s (token{'s' if len(stalled) > 1 else ''} {where})")
    if between_s > STALL_MIN_S and between_s > 0.5 * sum(token_s):
        parts.append(f"paused {between_s:.1f} s between tokens")
    if math.isfinite(ttft_s) and math.isfinite(usual_ttft_s) and _outlier(ttft_s, usual_ttft_s):
        parts.append(f"prompt pass stalled {ttft_s - usual_ttft_s:.1f} s")
    if math.isfinite(steal_share) and steal_share >= STEAL_LIMIT:
        parts.append(f"host steal {100 * steal_share:.0f} %")
    return "; ".join(parts)
