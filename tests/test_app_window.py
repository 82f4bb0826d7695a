"""The workbench window on real models: runs, live knobs, profiles, export, errors, closing.

Every test drives the real engine (bundled gemma or the synthetic 320 MB model) on
the worker thread, through the same methods the menus and shortcuts call, and
checks what reached the engine (its controller and session) or what the engine
reported (RunSummary, MetricsSample) against what the window shows. Config and
window state go to a temp folder: the user's own settings are never touched.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent, QImage

from conftest import drawn_curve, engine_ready, make_window, stop_and_wait, wait_drawn, wait_for
from shardscope.app.window.main_window import LIVE_FIELDS, ROUND_FIELDS, MainWindow
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.output.csv_out import TIMELINE_COLUMNS, read_rows, run_columns
from shardscope.widgets import format_number

CURVES = ("rss", "weights", "other", "ssd", "hit", "toks")


def open_and_wait(qtbot, window: MainWindow, path: str) -> None:
    with qtbot.waitSignal(window.model_opened, timeout=20_000):
        window.open_model(path)
    assert window.model_info.path == str(Path(path).resolve()) or window.model_info.path == path


def same_number(shown: str, value) -> bool:
    return shown == format_number(value)


# ----------------------------------------------------------------------------- runs
def test_run_charts_every_curve_and_numbers_match_the_engine(qtbot, window, tmp_path):
    assert window.current_profile.name == "Streaming demo"  # first start: streaming at once
    assert window.device_combo.device_id() == "iphone-16-pro"  # projection stays on the iPhone
    window.apply_settings(window.current_settings().with_changes(n_gen=8))
    window.start_run()
    # Every curve as drawn while the run goes: its plot item holds the newest samples after the
    # chart's own redraw (point_count, one count for every curve, was true of a curve that drew nothing).
    wait_drawn(qtbot, window.chart, CURVES, timeout=60_000)
    # 90 s: a hang bound (two 8-token rounds took over 30 s beside seven other suites on 2 cores)
    wait_for(qtbot, window, lambda: len([s for s in window.summaries if not s.stopped]) >= 2, timeout=90_000)
    assert window.worker.run.settings.n_gen == 8
    # Live numbers = the last MetricsSample while the run goes, once the display timer (4 Hz) has
    # shown what it holds (no event runs between the flush and the reads).
    window.flush_display()
    running = window.last_sample
    for key, _label, units in LIVE_FIELDS:
        want = getattr(running, key)
        assert same_number(window.live_numbers.text(key), 100 * want if units == "%" else want), key
    stop_and_wait(qtbot, window)
    assert window.last_error is None

    # "Last complete round" = the engine's RunSummary, formatted the one shared way.
    last = window.last_round
    assert last is not None and not last.stopped and last.n_gen == 8
    for key, _label, units in ROUND_FIELDS:  # fractions read in % (issue 48: no "of 1" beside a % chart)
        if not hasattr(last, key):  # an expert run's figure (hash picks): a dense round has no value
            assert window.round_numbers.text(key) in ("", "–", "—", "n/a"), (key, window.round_numbers.text(key))
            continue
        want = getattr(last, key)
        assert same_number(window.round_numbers.text(key), 100 * want if units == "%" else want), key
    assert last.cache_hit_rate == pytest.approx(last.cache_hits / (last.cache_hits + last.cache_misses), abs=1e-4)

    # After Stop nothing is "now": the Live rates and memory are blank, the tokens decoded stay (issue 32).
    # Chart ends, shard map and level lines = the last MetricsSample: what each plot item holds once
    # the chart has redrawn after the last sample.
    s = window.last_sample
    wait_drawn(qtbot, window.chart, CURVES + ("ontime",))
    for key, _label, _units in LIVE_FIELDS:
        if key == "n_tokens":
            assert same_number(window.live_numbers.text(key), getattr(s, key)), key
        else:
            assert window.live_numbers.text(key) == "\u2014", key
    for curve, field in (("weights", "resident_weights_mb"), ("other", "other_rss_mb"), ("rss", "rss_mb"),
                         ("ssd", "ssd_mb_s"), ("toks", "tok_s")):
        assert drawn_curve(window.chart, curve)[1][-1] == pytest.approx(getattr(s, field)), curve
    for curve, field in (("hit", "cache_hit_rate"), ("ontime", "on_time_rate")):  # fractions drawn in %
        drawn = drawn_curve(window.chart, curve)[1][-1]
        assert (math.isnan(drawn) and math.isnan(getattr(s, field))) or drawn == pytest.approx(100 * getattr(s, field))
    assert window.shard_map.states() == list(s.shard_states)
    assert window.chart.level_line("budget").value() == pytest.approx(s.budget_mb) == 200  # the demo budget
    # The iPhone preset emulates 860 MB/s: drawn, or, far above the reads, named in the plot's title
    # (drawn there it flattened 20 MB/s of reads to the floor).
    emulated = window.chart.level_line("emulated")
    assert emulated.value() == pytest.approx(s.emulated_ssd_mb_s) and s.emulated_ssd_mb_s > 0
    assert emulated.isVisible() or "emulated SSD" in window.chart.plot_item("ssd").titleLabel.text
    # Each round is projected onto the profile's device (iphone-16-pro): its line is up.
    assert window.chart.level_line("projected").isVisible()
    assert window.chart.level_line("projected").value() == pytest.approx(last.projected_ts)
    window.set_projection(12.5, "iPhone 16 Pro")
    assert window.chart.level_line("projected").isVisible()
    assert "iPhone 16 Pro 12.5" in window.chart.level_line("projected").label.format
    assert window.text_view.toPlainText().startswith(window.current_settings().prompt)

    # Export: three files, read back with the engine's own columns.
    paths = window.export_to(tmp_path / "session.csv")  # a chosen "x.csv" means base "x"
    assert paths.summary_csv == tmp_path / "session.csv"
    header, rows = read_rows(paths.summary_csv)
    assert header == run_columns()
    assert len(rows) == len(window.summaries)
    assert [float(r["avg_ts"]) for r in rows] == pytest.approx([x.avg_ts for x in window.summaries], rel=1e-5)
    header, rows = read_rows(tmp_path / "session-timeline.csv")
    assert header == TIMELINE_COLUMNS
    assert len(rows) == len(window.timeline) > 0
    times = [float(r["t_s"]) for r in rows]
    assert times == sorted(times)
    assert float(rows[-1]["rss_mb"]) == pytest.approx(s.rss_mb, rel=1e-5)
    image = QImage(str(tmp_path / "session.png"))
    assert not image.isNull() and image.width() > 100


def test_live_changes_reach_the_engine_and_are_marked(qtbot, window, synthetic_model):
    open_and_wait(qtbot, window, synthetic_model)
    window.apply_settings(RunSettings(budget_mb=200, shard_mb=32, prefetch_depth=1, threads=2,
                                      policy="pinned", ssd_mb_s=0.0, n_gen=8))
    window.start_run()
    qtbot.waitUntil(lambda: engine_ready(window), timeout=30_000)
    run = window.worker.run
    assert run.controller.budget_bytes == 200 * MIB and run.plan.shard_bytes_target == 32 * MIB
    sliders = window.controls.sliders
    markers = window.chart.marker_count()

    def user_moves(key: str, value: int) -> None:
        sliders[key].slider.setValue(value)  # as a keyboard step: commits at once
        assert window.last_error is None, window.last_error

    user_moves("budget_mb", 240)
    assert run.controller.budget_bytes == 240 * MIB
    user_moves("prefetch_depth", 2)
    assert run.controller.prefetch_depth == 2
    window.controls.policy_combo.setFocus()
    qtbot.keyClick(window.controls.policy_combo, Qt.Key.Key_Down)  # pinned -> lru, as a user picks
    assert run.controller.policy == "lru"
    user_moves("ssd_mb_s", 500)
    assert run.controller.ssd_mb_s == 500
    user_moves("threads", 1)
    assert run.session.n_threads == 1
    assert window.chart.marker_count() == markers + 5

    # A budget under the minimum is not offered (issue 48, item 4): the slider stops at the engine's
    # floor and says why beside it, with no dialog; the run takes the floor.
    floor = sliders["budget_mb"].slider.minimum()
    sliders["budget_mb"].slider.setValue(20)
    assert window.last_error is None, window.last_error
    assert sliders["budget_mb"].value() == floor and run.controller.budget_bytes == floor * MIB
    assert "the least" in sliders["budget_mb"].note()
    user_moves("budget_mb", 240)
    assert window.chart.marker_count() == markers + 7
    markers += 2

    # n_gpu_layers: this CPU build cannot offload, and the slider says so.
    assert sliders["n_gpu_layers"].disabledReason()
    assert not sliders["n_gpu_layers"].slider.isEnabled()

    # Several knobs at once (as a profile load does): applied live, one marker, no restart.
    window.apply_settings(window.current_settings().with_changes(budget_mb=260, prefetch_depth=1),
                          label="profile test")
    assert window.worker.run is run
    assert (run.controller.budget_bytes, run.controller.prefetch_depth) == (260 * MIB, 1)
    window.apply_settings(window.current_settings().with_changes(budget_mb=240, prefetch_depth=2))
    assert (run.controller.budget_bytes, run.controller.prefetch_depth) == (240 * MIB, 2)
    assert window.chart.marker_count() == markers + 7
    markers += 2

    # Shard size needs a re-plan: a new StreamingRun with the new target and the live knobs kept.
    user_moves("shard_mb", 16)
    qtbot.waitUntil(lambda: engine_ready(window) and window.worker.run is not run, timeout=30_000)
    new = window.worker.run
    assert new.plan.shard_bytes_target == 16 * MIB
    assert (new.controller.budget_bytes, new.controller.prefetch_depth, new.controller.policy,
            new.controller.ssd_mb_s, new.session.n_threads) == (240 * MIB, 2, "lru", 500, 1)
    assert window.chart.marker_count() == markers + 6
    qtbot.waitUntil(lambda: window.shard_map.labels() == [sh.label for sh in new.plan.shards], timeout=10_000)
    # Streaming is visible live: the budget is below the model, shards get evicted.
    qtbot.waitUntil(lambda: window.last_sample is not None and window.last_sample.phase == "generating"
                    and 0 in window.shard_map.states(), timeout=30_000)
    stop_and_wait(qtbot, window)
    assert window.last_error is None


@pytest.mark.hang_bound
def test_close_during_generation_stops_the_worker(qtbot, tmp_path, synthetic_model):
    window = make_window(qtbot, tmp_path / "config", model_path=synthetic_model)
    window.apply_settings(RunSettings(budget_mb=200, shard_mb=32, prefetch_depth=1, n_gen=64))
    window.start_run()
    qtbot.waitUntil(lambda: window.last_sample is not None and window.last_sample.phase == "generating",
                    timeout=30_000)
    thread = window.run_process
    started = time.perf_counter()
    window.close()
    elapsed = time.perf_counter() - started
    assert thread.isFinished()  # close() returned with the worker stopped, not left running
    assert elapsed < 10.0  # hang bound (a token here takes ~0.2 s); bench/goals/stop_latency.py has the speed
    assert not window.is_running()


# --------------------------------------------------------------------------- errors
def test_bad_file_and_refusals_are_shown_and_a_new_run_still_works(qtbot, window, tmp_path, monkeypatch):
    shown: list[str] = []
    window.error_shown.connect(shown.append)
    junk = tmp_path / "notes.gguf"
    junk.write_text("these are notes, not weights\n")
    window.open_model(str(junk))
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=10_000)
    assert str(junk) in window.last_error and "not a GGUF" in window.last_error
    assert window._error_box.isVisible() and window._error_box.text() == window.last_error
    assert window.model_info.name == "gemma-3-270m-Q4_K_M.gguf"  # the previous model stays

    # Budget below the model's minimum: the slider offers the floor (issue 48, item 4), so the window's
    # settings run; settings from elsewhere still get the worker's fast refusal, naming the file.
    window.apply_settings(window.current_settings().with_changes(budget_mb=100, n_gen=4))
    assert window.current_settings().budget_mb == window.controls.sliders["budget_mb"].slider.minimum() > 100
    window.runs.start(window.current_settings().with_changes(budget_mb=100))
    qtbot.waitUntil(lambda: not window.is_running(), timeout=20_000)
    assert "below the minimum" in window.last_error and "gemma-3-270m" in window.last_error

    # Any other exception: "internal error", no traceback text.
    # (the run goes in a process of its own: that process is started with StreamingRun.run broken)
    from shardscope.app.runs import run_worker

    broken = ("import sys\n"
              "from shardscope.engine.stream.streaming_run import StreamingRun\n"
              "def broken(self, *args, **kwargs):\n"
              "    raise RuntimeError('simulated llama.cpp failure')\n"
              "StreamingRun.run = broken\n"
              "from shardscope.engine.runs.run_host import main\n"
              "sys.exit(main())\n")
    monkeypatch.setattr(run_worker, "run_host_command", lambda: [sys.executable, "-c", broken])
    window.apply_settings(window.current_settings().with_changes(budget_mb=2048))
    window.start_run()
    qtbot.waitUntil(lambda: not window.is_running(), timeout=20_000)
    assert window.last_error.startswith("internal error: RuntimeError: simulated llama.cpp failure")
    assert "Traceback" not in window.last_error
    monkeypatch.undo()

    window.last_error = None
    window.start_run()
    qtbot.waitUntil(lambda: window.last_round is not None, timeout=30_000)
    stop_and_wait(qtbot, window)
    assert window.last_error is None
    assert len(shown) == 3


# ------------------------------------------------------------------------- profiles
def test_save_profile_then_load_it_restores_every_control(qtbot, window, tmp_path):
    tuned = RunSettings(budget_mb=777, shard_mb=48, prefetch_depth=3, threads=1, policy="lru", ssd_mb_s=420.0)
    window.apply_settings(tuned)
    saved = window.save_profile_as("Bench rig")
    assert saved is not None and saved.path == tmp_path / "config" / "profiles" / "bench-rig.toml"
    assert saved.path.exists() and not saved.builtin
    assert "Bench rig" in window.profile_names()

    window.load_profile("iPhone 16 Pro, tuned")
    assert window.controls.value("budget_mb") == 2048
    combo = window.profile_combo
    index = combo.findData("Bench rig")
    combo.setCurrentIndex(index)
    combo.activated.emit(index)  # what a user's pick emits
    expected = {"budget_mb": 777, "shard_mb": 48, "prefetch_depth": 3, "threads": 1, "n_gpu_layers": 0,
                "ssd_mb_s": 420.0, "policy": "lru",
                "expert_cache_mb": 0, "expert_policy": RunSettings().expert_policy, "expert_speculation": False,
                "trunk_share": 0}
    assert window.controls.values() == expected
    assert {k: getattr(window.current_settings(), k) for k in expected} == expected

    # Built-ins are read-only.
    assert window.save_profile_as("iPhone 16 Pro, tuned") is None
    assert "built-in" in window.last_error


def test_malformed_user_profile_is_reported_by_file_and_key_and_never_overwritten(qtbot, tmp_path):
    folder = tmp_path / "config" / "profiles"
    folder.mkdir(parents=True)
    broken = folder / "broken.toml"
    text = 'name = "Broken"\n[settings]\nbudget_mb = "lots"\nshard_mb = 64\nprefetch_depth = 1\n' \
           'threads = 2\npolicy = "pinned"\n'
    broken.write_text(text)
    window = make_window(qtbot, tmp_path / "config")
    assert str(broken) in window.last_error and "budget_mb" in window.last_error
    assert "Broken" not in window.profile_names() and "iPhone 16 Pro, tuned" in window.profile_names()
    assert window.save_profile_as("Broken") is None
    assert "not overwritten" in window.last_error
    assert broken.read_text() == text
    window.close()


def test_geometry_and_last_profile_persist_in_the_config_folder(qtbot, tmp_path, synthetic_model):
    config = tmp_path / "config"
    # The desktop preset's 256 MB shards do not fit the 241 MB bundled model (the window
    # refuses such a profile), so the first window opens the 320 MB synthetic one.
    first = make_window(qtbot, config, model_path=synthetic_model)
    first.load_profile("Desktop, unconstrained")
    assert first.current_profile.name == "Desktop, unconstrained", first.last_error
    first.resize(1234, 700)
    first.close()
    assert (config / "window.ini").exists()
    second = make_window(qtbot, config)
    assert second.current_profile.name == "Desktop, unconstrained"
    assert second.controls.value("budget_mb") == 65536
    # The offscreen screen is 800 px wide: restoreGeometry clamps the width to the
    # screen (then to the window's minimum), so only the height can round-trip here.
    assert second.height() == 700 and second.width() >= second.minimumSizeHint().width()
    second.close()


# --------------------------------------------------------------------------- models
def test_write_synthetic_model_dialog_then_opens_it(qtbot, window, tmp_path):
    window.synth_action.trigger()
    dialog = window._synth_dialog
    dialog.size_spin.setValue(16)
    target = tmp_path / "tiny.gguf"
    dialog.path_edit.setText(str(target))
    progress: list[int] = []
    dialog.progress.valueChanged.connect(progress.append)
    with qtbot.waitSignal(window.model_opened, timeout=30_000):
        dialog.start()
    assert target.exists() and window.model_info.path == str(target)
    assert progress[-1] == 1000 and progress == sorted(progress)


def test_dropping_a_gguf_opens_it(qtbot, window, synthetic_model):
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(synthetic_model)])
    event = QDropEvent(QPointF(20, 20), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.model_opened, timeout=20_000):
        window.dropEvent(event)
    assert window.model_info.path == synthetic_model
    assert len(window.shard_map.labels()) == len(window.model_info.plan.shards)


def test_main_opens_the_window_only_without_a_command(tmp_path, monkeypatch):
    from shardscope.app.window import main as app_main

    opened = []
    monkeypatch.setattr(app_main, "run_gui", lambda model=None: opened.append(model) or 0)
    assert app_main.main([]) == 0 and app_main.main(["gui", "m.gguf"]) == 0
    assert opened == [None, "m.gguf"]
    out = tmp_path / "cli.gguf"
    assert app_main.main(["synth", "--size-mb", "8", "--out", str(out), "--quiet"]) == 0  # engine.cli
    assert out.exists() and opened == [None, "m.gguf"]


def test_calibrate_with_a_bad_file_says_which_file_and_writes_nothing(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "llama-bench"}\n')
    window.set_device("iphone-16-pro")
    task = window.calibrate_from("iphone-16-pro", str(bad))
    qtbot.waitUntil(lambda: task.isFinished() and window.last_error is not None, timeout=30_000)
    assert window.last_error.startswith("Calibrate: ") and "bad.jsonl" in window.last_error
    assert not (tmp_path / "xdg").exists() or not any((tmp_path / "xdg").rglob("*.toml"))
