"""What ``--verify``'s outside watch cost the run it checked: its tok/s against a plain run's.

A verified run is watched by a second process (engine/measure/outside_watch.py) that reads
this process's /proc files and the model's page-cache residency around every sample; the
reads take CPU and the walks of /proc/<pid>/smaps hold the process's memory map. Figures
that agree with their sources say nothing about a run the watch slowed (issue 48: plain
`bench` 34.9–39.6 tok/s, with --verify 10.4–13.9, "avg_ts agrees"). So after a verified run,
the same settings run once more without the watch, and the report says how much slower the
verified run was: within ``COST_LIMIT`` the watch is cheap enough that the verified figures
are the plain run's; above it the report says the figures are those of a slowed run.

Both runs are measured now, one after the other, on the same host (a shared host moves a
single pair by its own noise: on this 2-core VM rounds of one setting differ by 10-30 %).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.run_summary import RunSummary

__all__ = ["COST_LIMIT", "WatchCost", "watch_cost", "cost_line"]

COST_LIMIT = 0.10


@dataclass(frozen=True)
class WatchCost:
    verified_ts: float
    plain_ts: float

    @property
    def slower(self) -> float:
        """How much slower the verified run was, as a share of the plain run's tok/s (negative: faster)."""
        if not (self.plain_ts > 0 and math.isfinite(self.verified_ts)):
            return math.nan
        return 1.0 - self.verified_ts / self.plain_ts

    @property
    def within(self) -> bool:
        return math.isfinite(self.slower) and self.slower <= COST_LIMIT


def _plain_run(settings: RunSettings) -> RunSummary:
    from shardscope.engine.runs.bench_command import run_repetitions

    return run_repetitions(settings, 1)[-1]


def watch_cost(settings: RunSettings, verified: RunSummary,
               run_plain: Callable[[RunSettings], RunSummary] = _plain_run) -> WatchCost:
    """Run ``settings`` once without the watch and set its tok/s beside the verified run's."""
    return WatchCost(verified.avg_ts, run_plain(settings).avg_ts)


def cost_line(cost: WatchCost) -> str:
    """"verify     watch cost: …" — how much slower the verified run was than a plain one."""
    head = (f"verify     watch cost: {cost.verified_ts:.3g} tok/s verified, {cost.plain_ts:.3g} tok/s in a plain run "
            f"of the same settings just after")
    if not math.isfinite(cost.slower):
        return f"{head}: not compared (a run without decoded tokens)"
    if cost.slower <= 0:
        return f"{head}: the watch cost nothing measurable (the verified run was {-100 * cost.slower:.0f} % faster)"
    if cost.within:
        return f"{head}: {100 * cost.slower:.0f} % slower, within the {100 * COST_LIMIT:.0f} % the watch may cost"
    return (f"{head}: {100 * cost.slower:.0f} % slower, more than the {100 * COST_LIMIT:.0f} % the watch may cost — "
            f"the verified figures are those of a run the watch slowed; the plain run's are the settings' own")
