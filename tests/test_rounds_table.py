"""The rounds table: every complete round of a session with its settings, a pinned baseline
(deltas in the round panel, its curves faintly behind the live ones), apply and save from
any row, sorting, and the export; and the phase spans named once per kind."""

from __future__ import annotations

import csv
import re

import numpy as np
import pyqtgraph as pg
import pytest

from conftest import stop_and_wait, wait_for
from shardscope.app.rounds.rounds import FIGURES, round_columns
from shardscope.app.run_view.phase_bands import PhaseBands
from shardscope.engine.knobs.knobs import SWEPT
from shardscope.engine.measure.metric_registry import METRICS
from shardscope.widgets import RoundsTable, TableColumn
from shardscope.widgets.numbers_panel import delta_text
from shardscope.widgets.rounds_table import BASELINE_MARK


def test_columns_come_from_the_registries():
    keys = [c.key for c in round_columns()]
    # Every round figure the metric registry declares, every knob a sweep varies, nothing hand-listed.
    assert [m.name for m in METRICS if m.summary] == [m.name for m in FIGURES]
    assert all(m.name in keys for m in FIGURES) and all(k in keys for k in SWEPT)
    assert {"round", "device", "bound"} <= set(keys)


def test_the_widget_sorts_by_value_and_keeps_its_baseline_by_id(qtbot):
    table = RoundsTable([TableColumn("round", "round"), TableColumn("avg_ts", "tok/s")])
    qtbot.addWidget(table)
    pinned = []
    table.baseline_changed.connect(pinned.append)
    for rid, ts in ((1, 9.5), (2, 10.25), (3, None), (4, 2.0)):
        table.add_row(rid, {"round": rid, "avg_ts": ts})
    table.sort_by("avg_ts", descending=True)
    assert table.row_ids() == [2, 1, 4, 3]  # numerically, the missing value last
    table.sort_by("avg_ts")
    assert table.row_ids() == [4, 1, 2, 3]  # still last ascending
    table.select(1)
    table.pin_button.click()
    assert table.baseline() == 1 and pinned == [1] and table.text(1, "round") == "1"
    table.sort_by("round", descending=True)
    assert table.baseline() == 1 and table.mark(1) == BASELINE_MARK and table.is_bold(1) and not table.is_bold(2)
    table.select(1)
    assert table.pin_button.text() == "Unpin baseline"
    table.pin_button.click()
    assert table.baseline() is None and pinned == [1, None]
    assert table.mark(1) == "" and not table.is_bold(1)


def test_a_new_row_lands_in_its_sorted_place_and_a_replaced_value_moves_its_row(qtbot):
    table = RoundsTable([TableColumn("round", "round"), TableColumn("avg_ts", "tok/s"),
                         TableColumn("device", "device")])
    qtbot.addWidget(table)
    asked = []

    def tips(rid):
        def make():
            asked.append(rid)
            return {"device": f"projection of row {rid}"}
        return make

    for rid, ts in ((1, 9.5), (2, 10.25), (3, None)):
        table.add_row(rid, {"round": rid, "avg_ts": ts, "device": "phone"}, tips(rid))
    assert asked == []  # tooltips are made when one is asked for, not kept per row
    table.sort_by("avg_ts", descending=True)
    table.select(2)
    for rid, ts in ((4, 12.0), (5, 10.25), (6, None), (7, 1.0)):
        table.add_row(rid, {"round": rid, "avg_ts": ts, "device": "phone"}, tips(rid))
        assert table.row_ids() == sorted(table.row_ids(), key=_descending_missing_last(table))
    # fastest first, a tie after the row it ties with (as a stable sort puts it), missing last
    assert table.row_ids() == [4, 2, 5, 1, 7, 3, 6]
    assert table.selected() == 2  # the selection stays on its row while rows land around it
    assert table.tip(5, "device") == "projection of row 5" and asked == [5]
    assert table.tip(5, "avg_ts") == "10.25" and table.text(5, "avg_ts") == "10.2"
    table.set_cell(7, "avg_ts", 20.0, "remeasured")
    assert table.row_ids()[0] == 7 and table.tip(7, "avg_ts") == "remeasured"
    assert table.tip(7, "device") == "projection of row 7"  # the row keeps its other tips
    table.sort_by("round")
    assert table.row_ids() == [1, 2, 3, 4, 5, 6, 7] and table.selected() == 2


def test_the_table_follows_new_rounds_unless_the_user_scrolled_up(qtbot):
    table = RoundsTable([TableColumn("round", "round"), TableColumn("avg_ts", "tok/s")])
    qtbot.addWidget(table)
    table.resize(400, 220)
    table.show()
    view, bar = table.table, table.table.verticalScrollBar()
    for rid in range(1, 41):
        table.add_row(rid, {"round": rid, "avg_ts": float(rid)})
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=10_000)
    assert bar.value() == bar.maximum()  # the newest round is on screen, not round 1
    last = view.model().index(view.model().rowCount() - 1, 1)
    assert view.visualRect(last).bottom() <= view.viewport().height()
    table.resize(400, 160)  # a smaller window: still the newest rounds
    qtbot.waitUntil(lambda: view.visualRect(last).bottom() <= view.viewport().height(), timeout=10_000)
    assert bar.value() == bar.maximum()
    bar.setValue(0)  # the user looks at round 1
    table.add_row(41, {"round": 41, "avg_ts": 41.0})
    assert bar.value() == 0


def _descending_missing_last(table):
    values = dict(zip(table.row_ids(), table.column_values("avg_ts")))
    return lambda rid: (values[rid] is None, -(values[rid] or 0))


def test_phase_kinds_are_named_once_however_many_rounds(qtbot):
    from shardscope.app.run_view.charts import build_run_chart

    chart = build_run_chart()
    qtbot.addWidget(chart)
    bands = PhaseBands(chart)
    t = 0.0
    bands.phase("loading", t)
    for _ in range(12):  # twelve rounds, each with its prompt pass
        bands.phase("prompt", t + 1)
        bands.phase("generating", t + 2)
        t += 3
    bands.end(t)
    assert bands.legend_names() == ["loading", "prompt"]
    legend_labels = [label.text for _, label in chart.plot_item("memory").legend.items]
    assert legend_labels.count("prompt") == 1 and legend_labels.count("loading") == 1
    assert len([s for s in bands.spans() if s[0] == "prompt"]) == 12
    # No text sits on a span any more: nothing to overprint at any number of rounds.
    texts = [i for i in chart.plot_item("memory").items if isinstance(i, pg.InfLineLabel)]
    assert texts == []


def test_rounds_appear_with_their_settings_pin_a_baseline_and_save_a_row(qtbot, window, tmp_path):
    w = window
    w.apply_settings(w.current_settings().with_changes(n_gen=4, threads=1, budget_mb=1024))
    w.start_run()
    wait_for(qtbot, w, lambda: len(w.rounds) >= 1, 60_000)
    w.apply_settings(w.current_settings().with_changes(threads=2))  # live: the next rounds take it
    # ... until a round ran at 2 threads throughout (the one the change landed in is mixed)
    wait_for(qtbot, w, lambda: any(r.settings.threads == 2 for r in w.rounds[1:])
             and w.rounds[-1].settings.threads == 2 and not w.rounds[-1].mixed_knobs()
             and len(w.rounds) >= 3, 90_000)
    stop_and_wait(qtbot, w)
    table = w.rounds_table

    # One row per complete round, in order, with the settings the window ran it with.
    complete = [s for s in w.summaries if not s.stopped]
    assert len(w.rounds) == len(complete) == table.row_count()
    assert [r.summary for r in w.rounds] == complete
    assert table.value(1, "threads") == 1 and table.value(len(w.rounds), "threads") == 2
    assert all(table.value(r.number, "budget_mb") == 1024 for r in w.rounds)
    # The figures are the engine's summary values, not recomputed by the table.
    for r in w.rounds:
        for m in FIGURES:
            if not hasattr(r.summary, m.name):  # an expert run's figure: a dense round has none to show
                assert m.kind == "experts" and table.value(r.number, m.name) is None, m.name
            elif m.name != "projected_ts":
                assert table.value(r.number, m.name) == pytest.approx(getattr(r.summary, m.name), nan_ok=True)
        assert r.summary.n_gen == 4 and r.summary.avg_ts > 0
    # Room for what differs: the budget every round shares is listed under the table, not a column;
    # the expert knobs a dense model has no value for are hidden; threads, which differ, show.
    assert "budget_mb" in table.hidden() and "budget 1024 MiB" in table.note.text()
    assert "expert_cache_mb" in table.hidden() and "threads" not in table.hidden()
    # The window projects onto its device (iPhone 16 Pro by default): every row says so.
    assert all(table.value(r.number, "device") for r in w.rounds)

    # Pin round 1: the round panel shows the last round's deltas against it.
    first, last = w.rounds[0], w.rounds[-1]
    w.pin_baseline(1)
    assert w.baseline_round() is first and table.baseline() == 1
    expected = delta_text(last.summary.avg_ts, first.summary.avg_ts)
    assert expected and w.round_numbers.delta("avg_ts") == expected
    assert w.round_numbers.delta("ttft_ms") == delta_text(last.summary.ttft_ms, first.summary.ttft_ms)
    # ... and the charts draw round 1's curves faintly: its own samples, from the session timeline.
    samples = [(off + s.t_s, s.tok_s) for off, s in w.timeline if first.start_t <= off + s.t_s <= first.end_t]
    gx, gy = w.ghosts.data("toks")
    assert len(samples) > 3 and len(gx) == len(samples)
    assert np.allclose(np.diff(gx), np.diff([t for t, _ in samples]))
    assert np.allclose(gy, [v for _, v in samples], equal_nan=True)
    assert "rss" in w.ghosts.keys() and "weights" in w.ghosts.keys()
    legend = [label.text for _, label in w.chart.plot_item("memory").legend.items]
    assert "baseline (round 1)" in legend

    # Sorting keeps the baseline and the rows' ids.
    table.sort_by("threads", descending=True)
    top = table.column_values("threads")[0]  # a mixed round's cell sorts by the value it ended with
    assert getattr(top, "sort_key", top) == 2 and table.baseline() == 1

    # Save a row as a profile: the round's knobs, for the window's device; the sliders stay.
    profile = w.save_round_as(1, "from round one")
    assert profile is not None and profile.settings.threads == 1 and profile.settings.budget_mb == 1024
    assert profile.device == w.device_id() and "round 1" in profile.description
    assert w.controls.value("threads") == 2
    assert any(p.name == "from round one" for p in w.store.profiles)
    # Apply a row to the sliders.
    w.apply_round(1)
    assert w.controls.value("threads") == 1 and w.current_settings().n_gen == 4

    # Exported with the session: one CSV row per round, the baseline marked.
    paths = w.export_to(tmp_path / "session")
    with open(paths.rounds_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [r.number for r in w.rounds]
    assert [r["baseline"] for r in rows] == ["yes"] + [""] * (len(rows) - 1)
    for row, r in zip(rows, w.rounds):
        if "threads" in r.mixed_knobs():  # the live change landed inside this round: both values
            assert "\u2192" in row["threads"] and row["mixed"]
            assert re.findall(r"\d+", row["threads"]) == [str(r.start_settings.threads), str(r.settings.threads)]
        else:
            assert int(row["threads"]) == r.settings.threads

    # Unpin: no deltas, no faint curves.
    w.pin_baseline(None)
    assert w.round_numbers.delta("avg_ts") == "" and w.ghosts.keys() == []


def test_a_round_that_spans_a_live_change_is_recorded_mixed(qtbot, window, tmp_path):
    """A round that ran at budget 1024 MiB and took 900 MiB for its last tokens is neither:
    the table, the round panel and the rounds CSV say "1024→900" (it was shown at the end's
    900 MiB beside real 900 MiB rounds); the round after it ran at one setting."""
    from shardscope.app.rounds.rounds import MixedValue

    w = window
    w.apply_settings(w.current_settings().with_changes(n_gen=16, threads=1, budget_mb=1024))
    tokens: list[int] = []
    w.runs.token.connect(lambda n, _piece: tokens.append(n))
    w.start_run()
    wait_for(qtbot, w, lambda: bool(tokens) and tokens[-1] >= 3 and not w.rounds, 90_000)
    w.apply_settings(w.current_settings().with_changes(budget_mb=900))  # live, inside round 1
    wait_for(qtbot, w, lambda: len(w.rounds) >= 2, 180_000)
    stop_and_wait(qtbot, w)
    first, second = w.rounds[0], w.rounds[1]
    assert first.mixed_knobs() == ["budget_mb"] and second.mixed_knobs() == []
    cell = w.rounds_table.value(1, "budget_mb")
    assert isinstance(cell, MixedValue) and (cell.old, cell.new) == (1024, 900)
    assert "1024" in w.rounds_table.text(1, "budget_mb").replace(",", "") and "\u2192" in w.rounds_table.text(1,
                                                                                                              "budget_mb")
    assert w.rounds_table.value(2, "budget_mb") == 900
    assert "budget" in w.rounds_table.text(1, "mixed") and w.rounds_table.text(2, "mixed") == ""
    assert "mixed" not in w.rounds_table.hidden()
    w.rounds_table.sort_by("budget_mb")  # sorts by the value it ended with, beside numbers
    assert set(w.rounds_table.row_ids()[:2]) == {1, 2}
    paths = w.export_to(tmp_path / "session")
    with open(paths.rounds_csv, newline="") as f:
        rows = {int(r["round"]): r for r in csv.DictReader(f)}
    assert "\u2192" in rows[1]["budget_mb"] and rows[1]["mixed"]
    assert rows[2]["budget_mb"] == "900" and rows[2]["mixed"] == ""
