"""Two runs taking turns on the cores (bench/goals/gui_session_drift.py): which of a run's rounds are
its speed, and how much of the machine the host took back in a span.

A turn ends between two rounds (the headless child stops itself, the window's run is stopped when
the window hears a round end), and a round's decode speed is llama.cpp's n_eval over t_eval, the
time inside decode calls. A pause (SIGSTOP) outside a round's decode calls leaves its speed as it
was; one inside adds the whole pause to its decode seconds (seen: 15.7-18 s against 0.3-1.8 s with
15-s turns). So a round whose decode seconds reach the run's shortest pause is left out, and the
turns are made long enough that no round's own decode gets near it (``turn_seconds``).
"""

from __future__ import annotations

import math
import statistics

from shardscope.engine.measure.host_steal import reading as host_steal_reading

__all__ = ["counted", "turn_seconds", "host_steal", "steal_share"]


def counted(ended, turns, who: str) -> list:
    """``who``'s rounds, ``(time it ended, Row)`` pairs, that ended within its turns (``turns``:
    ``(start, end, who)``; half a second of slack for a round heard late), less the first (its
    load) and any whose decode seconds reach the shortest pause of ``who`` (the other's turns)."""
    spans = [(a, b) for a, b, w in turns if w == who]
    shortest = min((b - a for a, b, w in turns if w != who), default=math.inf)
    ended = sorted(ended, key=lambda e: e[0])[1:]
    return [(t, r) for t, r in ended if any(a <= t <= b + 0.5 for a, b in spans)
            and r.avg_ts > 0 and r.n_gen / r.avg_ts < shortest]


def turn_seconds(rounds, at_least: float = 5.0) -> float:
    """Turns 4 x the median decode seconds of ``rounds`` (Rows after the load), ``at_least``
    seconds: a round's own decode then stays far below the shortest pause."""
    decode_s = [r.n_gen / r.avg_ts for r in rounds if r.avg_ts > 0]
    return max(at_least, 4.0 * statistics.median(decode_s)) if decode_s else 15.0


def host_steal(stat_path: str = "/proc/stat") -> tuple[float, float]:
    """(steal, all) CPU ticks of the machine so far (NaN where there is no /proc/stat: macOS).
    Steal is time the hypervisor ran others on this VM's CPUs: the host slowing the VM down.
    The engine's reader (engine/measure/host_steal.py), so the bench and the projection agree."""
    return host_steal_reading(stat_path)


def steal_share(samples, lo: float, hi: float) -> float:
    """The share of the machine's CPU time stolen between ``lo`` and ``hi`` (``samples``:
    ``(time, host_steal())`` pairs; 2.5 s of slack at the end for the sampling)."""
    inside = [v for t, v in samples if lo <= t <= hi + 2.5]
    if len(inside) < 2:
        return math.nan
    (s1, a1), (s2, a2) = inside[0], inside[-1]
    return (s2 - s1) / (a2 - a1) if a2 > a1 else math.nan
