"""A session's complete rounds, without widgets: what each was run with, what it measured,
where it sat on the window's time axis, and how it reads as a table row.

The table's figure columns are the metric registry's round figures (``summary=True``), its
knob columns the knobs a sweep varies (engine.knobs.SWEPT): a figure or knob declared
there becomes a column here without an edit. A knob the round's kind does not use (shard
size in an expert-streaming round) is left blank rather than shown with a value it ignored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from shardscope.app.devices.round_projection import RoundProjection
from shardscope.app.experts.expert_charts import expert_values
from shardscope.app.run_view.charts import sample_values
from shardscope.engine.knobs.knobs import KNOBS, SWEPT
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.metric_registry import METRICS
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.widgets import TableColumn

FIGURES = tuple(m for m in METRICS if m.summary)


@dataclass(frozen=True)
class MixedValue:
    """A knob's two values in a round it changed during: shown and exported as "200→605 MiB",
    sorted by the value it ended with."""

    old: object
    new: object
    text: str

    @property
    def sort_key(self):
        return self.new

    def __str__(self) -> str:
        return self.text


@dataclass
class Round:
    number: int  # 1, 2, … in the order the session completed them
    settings: RunSettings  # the window's settings when the round ended (a live change applies between tokens)
    summary: object  # RunSummary or ExpertRunSummary
    start_t: float  # window time of its first sample
    end_t: float  # window time of its summary
    projection: RoundProjection | None = None
    # The settings it began with when a knob changed live during it (its figures then mix
    # both: a round that ran 20 s at 200 MiB and a moment at 605 is neither), else None.
    start_settings: RunSettings | None = None
    # What stalled the round's host ("" for a clean round: engine.measure.token_stalls): its
    # measured tok/s is the host's, not the settings'; its projection leaves the stalled tokens out.
    stall: str = ""

    def mixed_knobs(self) -> list[str]:
        """The swept knobs whose value changed during the round."""
        a = self.start_settings
        if a is None:
            return []
        return [k for k in SWEPT if getattr(a, k) != getattr(self.settings, k)]

    def mixed_text(self) -> str:
        """"budget 200→605 MiB, threads 2→4", or "" for a round run at one setting."""
        return ", ".join(f"{KNOBS[k].brief} {KNOBS[k].text(getattr(self.start_settings, k))}\u2192"
                         f"{KNOBS[k].text(getattr(self.settings, k))}" for k in self.mixed_knobs())

    @property
    def kind(self) -> str:
        """"experts" for an expert-streaming round, "layers" otherwise (which knobs it used)."""
        return "experts" if getattr(self.summary, "expert_policy", "") else "layers"

    def label(self) -> str:
        return f"round {self.number}"


def round_columns() -> list[TableColumn]:
    knobs = [TableColumn(k, f"{KNOBS[k].brief} {KNOBS[k].unit}".rstrip(), KNOBS[k].label) for k in SWEPT]
    figures = [TableColumn(m.name, f"{m.label} ({'of 1' if m.fraction else m.unit})".replace(" ()", ""),
                           m.source or m.label) for m in FIGURES]
    return [TableColumn("round", "round", "complete rounds in the order they ended"),
            TableColumn("model", "model", "the model file"), *knobs, *figures,
            TableColumn("device", "device", "the device the round is projected onto"),
            TableColumn("bound", "bound", "what limits the projection: ssd, dram or compute"),
            TableColumn("host", "host stalled",
                        "the host stalled this round (a token far above its round's median, the host's CPU steal "
                        "≥ 20 %, or the process paused): its measured tok/s is the host's; the projection leaves "
                        "the stalled tokens out"),
            TableColumn("mixed", "mixed",
                        "knobs changed while the round ran: its figures mix both settings (old→new)")]


def round_values(r: Round) -> dict[str, object]:
    s = r.summary
    values: dict[str, object] = {"round": r.number, "model": s.model_filename}
    mixed = r.mixed_knobs()
    for key in SWEPT:
        streams = KNOBS[key].streams
        if streams and streams != r.kind:
            values[key] = None
        elif key in mixed:  # both values, never the end's alone
            old, new = getattr(r.start_settings, key), getattr(r.settings, key)
            values[key] = MixedValue(old, new, f"{KNOBS[key].text(old)}\u2192{KNOBS[key].text(new)}")
        else:
            values[key] = getattr(r.settings, key)
    if values.get("expert_cache_mb") == 0 and getattr(s, "expert_cache_mb", 0):
        values["expert_cache_mb"] = s.expert_cache_mb  # "auto": the size the round ran with, not the knob's 0
    for m in FIGURES:
        value = getattr(s, m.name, None)
        values[m.name] = None if isinstance(value, float) and math.isnan(value) else value
    p = r.projection
    values["projected_ts"] = p.tok_s if p is not None else None
    values["device"] = p.device_name if p is not None else ""
    values["bound"] = p.bound if p is not None else ""
    values["host"] = r.stall
    values["mixed"] = r.mixed_text()
    return values


def round_tips(r: Round) -> dict[str, str]:
    return {"projected_ts": r.projection.tooltip()} if r.projection is not None else {}


def baseline_values(r: Round) -> dict[str, object]:
    """What the numbers panel holds a round against: its summary row and its projection."""
    values = dict(r.summary.row())
    values["projected_ts"] = r.projection.tok_s if r.projection is not None else None
    return values


def round_curves(r: Round, timeline: Iterable[tuple[float, MetricsSample]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The round's chart curves from the session timeline: (seconds from its start, curve → y)."""
    times: list[float] = []
    rows: list[dict[str, float]] = []
    for offset, s in timeline:
        t = offset + s.t_s
        if r.start_t <= t <= r.end_t:
            times.append(t - r.start_t)
            rows.append({**sample_values(s), **expert_values(s)})
    keys = rows[0].keys() if rows else ()
    return np.array(times, dtype=float), {k: np.array([row[k] for row in rows], dtype=float) for k in keys}


def rounds_csv_rows(rounds: Iterable[Round], baseline: int | None) -> tuple[list[str], list[dict]]:
    """The exported rounds table: its columns, a "baseline" column, one row per round."""
    columns = [c.key for c in round_columns()] + ["baseline"]
    rows = [{**round_values(r), "baseline": "yes" if r.number == baseline else ""} for r in rounds]
    return columns, rows
