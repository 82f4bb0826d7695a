"""The verdict of ``bench --verify``: one Check per pair (engine figure, independent value,
the differences of the points compared), the report of a run, the exit code and the text.

Apart from verify.py, which runs the model and the outside watcher and forms the pairs:
what "agrees", "OFF" and "not checked" mean is decided here once, for the CLI, the tests
and the benches alike (docs/cross-checks.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from shardscope.engine.stream.run_summary import RunSummary

TOLERANCE = 0.05


def relative_difference(engine: float, outside: float, floor: float = 0.0) -> float:
    """(engine − outside) / outside, with a floor under the denominator for figures near 0."""
    den = max(abs(outside), floor)
    if den == 0:
        return 0.0 if engine == 0 else math.inf
    return (engine - outside) / den


@dataclass
class Check:
    figure: str  # the engine's figure, as a user sees it
    source: str  # where the independent value comes from
    engine: float  # the engine's value (last point for series)
    outside: float
    diffs: list[float]  # relative differences, one per point compared
    unit: str = ""
    relation: str = "="  # "≤": the source is device-wide, an upper bound; "≥": the source counts a subset
    # Levels (RSS, resident bytes) step by whole shards, and within the ~15 ms between
    # the two outside readings around a sample (GIL hand-offs in this process on a
    # loaded machine) they can step away and back. For them the median must agree
    # within TOLERANCE and every point must lie within what can move inside one
    # bracket of the readings around it — loads in flight + readahead — stated here:
    allowance_mb: float | None = None
    excess_mb: float = 0.0  # the largest distance of a point beyond what it was compared with
    note: str = ""
    single_instant: bool = False  # a peak: one reading each side, only the allowance applies
    # A bracket pair compares the engine with two outside readings around it: the lower one here,
    # ``outside`` the upper, so the line prints the range itself, never one end joined by "=".
    outside_lo: float = math.nan

    def _within(self, d: float) -> bool:
        if self.relation == "≤":
            return d <= TOLERANCE
        if self.relation == "≥":
            return d >= -TOLERANCE
        return abs(d) <= TOLERANCE

    @property
    def share(self) -> float:
        return sum(self._within(d) for d in self.diffs) / len(self.diffs) if self.diffs else math.nan

    @property
    def median(self) -> float:
        return statistics.median(self.diffs) if self.diffs else math.nan

    @property
    def worst(self) -> float:
        return max(self.diffs, key=abs) if self.diffs else math.nan

    @property
    def checked(self) -> bool:
        """Whether at least one point was compared. A pair with nothing to compare (its note says
        why) is *not checked*: never counted as agreeing, reported under its own word."""
        return bool(self.diffs)

    @property
    def ok(self) -> bool:
        """The compared points agree (False when nothing was compared: see ``checked``)."""
        if not self.diffs:
            return False
        if self.allowance_mb is None:
            return all(self._within(d) for d in self.diffs)
        return (self.single_instant or self._within(self.median)) and self.excess_mb <= self.allowance_mb


@dataclass
class VerifyReport:
    label: str
    summary: RunSummary
    checks: list[Check] = field(default_factory=list)

    @property
    def unchecked(self) -> list[Check]:
        """Pairs where nothing could be compared (each with its note saying why)."""
        return [c for c in self.checks if not c.checked]

    @property
    def disagreeing(self) -> list[Check]:
        """Pairs that were compared and do not agree."""
        return [c for c in self.checks if c.checked and not c.ok]

    @property
    def agreed(self) -> bool:
        """Every pair that was compared agrees (not-checked pairs aside)."""
        return not self.disagreeing

    @property
    def ok(self) -> bool:
        """Every pair was compared and agrees: a pair with nothing compared is no pass."""
        return all(c.ok for c in self.checks)

    def check(self, figure: str) -> Check:
        return next(c for c in self.checks if c.figure == figure)


EXIT_DISAGREE = 1  # a compared pair is off (bench --verify's exit code)
EXIT_UNCHECKED = 3  # every compared pair agrees, but some had nothing to compare (2 is bad input)


def verdict_counts(report: VerifyReport) -> str:
    """"13 of 15 checked, 13 agree, 2 not checked: <pair>: <why>; …" — the one-line verdict
    (agree: within TOLERANCE, or a level's allowance)."""
    n, checked = len(report.checks), [c for c in report.checks if c.checked]
    agree = sum(c.ok for c in checked)
    text = f"{len(checked)} of {n} checked, {agree} agree"
    if report.disagreeing:
        text += (f", {len(report.disagreeing)} OFF by more than {TOLERANCE:.0%}: "
                 + "; ".join(c.figure for c in report.disagreeing))
    if report.unchecked:
        text += (f", {len(report.unchecked)} not checked: "
                 + "; ".join(f"{c.figure}: {c.note or 'nothing compared'}" for c in report.unchecked))
    return text


def exit_code(report: VerifyReport, accept_unchecked: bool = False) -> int:
    """0: every pair compared and agreed; EXIT_DISAGREE: a compared pair is off; EXIT_UNCHECKED:
    the compared pairs agree but some pair had nothing to compare (0 with ``accept_unchecked``)."""
    if report.disagreeing:
        return EXIT_DISAGREE
    if report.unchecked and not accept_unchecked:
        return EXIT_UNCHECKED
    return 0


def format_report(report: VerifyReport, accept_unchecked: bool = False) -> list[str]:
    """One line per pair: engine figure, independent value, median and worst difference, verdict
    (agrees / OFF / NOT CHECKED); the last line counts them."""
    lines = [f"verify     {report.label}"]
    for c in report.checks:
        if not c.checked:
            verdict = "NOT CHECKED"
        elif not c.ok:
            verdict = f"OFF by more than {TOLERANCE:.0%}"
        elif c.allowance_mb is not None:
            verdict = "agrees (median; every point within the allowance)"
        else:
            verdict = "agrees"
        diff = (f"median {c.median:+.1%}, worst {c.worst:+.1%}, {c.share:.0%} of {len(c.diffs)} within"
                if c.diffs else f"n/a ({c.note or 'nothing compared'})")
        lines.append(f"  {c.figure:<42} {pair_text(c)} {c.unit:<16} {diff:<40} {verdict}   [{c.source}]")
        if c.note and c.diffs:
            lines.append(f"  {'':<42} {c.note}")
    if report.unchecked and accept_unchecked:
        lines.append(f"verify     {len(report.unchecked)} not-checked "
                     f"{'pair' if len(report.unchecked) == 1 else 'pairs'} accepted (--accept-unchecked): "
                     "exit 0, though they compared nothing")
    lines.append(f"verify     {verdict_counts(report)}")
    return lines


def _num(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.4g}"


def pair_text(c: Check) -> str:
    """The two figures compared, as printed: "=" (or the bound's "≤"/"≥") only when it holds at the
    printed precision; "≈" for an agreeing pair that differs there, "≠" for one that is off; a
    bracket as its range; "–" for a pair that compared nothing (no figure to show)."""
    engine, outside = _num(c.engine), _num(c.outside)
    if not c.checked:
        return f"{'–':>10} {'':1} {'–':<10}"
    lo = _num(c.outside_lo)
    if math.isfinite(c.outside_lo) and lo != outside:
        return f"{engine:>10} in {lo + '–' + outside:<10}"
    shown_e, shown_o = float(engine), float(outside)
    holds = {"=": shown_e == shown_o, "≤": shown_e <= shown_o, "≥": shown_e >= shown_o}[c.relation]
    rel = c.relation if holds else ("≈" if c.ok else "≠")
    return f"{engine:>10} {rel} {outside:<10}"
