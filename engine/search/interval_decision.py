"""Which candidate a search may call best: intervals, ties, and knobs with no effect. Pure.

Why intervals: one cold run per candidate ranked the host's noise (issue 48: five expert
policies 74.9-86.8 projected tok/s, "lfu best", while rounds of one unchanged setting swung
51-96). So every candidate is measured over several warm rounds and carries an interval
for its figure; a candidate is better than another only where their intervals do not meet.

* **Interval** of a candidate's per-round figures: the mean ± t(95 %, n−1) · sd / √n, never
  narrower than ``REL_FLOOR`` of the mean. The rounds of one run share its compute estimate
  (engine/measure/compute_window.py: the last 320 tokens), so their spread understates the
  spread between runs: in the window's tune twice on issue 48's MoE case one setting's two runs
  projected 1-5 % apart (auto 154 / 152, decay 152 / 148, lfu 155 / 148) while each run's rounds
  agreed within 1 %. One figure alone has no measured spread: it gets ``ONE_SAMPLE_REL`` and
  says ``measured=False``.
* **Enough rounds**: at least ``min_n``; then stop as soon as the interval lies wholly below the
  one it is compared with (it cannot win: no need to know it better), or is as narrow as
  ``target_rel``; never more than ``max_n``. One above is measured on: it may become the point
  every later candidate is compared with, so its own interval must be known.
* **Ties**: every candidate whose interval overlaps the top one's (the highest mean) is tied
  with it. Among the top and its ties the pick is the *kept* value (the search's current
  point, i.e. the default until something clearly beat it), else the *default*, else the
  cheapest (``cost_key``: fewer threads, smaller numbers, off before on, the earlier choice).
* **Margin** of a pick: how far its mean is above the best candidate it is *not* tied with,
  relative to that one's mean, and the gap between their intervals (NaN when every candidate ties).
* **No effect**: a knob that acts only on what is read (a knob with ``streams`` set) cannot
  move the projected figure when, with the compute term held at one value for all its
  candidates, their projected figures agree within ``NO_EFFECT_REL``: then the differences in
  their measured figures are the host's compute noise, and the knob is reported as having no
  effect instead of being ranked (the expert policy while the device is compute-bound).

Tested in milliseconds (tests/test_interval_decision.py); engine/search/tune.py and the sweep use it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Hashable, Sequence

__all__ = ["Interval", "interval", "enough_rounds", "Choice", "choose", "cost_key", "figure_at",
           "no_effect", "REL_FLOOR", "ONE_SAMPLE_REL", "NO_EFFECT_REL", "T95"]

REL_FLOOR = 0.03
ONE_SAMPLE_REL = 0.03
NO_EFFECT_REL = 0.01
# Two-sided 95 % Student t by degrees of freedom (n − 1); 1.96 beyond the table.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def _t95(df: int) -> float:
    if df in T95:
        return T95[df]
    below = [k for k in T95 if k < df]
    return T95[max(below)] if df <= 30 else 1.96


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int
    measured: bool = True  # False: one figure, the floor stands in for a spread never seen

    @property
    def half(self) -> float:
        return (self.hi - self.lo) / 2

    @property
    def rel(self) -> float:
        """Half-width relative to the mean (inf for a mean of 0)."""
        return self.half / abs(self.mean) if self.mean else math.inf

    def overlaps(self, other: "Interval") -> bool:
        return self.lo <= other.hi and other.lo <= self.hi

    def above(self, other: "Interval") -> bool:
        """Separated and higher."""
        return self.lo > other.hi

    def text(self, digits: int = 3) -> str:
        """"84.0 [80.1–87.9] (5 rounds)": the figure as the search decided on it."""
        def g(x: float) -> str:
            return f"{x:.{digits}g}"
        how = f"{self.n} rounds" if self.measured else "1 round: spread not measured"
        return f"{g(self.mean)} [{g(self.lo)}–{g(self.hi)}] ({how})"


def interval(values: Sequence[float]) -> Interval | None:
    """The interval of a candidate's per-round figures (module doc); None without a finite one."""
    xs = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not xs:
        return None
    mean = statistics.fmean(xs)
    if len(xs) == 1:
        half = abs(mean) * ONE_SAMPLE_REL
        return Interval(mean, mean - half, mean + half, 1, measured=False)
    half = max(_t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs)), abs(mean) * REL_FLOOR)
    return Interval(mean, mean - half, mean + half, len(xs))


def enough_rounds(values: Sequence[float], against: Interval | None = None, *, min_n: int = 3, max_n: int = 8,
                  target_rel: float = 0.03) -> bool:
    """Whether a candidate measured ``values`` so far may stop (module doc)."""
    n = len(values)
    if n >= max_n:
        return True
    if n < min_n:
        return False
    own = interval(values)
    if own is None:
        return n >= min_n  # nothing finite to narrow: more rounds will not help
    if own.rel <= target_rel:
        return True
    return against is not None and against.measured and own.hi < against.lo


def cost_key(value, choices: Sequence = ()) -> tuple:
    """Cheaper sorts first: off before on, the earlier of a knob's choices, smaller numbers."""
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, str):
        return (1, list(choices).index(value) if value in choices else len(choices), value)
    return (2, value)


@dataclass(frozen=True)
class Choice:
    """What a comparison of candidates decided."""

    pick: Hashable  # the key chosen
    top: Hashable  # the key with the highest mean (the pick unless a tie kept another)
    ties: tuple  # keys tied with the top (the pick among them included), best mean first
    margin: float  # (pick.mean − runner_up.mean) / runner_up.mean; NaN when every candidate ties
    gap: float  # pick.lo − runner_up.hi (same unit as the figure); NaN when every candidate ties
    runner_up: Hashable | None  # the best candidate not tied with the top
    why: str  # "clear", "tie: kept the current value", "tie: the default", "tie: the cheapest", "tie: the top mean …"
    intervals: dict = field(default_factory=dict, compare=False)


def choose(intervals: dict, *, keep: Hashable | None = None, default: Hashable | None = None,
           cost: dict | None = None) -> Choice | None:
    """Pick among candidates ``key → Interval`` (None entries did not run): the top, or among
    it and its ties the kept value, the default, or the cheapest (``cost``: key → sort key)."""
    ran = {k: v for k, v in intervals.items() if v is not None and math.isfinite(v.mean)}
    if not ran:
        return None
    top = max(ran, key=lambda k: ran[k].mean)
    tied = sorted((k for k in ran if ran[k].overlaps(ran[top])), key=lambda k: -ran[k].mean)
    if len(tied) == 1:
        pick, why = top, "clear"
    elif keep in tied:
        pick, why = keep, "tie: kept the current value"
    elif default in tied:
        pick, why = default, "tie: the default"
    elif cost:
        pick = min(tied, key=lambda k: (cost.get(k, ()), -ran[k].mean))
        why = "tie: the cheapest"
    else:
        pick, why = top, "tie: the top mean, no default among them"
    others = [k for k in ran if k not in tied]
    runner = max(others, key=lambda k: ran[k].mean, default=None)
    if runner is None:
        margin = gap = math.nan
    else:
        r = ran[runner]
        margin = (ran[pick].mean - r.mean) / r.mean if r.mean else math.inf
        gap = ran[pick].lo - r.hi
    return Choice(pick, top, tuple(tied), margin, gap, runner, why, dict(ran))


def figure_at(ssd_s: float, dram_s: float, compute_s: float, overlapped: bool) -> float:
    """tok/s of one token's terms combined as the roofline combines them (engine/devices/projection.py)."""
    s = max(ssd_s, dram_s, compute_s) if overlapped else ssd_s + max(dram_s, compute_s)
    return 1.0 / s if s > 0 else math.inf


def no_effect(terms: dict, rel: float = NO_EFFECT_REL) -> bool:
    """Whether a read-side knob cannot move the figure: ``terms`` maps each candidate to its rounds'
    ``(ssd_s, dram_s, compute_s, overlapped)``; with compute held at the median of all rounds,
    each candidate's median figure is taken, and they agree within ``rel`` (module doc)."""
    rows = [t for ts in terms.values() for t in ts]
    if len(terms) < 2 or not rows:
        return False
    compute = statistics.median(t[2] for t in rows)
    figures = []
    for ts in terms.values():
        if not ts:
            continue
        figures.append(statistics.median(figure_at(s, d, compute, o) for s, d, _c, o in ts))
    if len(figures) < 2 or not all(math.isfinite(f) and f > 0 for f in figures):
        return False
    return (max(figures) - min(figures)) / max(figures) <= rel
