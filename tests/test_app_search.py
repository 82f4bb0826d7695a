"""Device projection, sweeps and auto-tune in the window, on real models and the real engine.

Projection: every round the worker reports is projected onto the chosen device in
the window (engine.devices.run_projection), so the numbers panel, the chart's level line and
the exported CSV show the same figure. Sweeps and auto-tune run real cold
StreamingRuns on a worker thread (a handful of tokens each, to keep the suite short);
the tests drive the dialogs through the methods their buttons call and check what
the engine reported against what the dialogs show and what reaches the sliders.
"""

from __future__ import annotations

import math

import pytest
from PySide6.QtCore import QPoint, Qt

from conftest import engine_ready, make_window, stop_and_wait, wait_for
from shardscope.app.search.sweep_dialog import SweepDialog
from shardscope.app.search.tune_dialog import TuneDialog
from shardscope.engine.devices.projection import BOUNDS
from shardscope.engine.knobs.profile_file import load_profile
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.output.csv_out import read_rows
from shardscope.widgets import format_number

KNOBS = ("budget_mb", "shard_mb", "prefetch_depth", "threads", "policy", "ssd_mb_s")


def knobs_of(settings: RunSettings) -> dict:
    return {k: getattr(settings, k) for k in KNOBS}


def fill(dialog, **texts: str) -> None:
    for key, text in texts.items():
        dialog.fields.set_text(key, text)


def wait_idle(qtbot, window, dialog, timeout: int) -> None:
    wait_for(qtbot, window, lambda: not dialog.runner.busy(), timeout=timeout)


def click_header(qtbot, table, column: int) -> None:
    header = table.horizontalHeader()
    x = header.sectionViewportPosition(column) + header.sectionSize(column) // 2
    qtbot.mouseClick(header.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(x, header.height() // 2))


# ------------------------------------------------------------------------ projection
def test_each_round_is_projected_onto_the_chosen_device(qtbot, window, tmp_path):
    assert window.device_id() == "iphone-16-pro"  # the default profile's device
    window.apply_settings(window.current_settings().with_changes(n_gen=4, ssd_mb_s=0.0))
    window.start_run()
    wait_for(qtbot, window, lambda: window.last_round is not None and not window.last_round.stopped,
             timeout=30_000)
    stop_and_wait(qtbot, window)
    assert window.last_error is None

    last = window.last_round
    assert last.device == "iphone-16-pro"
    assert last.projected_ts > 0 and math.isfinite(last.projected_ts) and last.projected_bound in BOUNDS
    # The panel, the caption and the chart's level line all show the engine's figure.
    assert window.round_numbers.text("projected_ts") == format_number(last.projected_ts)
    caption = window.projection_label.text()
    assert caption.startswith(f"projected on iPhone 16 Pro (USB-C SSD): {format_number(last.projected_ts)} tok/s")
    assert f"({last.projected_bound}-bound)" in caption
    assert "(unverified numbers)" in caption  # the preset marks its SSD and DRAM figures unverified
    line = window.chart.level_line("projected")
    assert line.isVisible() and line.value() == pytest.approx(last.projected_ts)
    assert "iPhone 16 Pro" in line.label.format

    # Export: the summary CSV carries the device columns of every complete round.
    paths = window.export_to(tmp_path / "session.csv")
    _header, rows = read_rows(paths.summary_csv)
    complete = [r for r in rows if r["stopped"] in ("False", "false", "0")]
    assert complete and all(r["device"] == "iphone-16-pro" and float(r["projected_ts"]) > 0
                            and r["projected_bound"] in BOUNDS for r in complete)

    # Another device re-projects the shown round; "none" hides the projection.
    window.set_device("laptop-16gb")
    assert last.device == "laptop-16gb"
    assert window.projection_label.text().startswith("projected on 16 GB laptop (NVMe SSD):")
    assert window.chart.level_line("projected").value() == pytest.approx(last.projected_ts)
    window.set_device(None)
    assert window.device_combo.currentText() == "none"
    assert not window.chart.level_line("projected").isVisible()
    assert window.round_numbers.text("projected_ts") == format_number(None)
    # A profile brings its device back.
    window.load_profile("iPhone 16 Pro, tuned")
    assert window.device_id() == "iphone-16-pro" and window.chart.level_line("projected").isVisible()


# ----------------------------------------------------------------------------- sweep
def test_sweep_fills_a_sortable_table_applies_a_row_and_saves_it(qtbot, window, tmp_path):
    dialog = window.open_sweep_dialog()
    assert isinstance(dialog, SweepDialog) and dialog.device_combo.device_id() == "iphone-16-pro"

    # Bad lists are refused inline, under the field they are about, before any run.
    fill(dialog, shard_mb="64-16", policy="fifo")
    dialog.start()
    assert not dialog.runner.busy() and dialog.table.rowCount() == 0
    assert dialog.fields.error("shard_mb").startswith("Shard size (MiB): range '64-16' ends below its start")
    assert dialog.fields.error("policy").startswith("Policy: unknown value 'fifo'")
    assert dialog.fields.errors["shard_mb"].isVisible()
    assert dialog.fields.error("prefetch_depth") is None
    assert "Fix the marked field" in dialog.message

    # 2 shard sizes x 3 depths x 2 budgets: the 100 MB budget is below the bundled model's
    # minimum, so those 6 are skipped by the engine (no run) and 6 run.
    fill(dialog, shard_mb="32,64", prefetch_depth="0-2", threads="2", budget_mb="100,1024", policy="pinned",
         ssd_mb_s="0")
    assert dialog.fields.error("shard_mb") is None and dialog.fields.error("policy") is None
    dialog.tokens_spin.setValue(2)
    dialog.start()
    assert window.search_owner() == "the sweep" and not window.run_action.isEnabled()
    wait_idle(qtbot, window, dialog, timeout=120_000)
    assert window.search_owner() is None and window.run_action.isEnabled()

    table = dialog.table
    assert table.rowCount() == 12 and dialog.progress.value() == 12
    assert [c.key for c in table.columns[:3]] == ["shard_mb", "prefetch_depth", "budget_mb"]
    ran = [r for r in dialog.results if r.ok]
    skipped = [r for r in dialog.results if r.skipped]
    assert len(ran) == 6 and len(skipped) == 6 and all(r.settings.budget_mb == 100 for r in skipped)
    assert all(r.summary.n_gen == 2 and r.summary.device == "iphone-16-pro" and r.summary.projected_ts > 0
               for r in ran)
    assert sum(1 for note in table.column_values("note") if note.startswith("skipped: ")) == 6
    assert dialog.message.startswith("done: 12 / 12 runs")

    # Sorting by a click on "tok/s": numbers in order, the skipped rows (no numbers) last.
    col = table.column_index("avg_ts")
    for _ in range(2):
        click_header(qtbot, table, col)
        values = table.column_values("avg_ts")
        numbers = values[:6]
        assert all(v is None for v in values[6:])
        descending = table.horizontalHeader().sortIndicatorOrder() == Qt.SortOrder.DescendingOrder
        assert numbers == sorted(numbers, reverse=descending)
        assert table.horizontalHeader().sortIndicatorSection() == col
    assert sorted(table.column_values("avg_ts")[:6]) == sorted(r.summary.avg_ts for r in ran)

    # The plot: x = shard size, one curve per (depth, budget); the skipped budget draws nothing.
    drawn = [c for c in dialog.plot.curves if c.points]
    assert len(drawn) == 3 and all(len(c.points) == 2 for c in drawn)
    assert {c.label for c in drawn} == {f"depth {d}, budget 1024 MiB" for d in (0, 1, 2)}

    # Apply the fastest row to the sliders.
    if table.horizontalHeader().sortIndicatorOrder() != Qt.SortOrder.DescendingOrder:
        click_header(qtbot, table, col)
    dialog.select_row(0)
    chosen = table.selected_result()
    assert chosen.summary.avg_ts == max(r.summary.avg_ts for r in ran)
    n_gen = window.current_settings().n_gen
    assert dialog.apply_selected()
    assert knobs_of(window.current_settings()) == knobs_of(chosen.settings)
    assert window.current_settings().n_gen == n_gen  # measuring-only tokens stay in the sweep

    # A skipped row has nothing to apply.
    dialog.select_row(11)
    assert not dialog.apply_button.isEnabled() and not dialog.apply_selected()

    # Save another row as a profile: it loads back with that row's knobs and the device.
    dialog.select_row(1)
    other = table.selected_result()
    window.apply_settings(window.current_settings().with_changes(budget_mb=2048))
    profile = dialog.save_selected_as("Sweep pick")
    assert profile is not None and profile.path == tmp_path / "config" / "profiles" / "sweep-pick.toml"
    loaded = load_profile(profile.path)
    assert knobs_of(loaded.settings) == knobs_of(other.settings) and loaded.device == "iphone-16-pro"
    assert window.controls.value("budget_mb") == 2048  # saving a row is not applying it
    assert "Sweep pick" in window.profile_names()
    window.load_profile("Sweep pick")
    assert knobs_of(window.current_settings()) == knobs_of(other.settings)
    dialog.close()


def test_sweep_stops_the_window_run_and_cancel_keeps_finished_rows(qtbot, window):
    window.apply_settings(window.current_settings().with_changes(n_gen=64, ssd_mb_s=0.0))
    window.start_run()
    wait_for(qtbot, window, lambda: engine_ready(window), timeout=30_000)

    dialog = window.open_sweep_dialog()
    fill(dialog, shard_mb="16,32,64", prefetch_depth="0-1", threads="2", budget_mb="1024", policy="pinned",
         ssd_mb_s="0")
    dialog.tokens_spin.setValue(3)
    dialog.start()
    # The window's run is stopped first; then Run is refused while the sweep holds the engine.
    wait_for(qtbot, window, lambda: not window.is_running() and dialog.runner.thread is not None, timeout=10_000)
    assert not window.run_action.isEnabled() and not window.run_button.isEnabled()
    window.start_run()
    assert not window.is_running() and "the sweep is running" in window.last_error
    window.last_error = None

    wait_for(qtbot, window, lambda: dialog.table.rowCount() >= 2, timeout=60_000)
    dialog.cancel()
    wait_idle(qtbot, window, dialog, timeout=15_000)
    finished = [r for r in dialog.results if r.ok]
    assert 2 <= len(finished) < 6 == dialog.total
    assert dialog.table.rowCount() == len(finished)  # the partial run is not a row
    assert all(r.summary.avg_ts > 0 for r in finished)
    assert dialog.message.startswith(f"cancelled after {len(finished)} of 6 runs")
    assert window.search_owner() is None and window.run_action.isEnabled()
    assert window.last_error is None
    dialog.close()


# ------------------------------------------------------------------------- auto-tune
def test_auto_tune_on_a_synthetic_model_uses_fewer_runs_than_the_grid(qtbot, tmp_path, synthetic_model):
    window = make_window(qtbot, tmp_path / "config", model_path=synthetic_model)
    window.apply_settings(RunSettings(budget_mb=200, shard_mb=32, prefetch_depth=1, threads=2, ssd_mb_s=0.0,
                                      n_gen=16))
    dialog = window.open_tune_dialog()
    assert isinstance(dialog, TuneDialog) and dialog.device_combo.device_id() == "iphone-16-pro"
    assert "capped at 200 MB" in dialog.budget_label.text()
    fill(dialog, policy="pinned", shard_mb="16,32", prefetch_depth="0-1", threads="1-2")
    dialog.tokens_spin.setValue(3)
    dialog.passes_spin.setValue(2)
    dialog.rounds_spin.setValue(2)  # a cold round and 2 warm ones a candidate: the interval, kept short
    dialog.start()
    assert window.search_owner() == "the auto-tune"
    wait_idle(qtbot, window, dialog, timeout=150_000)
    assert window.last_error is None, window.last_error

    result = dialog.result
    assert result is not None and not result.stopped, dialog.message
    assert result.grid_size == 8 and 1 <= result.runs < result.grid_size
    assert dialog.log.toPlainText().count("\nrun ") + dialog.log.toPlainText().startswith("run ") == result.runs
    best = result.best
    assert best is not None and best.fits and best.settings.budget_mb == 200
    assert best.summary.projected_ts > 0 and best.summary.device == "iphone-16-pro"
    text = dialog.best_label.text()
    assert f"{result.runs} runs ({result.rounds} warm rounds) of a 8-combination grid" in text
    assert best.interval.text() in text and "(unverified numbers)" in text  # the interval it decided on
    assert ("margin" in text) and ("tied with" in text or "no ties" in text)
    assert "device compute assumed = this host × 1.0" in text

    window.set_device(None)
    assert dialog.apply_button.isEnabled() and dialog.apply_best()
    tuned = {k: getattr(best.settings, k) for k in ("policy", "shard_mb", "prefetch_depth", "threads", "budget_mb")}
    assert {k: getattr(window.current_settings(), k) for k in tuned} == tuned
    assert window.current_settings().n_gen == 16 and window.device_id() == "iphone-16-pro"

    profile = dialog.save_best_as("Tuned here")
    assert profile is not None and profile.device == "iphone-16-pro"
    loaded = load_profile(profile.path)
    assert {k: getattr(loaded.settings, k) for k in tuned} == tuned
    assert best.interval.text() in loaded.description and "margin" in loaded.description
    dialog.close()
    window.close()
