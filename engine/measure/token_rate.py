"""Rates that read sensibly whether a token takes 10 ms or 100 s.

A rate counted over a fixed time window drops to 0 between slow tokens and swings
0–100 % when a window holds part of one token; these functions count over whole
tokens instead. Pure, so tests check them in milliseconds at 0.01 and 100 tok/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MIN_TOKENS = 4  # "the last few tokens": enough to smooth one odd token, few enough to follow a change


def tokens_per_second(durations: Sequence[float], *, in_flight_s: float | None = None,
                      window_s: float = 1.0, min_tokens: int = MIN_TOKENS) -> float:
    """Decode rate over the last few tokens, held between tokens.

    ``durations`` are the decode times of finished tokens, oldest first. The rate
    counts the tokens of the last ``window_s`` seconds, at least ``min_tokens`` of
    them. ``in_flight_s`` is how long the token now computing has taken so far
    (None when nothing computes): once it is slower than the held rate, the estimate
    counts it as if it finished now, so the line bends down smoothly and never
    reaches 0 while a token is in flight. NaN before the first finished token.
    """
    if not durations:
        return math.nan
    total = 0.0
    n = 0
    for d in reversed(durations):
        if n >= min_tokens and total + d > window_s:
            break
        total += d
        n += 1
    held = n / total if total > 0 else math.nan
    if in_flight_s is None or in_flight_s <= 0 or not math.isfinite(held):
        return held
    # Replace the oldest counted token by the one in flight, as if it ended now.
    oldest = durations[-n]
    with_current = n / (total - oldest + in_flight_s)
    return min(held, with_current)


@dataclass(frozen=True)
class Tally:
    """Cumulative counters at one moment: ``part`` of ``whole`` events, after ``n_tokens``."""

    t: float
    n_tokens: int
    part: int
    whole: int


def fraction(start: Tally, end: Tally) -> float:
    d_whole = end.whole - start.whole
    return (end.part - start.part) / d_whole if d_whole > 0 else math.nan


def windowed_fraction(window_start: Tally, latest: Tally, token_marks: Sequence[Tally]) -> float:
    """A fraction (hit rate, on-time rate) over the sampling window, or per token.

    While the sampling window spans at least one whole token (two token boundaries)
    the fraction is over the window. When tokens are slower, a window holds a slice
    of one token (only pinned layers, or only streamed ones) and would swing between
    0 and 1: then it is over the last whole token, between the last two
    ``token_marks`` (tallies taken as tokens finished), and held until the next one.
    Before the first whole token it is over everything since the first mark. NaN
    when the span holds no events.
    """
    if latest.n_tokens - window_start.n_tokens >= 2 or not token_marks:
        return fraction(window_start, latest)
    if len(token_marks) >= 2:
        return fraction(token_marks[-2], token_marks[-1])
    return fraction(token_marks[0], latest)
