"""Issue 32's goals for a window session, declared once, and the line gui_session_drift prints
against them.

Why a line of its own: the session prints a dozen figures per case, and a reader checking the
issue must find four of them and compare each with its goal. The raw last ÷ first also follows
the host (per minute, the host's steal and the headless run's speed correlated at -0.92 to -0.97:
docs/decisions.md, stop 48), so where it misses, the line gives the headless run's own last ÷ first
in the same minutes beside it, and the window's against it: a window that slowed by itself misses
alone, a host that slowed takes both down. The line judges the figures; it corrects none.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GOALS", "Goal", "goals_line"]


class Goal(NamedTuple):
    name: str
    at_least: float | None  # the figure must be >= this (or <= at_most)
    at_most: float | None = None


GOALS = {
    "first": Goal("window/headless first minute", 0.90),
    "last": Goal("window/headless last minute", 0.90),
    "drift": Goal("window last/first", 0.95),
    "rss": Goal("RSS growth %", None, 5.0),
}


def _met(goal: Goal, value: float) -> bool:
    if value != value:  # NaN: no figure, no pass
        return False
    return (goal.at_least is None or value >= goal.at_least) and (goal.at_most is None or value <= goal.at_most)


def goals_line(figures: dict[str, float], host_drift: float) -> str:
    """``figures``: the session's value for each key of GOALS; ``host_drift``: the headless run's
    last ÷ first in the same minutes. One line: each goal, its figure, met or MISSED."""
    parts = []
    for key, goal in GOALS.items():
        value = figures[key]
        bound = f">= {goal.at_least:g}" if goal.at_least is not None else f"<= {goal.at_most:g}"
        word = "met" if _met(goal, value) else "MISSED"
        part = f"{goal.name} {value:.2f} ({bound}: {word}"
        if key == "drift" and word == "MISSED":
            part += (f"; headless {host_drift:.2f} in the same minutes, window/headless last/first "
                     f"{figures['last'] / figures['first']:.2f}")
        parts.append(part + ")")
    return "goals: " + ", ".join(parts)
