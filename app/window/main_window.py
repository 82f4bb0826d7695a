"""The workbench window: tuning controls | live charts | numbers, shard map and text.

It only draws. Runs live in a WindowRuns (thread, run index, window time axis,
timeline, round summaries, search lock), model probing and synthetic-model writing on
BackgroundTasks; the window and its panels subscribe. The GUI thread shares two cores
with llama.cpp, so per sample it does a handful of array stores and label compares,
never a relayout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import shiboken6
from PySide6.QtCore import QByteArray, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QSplitter

from shardscope.app.base.config_paths import default_config_dir, profiles_dir, window_settings
from shardscope.app.base.first_start import startup_profile
from shardscope.app.base.gui_thread_gc import collect_garbage_on_gui_thread, freeze_built_window
from shardscope.app.devices.round_projection import RoundProjection
from shardscope.app.experts.expert_charts import add_expert_curves, expert_values
from shardscope.app.experts.window_experts import WindowExperts
from shardscope.app.files.model_probe import ModelInfo
from shardscope.app.files.synth_dialog import SynthDialog
from shardscope.app.files.window_files import WindowFiles
from shardscope.app.profiles.profile_store import ProfileStore
from shardscope.app.profiles.settings_binding import describe_change
from shardscope.app.profiles.window_profiles import WindowProfiles
from shardscope.app.rounds.window_rounds import WindowRounds
from shardscope.app.run_view.charts import build_run_chart, sample_values, set_projection
from shardscope.app.run_view.phase_bands import PhaseBands
from shardscope.app.run_view.phase_progress_bar import PhaseProgressBar
from shardscope.app.run_view.run_view import LIVE_FIELDS, ROUND_FIELDS, RunView
from shardscope.app.runs.overbudget_watch import OverBudgetWatch
from shardscope.app.runs.run_worker import describe_exception
from shardscope.app.runs.window_runs import CLOSE_WAIT_MS, WindowRuns
from shardscope.app.search.sweep_dialog import SweepDialog
from shardscope.app.search.tune_dialog import TuneDialog
from shardscope.app.window.control_column import ControlColumn
from shardscope.app.window.idle_panels import WindowIdlePanels
from shardscope.app.window.scroll_column import ScrollColumn
from shardscope.app.window.window_actions import build_actions, build_menus
from shardscope.app.window.window_limits import WindowLimits, moved_text
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.knobs import changed
from shardscope.engine.knobs.profile_file import Profile
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.moe_layout import MoeLayout
from shardscope.engine.layout.shard_plan import ShardPlan
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.stream.streaming_run import RunSummary
from shardscope.widgets.coalesced_calls import CoalescedCalls

__all__ = ["MainWindow", "LIVE_FIELDS", "ROUND_FIELDS"]

DISPLAY_MS = 250  # text and numbers: 4 times a second reads as live
ROUND_MS = 500  # the last round's panel, projection line and expert-cache figures


class MainWindow(WindowRounds, WindowProfiles, WindowFiles, WindowExperts, WindowIdlePanels, WindowLimits,
                 QMainWindow):
    run_finished = Signal()
    error_shown = Signal(str)
    model_opened = Signal(str)  # resolved path, once probed

    def __init__(self, *, config_dir: Path | None = None, model_path: str | None = None,
                 profile_name: str | None = None) -> None:
        super().__init__()
        collect_garbage_on_gui_thread()  # before any worker thread can allocate
        self.config_dir = Path(config_dir) if config_dir is not None else default_config_dir()
        self.qsettings = window_settings(self.config_dir)
        self.store = ProfileStore(profiles_dir(self.config_dir))
        self.runs = WindowRuns(self)
        self.dialogs: dict[str, SweepDialog | TuneDialog] = {}  # one of each kind, kept

        self.model_path: str | None = model_path  # None = the bundled model
        self.model_info: ModelInfo | None = None
        self.base_settings = RunSettings()
        self.current_profile: Profile | None = None
        self.last_error: str | None = None
        # Replaceable so tests (or a future log pane) can see errors without a dialog.
        self.message_hook: Callable[[str], None] = self._show_message_box
        self._shown_levels: dict[str, float | None] = {}
        self._owner_shown: str | None = None  # the search the status bar last spoke of
        self._error_box: QMessageBox | None = None
        self._synth_dialog: SynthDialog | None = None
        self._calibrate_task = None
        self.projection: RoundProjection | None = None  # what the round panel's projection shows
        self._overbudget = OverBudgetWatch()
        self.warning: str | None = None  # the last "these numbers are not what they seem" notice
        # Tokens (60-100 a second on a small MoE) and samples (10 Hz) reach the text view and the
        # Live panel at most 4 times a second: each relayout and repaint was GUI time taken from
        # the run on two cores (widgets/coalesced_calls.py). The chart and levels take every sample.
        self._run_prompt: str | None = None
        self._shown_text = CoalescedCalls(DISPLAY_MS, self._show_tokens, parent=self)
        self._shown_sample = CoalescedCalls(DISPLAY_MS, self.run_view_sample, keep="last", parent=self)
        self._shown_round = CoalescedCalls(ROUND_MS, self._show_round, keep="last", parent=self)
        # The phase in the status bar: three phases a round, up to a dozen a second on a small MoE.
        self._shown_phase = CoalescedCalls(ROUND_MS, self._show_phase, keep="last", parent=self, leading=True)
        self._shown_all = (self._shown_text, self._shown_sample, self._shown_round, self._shown_phase)

        self.setWindowTitle("shardscope")
        self.setAcceptDrops(True)
        build_actions(self)
        self._build_ui()
        build_menus(self)
        self._subscribe()
        self._show_projection()

        geometry = self.qsettings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1500, 920)

        self.refresh_profiles()
        last = self.qsettings.value("profile/last", "", type=str) or None
        wanted = startup_profile(profile_name, last, [p.name for p in self.store.profiles])
        if wanted is not None:
            self.load_profile(wanted)
        self.open_model(self.model_path)
        self._update_actions()
        freeze_built_window()

    # What the window's runs hold, under the names the window has always offered.
    summaries = property(lambda self: self.runs.summaries)
    timeline = property(lambda self: self.runs.timeline)
    last_sample = property(lambda self: self.runs.last_sample)
    last_round = property(lambda self: self.runs.last_round)
    worker = property(lambda self: self.runs.worker)
    run_process = property(lambda self: self.runs.run_process)
    sweep_dialog = property(lambda self: self.dialogs.get("sweep"))
    tune_dialog = property(lambda self: self.dialogs.get("tune"))

    def is_running(self) -> bool:
        return self.runs.is_running()

    def search_owner(self) -> str | None:
        return self.runs.search_owner()

    # ================================================================== building
    def _build_ui(self) -> None:
        left = ControlColumn(self.store, self.synth_action.toolTip(), self.save_profile_action.toolTip())
        self.model_panel, self.profile_panel = left.model_panel, left.profile_panel
        self.device_panel = left.device_panel
        self.controls, self.run_button, self.stop_button = left.controls, left.run_button, left.stop_button
        self.profile_combo, self.device_combo = self.profile_panel.combo, self.device_panel.combo
        self.chart = build_run_chart()
        add_expert_curves(self.chart)
        self.run_view = v = RunView()
        self.live_numbers, self.round_numbers = v.live_numbers, v.round_numbers
        self.projection_label = v.projection_label
        self.shard_map, self.text_view = v.shard_map, v.text_view
        # Deltas only against a baseline of the same model file (else the panel says so).
        self.round_numbers.set_context_key("model_filename", "model")
        self.round_numbers.reserve_deltas()
        # The column is never narrower than its numbers need: its own fixed floor of 280 px hid its
        # layout's minimum (values printed over their units once the delta column showed). Without
        # a fixed floor Qt keeps the column's minimum at its layout's, which grows with a wide value.
        v.setMinimumSize(0, 0)
        experts = self._build_expert_panel()  # MoE models only: shown by show_experts
        middle = QSplitter(Qt.Orientation.Vertical, self)  # the live charts over the session's rounds
        middle.addWidget(self.chart)
        middle.addWidget(self._build_rounds())
        middle.setSizes([700, 200])
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        # The right column scrolls rather than squeezes: at 1280 x 800 its rows (a dozen figures, the
        # projection's lines, the shard map, the text) were laid over each other below their minimum.
        column = self.right_column = ScrollColumn(v, self)
        for i, (widget, stretch) in enumerate(((left, 0), (middle, 1), (experts, 0), (column, 0))):
            splitter.addWidget(widget)
            splitter.setStretchFactor(i, stretch)
        # Right column: wide enough for the shard map's one-line legend (it clips, not wraps).
        right = self.shard_map.sizeHint().width() + 40
        splitter.setSizes([330, max(500, 1500 - 330 - right), 380, right])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        self.setCentralWidget(splitter)
        self.model_status = QLabel("", self)
        # Outlives phase messages: it says the numbers on screen are not what they seem.
        self.warning_label = QLabel("", self)
        self.warning_label.setStyleSheet("color: #b00020; font-weight: bold")
        self.warning_label.hide()
        # The load and the prompt pass of a large model take minutes: how far, how fast, how long.
        self.phase_progress = PhaseProgressBar(self)
        self.phase_bands = PhaseBands(self.chart)
        self.statusBar().addPermanentWidget(self.phase_progress)
        self.statusBar().addPermanentWidget(self.warning_label)
        self.statusBar().addPermanentWidget(self.model_status)

    def _subscribe(self) -> None:
        self.run_button.clicked.connect(self.start_run)
        self.stop_button.clicked.connect(self.stop_run)
        self.controls.edited.connect(self._on_edited)
        self.model_panel.open_requested.connect(self._open_dialog)
        self.model_panel.synth_requested.connect(self._synth_dialog_open)
        self.model_panel.probed.connect(self._on_probed)
        self.model_panel.failed.connect(self.show_error)
        self.profile_panel.chosen.connect(self.apply_profile)
        self.profile_panel.save_requested.connect(self._save_profile_dialog)
        self.device_panel.chosen.connect(self._on_device_chosen)
        s = self.runs
        s.run_started.connect(self._on_run_started)
        s.sample.connect(self._on_sample)
        s.token.connect(lambda n, piece: self._shown_text.push((n, piece)))
        s.phase.connect(self._on_phase)
        s.summary.connect(self._on_summary)
        s.failed.connect(self.show_error)
        s.state_changed.connect(self._update_actions)
        s.run_finished.connect(self._on_run_finished)
        self._subscribe_rounds()

    # ================================================================ settings
    def current_settings(self) -> RunSettings:
        """What Run would use now: the profile's other fields, the controls, the model."""
        return self.controls.apply_to(self.base_settings.with_changes(model_path=self.model_path))

    def apply_settings(self, settings: RunSettings, label: str | None = None) -> None:
        """Set every control from ``settings`` (also n_gen, prompt...); a running run takes them
        live or restarts, or refuses them (then the controls go back). A value the open model
        cannot run with is moved to the nearest one it can, said beside its slider."""
        old, old_base = self.current_settings(), self.base_settings
        self.base_settings = settings.with_changes(model_path=None)
        self.clear_notes()
        self.controls.set_settings(settings, refit=True)
        self._fit_ranges()
        self._show_expert_cache()
        new = self.current_settings()
        keys = changed(old, new)
        if not keys or not self.is_running():
            return
        text = label or ", ".join(describe_change(k, getattr(old, k), getattr(new, k)) for k in keys)
        if not self._push(new, text):
            self.base_settings = old_base
            self.controls.set_settings(old, refit=True)
            self._fit_ranges()

    def _push(self, new: RunSettings, text: str, control: str | None = None) -> bool:
        """Hand ``new`` to the running run and mark the chart; False (error shown) if refused.
        ``control``: the control the user changed; a refusal is then said beside it, no dialog."""
        worker = self.runs.worker
        before = worker.settings if worker is not None else None
        try:
            answer = self.runs.apply(new)
        except ShardscopeError as exc:
            message = describe_exception(exc, self.model_path)
            if control is not None:
                self.refuse_inline(control, message)
            else:
                self.show_error(message)
            return False
        if answer == "live" and before is not None:
            self.note_live_change(before)  # the running round now mixes two settings
        self.mark(text + (" (restart)" if answer == "restart" else ""))
        return True

    def _on_edited(self, key: str, old, new) -> None:
        """A user's committed change of one control; the other sliders' ranges follow it, and a
        value they no longer offer moves with it (one change for the run, one marker)."""
        self.controls.set_note(key, None)
        moved = self._fit_ranges()
        self._note_at_end(key)
        self._show_expert_cache()
        text = ", ".join(filter(None, (describe_change(key, old, new), moved_text(moved))))
        if not self.is_running():
            self.statusBar().showMessage(f"{text} (applies at the next Run)", 5000)
            if key == "shard_mb":
                self._probe(self.model_path, quiet=True)  # redraw the shard map for the new plan
            else:
                self._show_idle_plan()  # the next Run's plan: no states left from the stopped run
            return
        if not self._push(self.current_settings(), text, control=key):
            note = self.controls.sliders[key].note() if key in self.controls.sliders else ""
            kept = self.current_settings().with_changes(**{k: a for k, a, _b in [(key, old, new), *moved]})
            self.controls.set_settings(kept, refit=True)  # the engine kept the old values: show them
            self._fit_ranges()
            self.controls.set_note(key, note or None)

    def mark(self, label: str) -> None:
        """A vertical marker at the newest sample's time on every chart."""
        self.chart.mark_event(self.runs.last_t, label)

    # ================================================================== devices
    def device_id(self) -> str | None:
        return self.device_panel.device_id()

    def set_device(self, device_id: str | None) -> None:
        """Choose the projection device (an unknown id chooses none) and re-project the shown round."""
        self.device_panel.set_device(device_id)

    def _on_device_chosen(self) -> None:
        self._follow_device_ssd()
        self.projection = self.device_panel.project(self.last_round)
        self._show_projection()
        self._show_expert_cache()

    def _show_projection(self) -> None:
        p = self.projection
        self.set_projection(p.tok_s if p else None, f"projected on {p.device_name}:" if p else "")
        self.run_view.show_projection(p, bool(self.device_id()))

    def set_projection(self, tok_s: float | None, label: str) -> None:
        """Show (or hide, with None) a projected tok/s for a device on the tok/s chart."""
        set_projection(self.chart, tok_s, label)

    def model_name(self) -> str:
        return self.model_info.name if self.model_info else "the bundled model"

    # ================================================================== searches
    def open_sweep_dialog(self) -> SweepDialog:
        return self._show_kept("sweep", SweepDialog)

    def open_tune_dialog(self) -> TuneDialog:
        return self._show_kept("tune", TuneDialog)

    def _show_kept(self, kind: str, cls):
        """One dialog of each kind, kept: its results survive closing it and opening it again."""
        if kind not in self.dialogs:
            self.dialogs[kind] = cls(self)
        dialog = self.dialogs[kind]
        dialog.show()
        dialog.raise_()
        return dialog

    def follow_latest(self) -> None:
        self.chart.follow_latest()

    # ================================================================== models
    def open_model(self, path: str | None) -> None:
        """Check the file off the GUI thread; on success it becomes the model (restarts a run)."""
        self._probe(path, quiet=False)

    def _probe(self, path: str | None, quiet: bool) -> None:
        self.model_panel.probe(path, int(self.current_settings().shard_mb), quiet)
        if not quiet:
            self.statusBar().showMessage(f"opening {path or 'the bundled model'} …")

    def _on_probed(self, info: ModelInfo, quiet: bool) -> None:
        old_path, old_file = self.model_path, self.model_info.path if self.model_info else None
        self.model_info = info
        self.model_path = info.requested
        # Ends with the app's name: Qt appends the application display name (run_gui sets it) to a
        # title that does not already end with it, which read "shardscope — model — shardscope".
        self.setWindowTitle(f"{info.name} \u2014 shardscope")
        self.model_status.setText(info.name)
        new_file = old_file != info.path
        if new_file:
            self.clear_notes()  # the last model's clamps said nothing about this one
        self._fit_ranges()
        self.show_experts(info.moe)
        if old_file is not None and new_file:
            self._forget_shown_run()
            self.expert_panel.forget_curves()  # another model's routing says nothing about this one
        if not self.is_running():
            self._show_idle_plan()
        elif old_path != self.model_path:
            self._push(self.current_settings(), describe_change("model_path", old_path, self.model_path))
        if not quiet:
            self.statusBar().showMessage(f"opened {info.path}", 5000)
            self.model_opened.emit(info.path)
        if new_file:
            self.show_profile_fit()  # before Run: what the profile changes on this model

    # ==================================================================== runs
    def start_run(self) -> None:
        if self.is_running():
            return
        refusal = self.runs.start(self.current_settings())
        if refusal:
            self.show_error(refusal)
        else:
            self.statusBar().showMessage("starting …")

    def stop_run(self) -> None:
        """Returns at once; the run ends after the current token (run_finished)."""
        if self.is_running():
            self.runs.stop()
            self._shown_phase.clear()  # a phase that began before Stop must not cover "stopping"
            self.statusBar().showMessage("stopping …")
            self.stop_action.setEnabled(False)
            self.stop_button.setEnabled(False)

    def _on_phase(self, name: str) -> None:
        self._shown_phase.push(name)
        self.phase_bands.phase(name, self.runs.last_t)

    def _show_phase(self, name: str) -> None:
        self.statusBar().showMessage(f"{name} — {plural(self.runs.complete_rounds(), 'complete round')} this session")

    def _on_run_finished(self) -> None:
        self.flush_display()  # the last tokens and the tokens count, before the rates are blanked
        # The run is over: its rates and memory are no longer "now" (the tokens it decoded stay).
        for key in self.live_numbers.keys():
            if key != "n_tokens":
                self.live_numbers.set_value(key, None)
        self.phase_progress.show_progress(None)
        self.phase_bands.end(self.runs.last_t)
        if not self.runs.failed_now:  # an error stays in the status bar
            self.statusBar().showMessage(
                f"stopped; {plural(self.runs.complete_rounds(), 'complete round')} this session", 8000)
        self.run_finished.emit()

    def _update_actions(self) -> None:
        running, owner = self.is_running(), self.runs.search_owner()
        for w in (self.run_action, self.run_button):
            w.setEnabled(not running and owner is None)
            w.setToolTip(f"Disabled while {owner} runs" if owner else "Stream-generate until Stop (Ctrl+R)")
        for w in (self.stop_action, self.stop_button):
            w.setEnabled(running)
        shown, self._owner_shown = self._owner_shown, owner
        if owner is not None and owner != shown:
            self.statusBar().showMessage(f"{owner} is running; Run is disabled until it ends")
        elif owner is None and shown is not None:
            self.statusBar().showMessage(f"{shown} ended", 5000)

    def _on_run_started(self, streamed: ShardPlan | MoeLayout, settings: RunSettings, new_press: bool) -> None:
        """``streamed``: a StreamingRun's shard plan, or an ExpertRun's expert layout (not a plan)."""
        if new_press:
            self.mark(f"Run: {Path(getattr(streamed, 'model_path', None) or streamed.path).name}")
        self._overbudget.reset()
        self.warning_label.hide()
        self._run_prompt = settings.prompt
        if isinstance(streamed, MoeLayout):
            self.run_view.show_expert_streaming(streamed)
            self.show_experts(streamed)
        else:
            self.run_view.show_plan(streamed, settings, self._minimum_mb())

    def _on_sample(self, t: float, s: MetricsSample) -> None:
        """10 Hz: store and compare only; the widgets repaint on their own timers."""
        self.chart.append(t, {**sample_values(s), **expert_values(s)})
        self.phase_progress.show_progress(s.progress)
        self.phase_bands.extend(t)
        self._set_level("budget", s.budget_mb)
        self._set_level("emulated", s.emulated_ssd_mb_s if s.emulated_ssd_mb_s > 0 else None)
        self._shown_sample.push(s)
        plan = self.run_view.plan
        notice = self._overbudget.check(s, plan.max_shard_bytes / MIB + 16 if plan is not None else None)
        if notice is not None:
            self.warning = notice
            self.warning_label.setToolTip(notice)
            self.warning_label.setText("\u26a0 kernel holds weights over budget \u2014 another process "
                                       "mapping this file? (hover)")
            self.warning_label.show()

    def run_view_sample(self, s: MetricsSample) -> None:
        self.run_view.show_sample(s)

    def _show_tokens(self, pieces: list[tuple[int, str]]) -> None:
        prompt = self._run_prompt if self._run_prompt is not None else self.current_settings().prompt
        self.run_view.show_tokens(pieces, prompt)

    def flush_display(self) -> None:
        """Show now what waits for the display timer (the run ended; a test reads the panels)."""
        for pending in self._shown_all:
            pending.flush()

    def _set_level(self, key: str, value: float | None) -> None:
        if self._shown_levels.get(key) != value:
            self._shown_levels[key] = value
            self.chart.set_level(key, value)

    def _on_summary(self, summary: RunSummary, shown: bool) -> None:
        projection = self.device_panel.project(summary)  # every round: the CSV gets its device columns
        r = self.add_round(summary, projection)
        if shown:  # the panels show the newest round, twice a second at most (rounds can come 3 a second)
            self._shown_round.push((summary, projection, r.mixed_text() if r is not None else ""))

    def _show_round(self, shown: tuple[RunSummary, RoundProjection | None, str]) -> None:
        summary, projection, mixed = shown
        self.projection = projection
        self.run_view.show_round(summary, mixed)
        self._show_projection()
        self._show_expert_cache()
        self.expert_panel.show_advice(getattr(summary, "expert_advice", ""))

    # ================================================================== errors
    def show_error(self, message: str) -> None:
        """Status bar + a non-blocking dialog; the app carries on (a new Run works)."""
        self.last_error = message
        self._shown_phase.clear()  # a phase message waiting for its timer must not cover the error
        self.statusBar().showMessage(message.splitlines()[0] if message else "error")
        self.error_shown.emit(message)
        self.message_hook(message)

    def _show_message_box(self, message: str) -> None:
        # One box, reused: a burst of refusals must not stack up a pile of dialogs.
        if self._error_box is None:
            self._error_box = QMessageBox(QMessageBox.Icon.Warning, "shardscope", "", QMessageBox.StandardButton.Ok,
                                          self)
        self._error_box.setText(message)
        self._error_box.open()  # window-modal, returns at once (no nested event loop)

    # ================================================================== closing
    def closeEvent(self, event: QCloseEvent) -> None:
        self.qsettings.setValue("window/geometry", self.saveGeometry())
        if self.current_profile is not None:
            self.qsettings.setValue("profile/last", self.current_profile.name)
        self.qsettings.sync()
        self.runs.close()
        for pending in self._shown_all:
            pending.clear()
        self.expert_panel.close_tasks(CLOSE_WAIT_MS)
        tasks = list(self.model_panel.tasks)
        dialog = self._synth_dialog
        if dialog is not None and shiboken6.isValid(dialog) and dialog.task is not None:
            tasks.append(dialog.task)  # a QThread destroyed while running aborts the app
        if self._calibrate_task is not None:
            tasks.append(self._calibrate_task)
        for task in tasks:
            task.cancel()
            task.wait(CLOSE_WAIT_MS)
        for search in self.dialogs.values():
            if shiboken6.isValid(search) and search.runner.busy():
                search.runner.cancel_and_wait(CLOSE_WAIT_MS * 4)  # auto-tune stops between runs
        super().closeEvent(event)
