"""When a search's ranking means something.

A model that fits its budget streams nothing: shard size, prefetch depth and policy then
change no byte that is read, and a sweep or tune over them ranks measurement noise
(on a 300 MB model both named a "fastest" policy). So a search says first when the model
fits, and names a winner only when it leads by more than the run-to-run spread; settings
closer than that are reported as tied.

The spread of one setting: the standard deviation of its repeated runs (sweep -r), never
taken as less than its tokens' standard error, nor than NOISE_FLOOR of its rate — two
identical runs on this shared 2-core host differ by about that much
(tune's --min-gain default is the same 2 %).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from shardscope.engine.base.units import MIB

NOISE_FLOOR = 0.02


def _model_mb(model_path: str | None) -> tuple[str, float]:
    from pathlib import Path

    from shardscope.engine.base.bundled_model import resolve_model_path
    from shardscope.engine.layout.layout_cache import load_layout

    path = resolve_model_path(model_path)
    return Path(path).name, load_layout(path).file_size / MIB


def fits_note(model_path: str | None, budgets_mb: list[float], knobs: str) -> str | None:
    """A line to print before the search when even its smallest budget holds the whole model."""
    name, size_mb = _model_mb(model_path)
    smallest = min(budgets_mb)
    if size_mb > smallest:
        return None
    return (f"note: {name} ({size_mb:.0f} MB) fits in the budget ({smallest:g} MB"
            f"{' or more' if len(set(budgets_mb)) > 1 else ''}): nothing streams, so {knobs} change nothing read "
            f"from disk; settings are ranked only where they differ by more than the run-to-run spread")


@dataclass(frozen=True)
class Standing:
    settings: object
    mean: float  # of ``key`` over the setting's runs
    spread: float  # run-to-run, same unit
    n_runs: int


def standing(settings, summaries: list, key: str = "avg_ts") -> Standing:
    values = [getattr(s, key) for s in summaries]
    mean = statistics.fmean(values)
    rel = NOISE_FLOOR
    if len(values) > 1 and mean:
        rel = max(rel, statistics.stdev(values) / abs(mean))
    for s in summaries:  # the tokens' standard error, relative
        if s.avg_ts > 0 and s.n_gen > 2 and math.isfinite(s.stddev_ts):
            rel = max(rel, s.stddev_ts / s.avg_ts / math.sqrt(s.n_gen - 1))
    return Standing(settings, mean, abs(mean) * rel, len(values))


def rank(groups: dict, key: str = "avg_ts") -> tuple[Standing, list[Standing]] | None:
    """The best setting and the others tied with it (within both spreads); None if nothing ran.

    ``groups`` maps a setting to its finished runs' summaries."""
    stands = [standing(k, v, key) for k, v in groups.items()
              if v and all(isinstance(getattr(s, key), (int, float)) and math.isfinite(getattr(s, key)) for s in v)]
    if not stands:
        return None
    best = max(stands, key=lambda s: s.mean)
    tied = [s for s in stands if s is not best and best.mean - s.mean <= best.spread + s.spread]
    return best, sorted(tied, key=lambda s: -s.mean)


def ranking_line(groups: dict, label, what: str, key: str = "avg_ts", default=None) -> str | None:
    """"fastest here: 12.3 [11.9–12.7] (5 rounds) tok/s with …" — or, when other settings' intervals
    overlap the top one's (engine/search/interval_decision.py), that there is no winner, and which
    of them to keep (``default`` if tied, else the cheapest). ``groups`` maps a setting to its
    summaries (a sweep's warm rounds, over every pass)."""
    from shardscope.engine.search.interval_decision import choose, interval

    ivs = {k: interval([getattr(s, key) for s in v]) for k, v in groups.items() if v}
    c = choose(ivs, default=default)
    if c is None:
        return None
    top = ivs[c.top]
    if len(c.ties) == 1:
        lead = ""
        if c.runner_up is not None:
            lead = (f" (ahead of the next, {label(c.runner_up)} {ivs[c.runner_up].text()}, by {100 * c.margin:.0f} %: "
                    f"more than the run-to-run spread, the intervals do not overlap)")
        return f"{what}: {top.text()} tok/s with {label(c.top)}{lead}"
    names = "; ".join(f"{label(k)} {ivs[k].text()}" for k in c.ties)
    return (f"{what}: no clear winner: {len(c.ties)} settings' intervals overlap the top one's (the run-to-run "
            f"spread): {names}; keep {label(c.pick)} ({c.why.split(': ', 1)[-1]})")


def tune_tie_line(evaluations: list, best) -> str | None:
    """How many other measured candidates score within the spread of tune's best (None: a clear best)."""
    if best is None or best.summary is None:
        return None
    spread = standing(best.settings, [best.summary], "projected_ts").spread
    tied = [e for e in evaluations if e is not best and e.summary is not None and math.isfinite(e.score)
            and best.score - e.score <= 2 * spread]
    if not tied:
        return None
    many = len(tied) > 1
    return (f"      {len(tied)} other setting{'s score' if many else ' scores'} within the run-to-run spread "
            f"(±{100 * spread / best.score:.0f} %): the choice among them is noise, not a measured gain")


__all__ = ["fits_note", "rank", "ranking_line", "tune_tie_line", "standing", "NOISE_FLOOR"]
