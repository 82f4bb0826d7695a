"""The workbench window: tuning controls | live charts | numbers, shard map and text.

Everything slow happens elsewhere: the run on a RunWorker thread, model probing
and synthetic-model writing on BackgroundTasks. The GUI thread only stores
samples and lets the widgets repaint at their own pace, because it shares two
cores with llama.cpp; per sample it does a handful of array stores and label
compares, never a relayout.

Time on the charts is *session* time: every StreamingRun's sampler starts at 0,
so each new run (a restart after a shard-size change, or the next press of Run)
is placed right after the previous one. The exported timeline uses the same
axis, so the markers in the PNG and the rows of the CSV line up.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import Callable

import shiboken6
from PySide6.QtCore import QByteArray, QStandardPaths, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (QComboBox, QFileDialog, QGroupBox, QHBoxLayout, QInputDialog, QLabel,
                               QMainWindow, QMessageBox, QPlainTextEdit, QPushButton, QScrollArea,
                               QSizePolicy, QSplitter, QVBoxLayout, QWidget)

from app.background import BackgroundTask
from app.charts import build_run_chart, sample_values, set_projection
from app.config_paths import default_config_dir, profiles_dir, window_settings
from app.device_combo import DeviceCombo
from app.export import ExportPaths, base_from_chosen, export_session
from app.model_probe import ModelInfo, probe_model
from app.gui_thread_gc import collect_garbage_on_gui_thread
from app.overbudget_watch import OverBudgetWatch
from app.profile_store import ProfileStore
from app.round_projection import RoundProjection, project_round
from app.run_worker import LIVE_SETTERS, RunThread, RunWorker
from app.settings_binding import SettingsPanel, describe_change
from app.sweep_dialog import SweepDialog
from app.synth_dialog import SynthDialog
from app.tune_dialog import TuneDialog
from engine.errors import ShardscopeError
from engine.metrics import MetricsSample
from engine.profile_file import Profile
from engine.settings import RunSettings
from engine.shard_plan import MIB, ShardPlan
from engine.streaming_run import RunSummary
from widgets import NumbersPanel, ShardMap

DEFAULT_PROFILE = "iPhone 16 Pro"
CLOSE_WAIT_MS = 15_000  # a run stops within ~1-2 s; this only bounds a wedged llama.cpp load
_WEDGED_RUNS: list[RunThread] = []  # runs that outlived CLOSE_WAIT_MS: kept referenced until exit
TIMELINE_MAX = 36_000  # one hour at 10 Hz: export what the session saw, bounded

LIVE_FIELDS = [
    ("tok_s", "tok/s now", "tok/s"),
    ("rss_mb", "RSS", "MB"),
    ("resident_weights_mb", "weights resident", "MB"),
    ("ssd_mb_s", "SSD reads", "MB/s"),
    ("n_tokens", "tokens decoded", ""),
]
ROUND_FIELDS = [
    ("ttft_ms", "TTFT", "ms"),
    ("avg_ts", "avg tok/s", "tok/s"),
    ("peak_rss_mb", "peak RSS", "MB"),
    ("read_mb_per_token", "read / token", "MB"),
    ("cache_hit_rate", "cache hit rate", "of 1"),
    ("on_time_rate", "on time", "of 1"),
    ("projected_ts", "projected", "tok/s"),  # on the chosen device; the caption below names it
]


class MainWindow(QMainWindow):
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

        self.model_path: str | None = model_path  # None = the bundled model
        self.model_info: ModelInfo | None = None
        self.base_settings = RunSettings()
        self.current_profile: Profile | None = None
        self.summaries: list[RunSummary] = []
        self.timeline: deque[tuple[float, MetricsSample]] = deque(maxlen=TIMELINE_MAX)
        self.last_sample: MetricsSample | None = None
        self.last_t = 0.0
        self.last_error: str | None = None
        self.last_round: RunSummary | None = None  # what the "last round" numbers show
        # Replaceable so tests (or a future log pane) can see errors without a dialog.
        self.message_hook: Callable[[str], None] = self._show_message_box

        self._run: RunThread | None = None
        self._run_index = 0
        self._t_offset = 0.0
        self._plan: ShardPlan | None = None
        self._shown_levels: dict[str, float | None] = {}
        self._tasks: list[BackgroundTask] = []
        self._probe_serial = 0
        self._error_box: QMessageBox | None = None
        self._synth_dialog: SynthDialog | None = None
        self.sweep_dialog: SweepDialog | None = None
        self.tune_dialog: TuneDialog | None = None
        self._search_owner: str | None = None  # "the sweep" while a search holds the engine
        self.projection: RoundProjection | None = None  # what the round panel's projection shows
        self._run_failed = False
        self._overbudget = OverBudgetWatch()
        self.warning: str | None = None  # the last "these numbers are not what they seem" notice

        self.setWindowTitle("shardscope")
        self.setAcceptDrops(True)
        self._build_actions()
        self._build_ui()
        self._build_menus()
        self._check_gpu()
        self._show_projection()

        geometry = self.qsettings.value("window/geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1500, 920)

        self.refresh_profiles()
        wanted = profile_name or self.qsettings.value("profile/last", DEFAULT_PROFILE, type=str)
        if self.store.find(wanted) is None:
            wanted = DEFAULT_PROFILE
        if self.store.find(wanted) is not None:
            self.load_profile(wanted)
        self.open_model(self.model_path)
        self._update_actions()

    # ================================================================== building
    def _build_actions(self) -> None:
        def action(text: str, shortcut, slot, tip: str = "") -> QAction:
            a = QAction(text, self)
            if shortcut:
                a.setShortcut(QKeySequence(shortcut))
            a.setToolTip(f"{tip or text} ({QKeySequence(shortcut).toString()})" if shortcut else tip or text)
            a.triggered.connect(slot)
            self.addAction(a)  # shortcuts work even with the menu bar hidden
            return a

        self.run_action = action("Run", "Ctrl+R", self.start_run, "Stream-generate until Stop")
        self.stop_action = action("Stop", "Esc", self.stop_run, "Stop after the current token")
        self.open_action = action("Open GGUF…", QKeySequence.StandardKey.Open, self._open_dialog)
        self.synth_action = action("Write synthetic model…", None, self._synth_dialog_open,
                                   "Write a random-weight model of any size, then open it")
        self.save_profile_action = action("Save profile…", "Ctrl+S", self._save_profile_dialog)
        self.export_action = action("Export…", "Ctrl+E", self._export_dialog,
                                    "Summary CSV, timeline CSV and a PNG of the charts")
        self.quit_action = action("Quit", QKeySequence.StandardKey.Quit, self.close)
        self.follow_action = action("Follow latest", "End", lambda: self.chart.follow_latest(),
                                    "Scroll the charts back to the newest samples")
        self.sweep_action = action("Sweep…", None, self.open_sweep_dialog,
                                   "Run every combination of knob lists, one cold run each")
        self.tune_action = action("Auto-tune for device…", None, self.open_tune_dialog,
                                  "Search the settings with the best projected tok/s on a device")

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        for a in (self.open_action, self.synth_action, None, self.export_action, None, self.quit_action):
            file_menu.addSeparator() if a is None else file_menu.addAction(a)
        run_menu = bar.addMenu("&Run")
        run_menu.addAction(self.run_action)
        run_menu.addAction(self.stop_action)
        run_menu.addSeparator()
        run_menu.addAction(self.sweep_action)
        run_menu.addAction(self.tune_action)
        run_menu.addSeparator()
        run_menu.addAction(self.follow_action)
        profile_menu = bar.addMenu("&Profile")
        profile_menu.addAction(self.save_profile_action)

        tools = self.addToolBar("Main")
        tools.setObjectName("main-toolbar")
        tools.setMovable(False)
        for a in (self.run_action, self.stop_action, None, self.open_action, self.export_action):
            tools.addSeparator() if a is None else tools.addAction(a)

    def _build_ui(self) -> None:
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self._build_left())
        splitter.addWidget(self._build_charts())
        splitter.addWidget(self._build_right())
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setStretchFactor(2, 0)
        # Right column: wide enough for the shard map's one-line legend (it clips, not wraps).
        right = self.shard_map.sizeHint().width() + 40
        splitter.setSizes([330, max(500, 1500 - 330 - right), right])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        self.setCentralWidget(splitter)
        self.model_status = QLabel("", self)
        # Outlives phase messages: it says the numbers on screen are not what they seem.
        self.warning_label = QLabel("", self)
        self.warning_label.setStyleSheet("color: #b00020; font-weight: bold")
        self.warning_label.hide()
        self.statusBar().addPermanentWidget(self.warning_label)
        self.statusBar().addPermanentWidget(self.model_status)

    def _build_left(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(6, 6, 6, 6)

        model_box = QGroupBox("Model")
        mb = QVBoxLayout(model_box)
        self.model_label = QLabel("(probing…)")
        self.model_label.setWordWrap(True)
        self.model_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        mb.addWidget(self.model_label)
        row = QHBoxLayout()
        open_button = QPushButton("Open GGUF…")
        open_button.clicked.connect(self._open_dialog)
        synth_button = QPushButton("Synthetic…")
        synth_button.setToolTip(self.synth_action.toolTip())
        synth_button.clicked.connect(self._synth_dialog_open)
        row.addWidget(open_button)
        row.addWidget(synth_button)
        mb.addLayout(row)
        layout.addWidget(model_box)

        profile_box = QGroupBox("Profile")
        pb = QHBoxLayout(profile_box)
        self.profile_combo = QComboBox()
        self.profile_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.profile_combo.setMinimumContentsLength(12)
        self.profile_combo.activated.connect(self._on_profile_chosen)
        save_button = QPushButton("Save…")
        save_button.setToolTip(self.save_profile_action.toolTip())
        save_button.clicked.connect(self._save_profile_dialog)
        pb.addWidget(self.profile_combo, 1)
        pb.addWidget(save_button)
        layout.addWidget(profile_box)

        device_box = QGroupBox("Project onto device")
        db = QVBoxLayout(device_box)
        self.device_combo = DeviceCombo()
        self.device_combo.activated.connect(lambda _i: self._on_device_chosen())
        db.addWidget(self.device_combo)
        layout.addWidget(device_box)

        settings_box = QGroupBox("Settings (live while running)")
        sb = QVBoxLayout(settings_box)
        self.controls = SettingsPanel()
        self.controls.edited.connect(self._on_edited)
        sb.addWidget(self.controls)
        layout.addWidget(settings_box)

        buttons = QHBoxLayout()
        self.run_button = QPushButton("Run  (Ctrl+R)")
        self.run_button.clicked.connect(self.start_run)
        self.stop_button = QPushButton("Stop  (Esc)")
        self.stop_button.clicked.connect(self.stop_run)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        layout.addLayout(buttons)
        layout.addStretch(1)

        scroll = QScrollArea()
        scroll.setWidget(panel)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(300)
        return scroll

    def _build_charts(self) -> QWidget:
        self.chart = build_run_chart()
        return self.chart

    def _build_right(self) -> QWidget:
        panel = QWidget()
        layout = QVBoxLayout(panel)
        layout.setContentsMargins(6, 6, 6, 6)

        live_box = QGroupBox("Live")
        QVBoxLayout(live_box).addWidget(live := NumbersPanel(LIVE_FIELDS))
        self.live_numbers = live
        round_box = QGroupBox("Last complete round (engine summary)")
        rl = QVBoxLayout(round_box)
        rl.addWidget(rounds := NumbersPanel(ROUND_FIELDS))
        self.round_numbers = rounds
        self.projection_label = QLabel("")
        self.projection_label.setWordWrap(True)
        self.projection_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rl.addWidget(self.projection_label)
        self.round_box = round_box
        layout.addWidget(live_box)
        layout.addWidget(round_box)

        shard_box = QGroupBox("Shards")
        sl = QVBoxLayout(shard_box)
        self.shard_map = ShardMap(cell_size=14)
        self.shard_caption = QLabel("")
        self.shard_caption.setWordWrap(True)
        sl.addWidget(self.shard_map)
        sl.addWidget(self.shard_caption)
        layout.addWidget(shard_box)

        text_box = QGroupBox("Generated text")
        tl = QVBoxLayout(text_box)
        self.text_view = QPlainTextEdit()
        self.text_view.setReadOnly(True)
        self.text_view.setMaximumBlockCount(2000)
        self.text_view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        # Two lines at the least: the projection caption above took the room, and the
        # window's minimum height (about 610 px) should stay what a small laptop screen shows.
        self.text_view.setMinimumHeight(2 * self.text_view.fontMetrics().lineSpacing() + 8)
        tl.addWidget(self.text_view)
        layout.addWidget(text_box, 1)
        panel.setMinimumWidth(280)
        return panel

    def _check_gpu(self) -> None:
        try:
            from engine.llama_session import gpu_offload_supported

            supported = gpu_offload_supported()
        except Exception:  # a broken llama.cpp install shows up properly at Run
            supported = False
        if not supported:
            self.controls.set_disabled_reason("n_gpu_layers", "no GPU offload")
            self.controls.sliders["n_gpu_layers"].setToolTip(
                "Disabled: this llama.cpp build has no GPU offload (CPU only), so n_gpu_layers is always 0.")

    # ================================================================ settings
    def current_settings(self) -> RunSettings:
        """What Run would use now: the profile's other fields, the controls, the model."""
        return self.controls.apply_to(self.base_settings.with_changes(model_path=self.model_path))

    def apply_settings(self, settings: RunSettings, label: str | None = None) -> None:
        """Set every control from ``settings`` (also n_gen, prompt...); pushes to a live run."""
        old = self.current_settings()
        self.base_settings = settings.with_changes(model_path=None)
        self.controls.set_settings(settings)
        self._fit_ranges()
        new = self.current_settings()
        if self.is_running():
            self._push_settings(old, new, label)

    def _fit_ranges(self) -> None:
        info = self.model_info
        if info is not None:
            self.controls.set_maximum("budget_mb", max(1024, math.ceil(info.total_mb * 1.5)))
            self.controls.set_maximum("n_gpu_layers", info.n_layers + 1)  # +1: the output layer
        else:
            self.controls.set_maximum("budget_mb", 4096)

    def _on_edited(self, key: str, old, new) -> None:
        """A user's committed change of one control."""
        if not self.is_running():
            self.statusBar().showMessage(f"{describe_change(key, old, new)} (applies at the next Run)", 5000)
            if key == "shard_mb":
                self._probe(self.model_path, quiet=True)  # redraw the shard map for the new plan
            return
        worker = self.worker
        if key in LIVE_SETTERS:
            try:
                worker.apply_live(key, new)
            except ShardscopeError as exc:
                self.controls.set_value(key, old)  # the engine kept the old value: show that
                self.show_error(str(exc))
                return
            self.mark(describe_change(key, old, new))
        else:
            worker.restart(self.current_settings())
            self.mark(describe_change(key, old, new) + " (restart)")

    def _push_settings(self, old: RunSettings, new: RunSettings, label: str | None) -> None:
        changed = [k for k in RunSettings.__dataclass_fields__ if getattr(old, k) != getattr(new, k)]
        if not changed:
            return
        worker = self.worker
        text = label or ", ".join(describe_change(k, getattr(old, k), getattr(new, k)) for k in changed)
        restart = any(k not in LIVE_SETTERS for k in changed)
        if not restart:
            # Order matters for the minimum-budget check (bigger budget before deeper
            # prefetch); rather than reason about it, a refusal falls back to a restart,
            # whose planning checks the whole set at once.
            try:
                for k in sorted(changed, key=lambda k: k != "budget_mb" or new.budget_mb < old.budget_mb):
                    worker.apply_live(k, getattr(new, k))
            except ShardscopeError:
                restart = True
        if restart:
            worker.restart(new)
            text += " (restart)"
        self.mark(text)

    def mark(self, label: str) -> None:
        """A vertical marker at the newest sample's time on every chart."""
        self.chart.mark_event(self.last_t, label)

    # ================================================================ profiles
    def refresh_profiles(self) -> None:
        profiles, errors = self.store.refresh()
        self.profile_combo.clear()
        for p in profiles:
            self.profile_combo.addItem(f"{p.name}{' (built-in)' if p.builtin else ''}", p.name)
            self.profile_combo.setItemData(self.profile_combo.count() - 1,
                                           p.description or str(p.path), Qt.ItemDataRole.ToolTipRole)
        if self.current_profile is not None:
            self._select_profile_item(self.current_profile)
        if errors:
            self.show_error("Some profiles were left out:\n" + "\n".join(errors))

    def _select_profile_item(self, profile: Profile) -> None:
        for i in range(self.profile_combo.count()):
            text = self.profile_combo.itemText(i)
            if self.profile_combo.itemData(i) == profile.name and text.endswith("(built-in)") == profile.builtin:
                self.profile_combo.setCurrentIndex(i)
                return

    def profile_names(self) -> list[str]:
        return [self.profile_combo.itemData(i) for i in range(self.profile_combo.count())]

    def _on_profile_chosen(self, index: int) -> None:
        builtin = self.profile_combo.itemText(index).endswith("(built-in)")
        name = self.profile_combo.itemData(index)
        profile = next((p for p in self.store.profiles if p.name == name and p.builtin == builtin), None)
        if profile is not None:
            self.apply_profile(profile)

    def load_profile(self, name: str) -> Profile:
        profile = self.store.find(name)
        if profile is None:
            raise ShardscopeError(f"no profile named {name!r}")
        self.apply_profile(profile)
        return profile

    def apply_profile(self, profile: Profile) -> None:
        """Set every control from a profile — unless a value cannot fit the open model."""
        info = self.model_info
        if info is not None and profile.settings.shard_mb > info.file_mb and not profile.settings.model_path:
            where = profile.path or profile.name
            self.show_error(f"{where}: 'shard_mb' = {profile.settings.shard_mb:g} MB is larger than the open "
                            f"model {info.name} ({info.file_mb:.0f} MB); profile not applied")
            return
        self.current_profile = profile
        self._select_profile_item(profile)
        self.qsettings.setValue("profile/last", profile.name)
        self.set_device(profile.device)  # a profile is tuned for its device: project onto it
        if profile.settings.model_path and profile.settings.model_path != self.model_path:
            self.open_model(profile.settings.model_path)
        self.apply_settings(profile.settings, label=f"profile {profile.name}")
        self.statusBar().showMessage(f"profile {profile.name}: {profile.description}".rstrip(": "), 8000)

    def save_profile_as(self, name: str, settings: RunSettings | None = None, *, device: str | None = None,
                        description: str | None = None) -> Profile | None:
        """Save the controls as a user profile (it becomes the current one, for the
        window's device); shows and returns None if refused.

        With ``settings`` (a sweep row, a tune result) those are saved for ``device``
        instead, and the window's controls and current profile stay as they are: saving
        a candidate is not choosing it.
        """
        own = settings is None
        if own:
            settings, device = self.current_settings(), self.device_id()
        if description is None:
            description = f"Saved from the shardscope window (tuned on {self.model_name()})."
        try:
            profile = self.store.save(name, settings, device=device, description=description)
        except ShardscopeError as exc:
            self.show_error(str(exc))
            return None
        if not own:
            self.refresh_profiles()
            self.statusBar().showMessage(f"saved profile {profile.name!r} to {profile.path}", 8000)
            return profile
        self.current_profile = profile
        self.refresh_profiles()
        self._select_profile_item(profile)
        self.qsettings.setValue("profile/last", profile.name)
        self.statusBar().showMessage(f"saved profile {profile.name!r} to {profile.path}", 8000)
        return profile

    def _save_profile_dialog(self) -> None:
        suggestion = "" if not self.current_profile or self.current_profile.builtin else self.current_profile.name
        name, ok = QInputDialog.getText(self, "Save profile", "Profile name:", text=suggestion)
        if ok and name.strip():
            self.save_profile_as(name)

    # ================================================================== devices
    def device_id(self) -> str | None:
        """The device rounds are projected onto (None: no projection)."""
        return self.device_combo.device_id()

    def set_device(self, device_id: str | None) -> None:
        """Choose the projection device (an unknown id chooses none) and re-project the shown round."""
        if not self.device_combo.set_device_id(device_id):
            self.device_combo.set_device_id(None)
        self._on_device_chosen()

    def _on_device_chosen(self) -> None:
        round_ = self.last_round
        self.projection = self._project(round_) if round_ is not None else None
        self._show_projection()

    def _project(self, summary: RunSummary) -> RoundProjection | None:
        """Fill the summary's device columns for the chosen device (so the CSV has them)."""
        device_id = self.device_id()
        if not device_id:
            return None
        try:
            return project_round(summary, device_id)
        except ShardscopeError:
            return None  # a round stopped before its second token has no tok/s to project

    def _show_projection(self) -> None:
        p = self.projection
        if p is None:
            self.set_projection(None, "")
            self.round_numbers.set_value("projected_ts", None)
            self.projection_label.setText("no device chosen: no projection" if not self.device_id()
                                          else "projection: after the first complete round")
            self.projection_label.setToolTip("")
            return
        self.set_projection(p.tok_s, f"projected on {p.device_name}:")
        self.round_numbers.set_value("projected_ts", p.tok_s)
        self.projection_label.setText(p.caption())
        self.projection_label.setToolTip(p.tooltip())

    def model_name(self) -> str:
        return self.model_info.name if self.model_info else "the bundled model"

    # ================================================================== searches
    def search_owner(self) -> str | None:
        """What holds the engine now ("the sweep"), or None: Run is refused meanwhile."""
        return self._search_owner

    def begin_search(self, what: str) -> None:
        self._search_owner = what
        self._update_actions()
        self.statusBar().showMessage(f"{what} is running; Run is disabled until it ends")

    def end_search(self, what: str) -> None:
        if self._search_owner == what:
            self._search_owner = None
            self._update_actions()
            self.statusBar().showMessage(f"{what} ended", 5000)

    def open_sweep_dialog(self) -> SweepDialog:
        return self._show_kept("sweep_dialog", SweepDialog)

    def open_tune_dialog(self) -> TuneDialog:
        return self._show_kept("tune_dialog", TuneDialog)

    def _show_kept(self, attr: str, cls):
        """One dialog of each kind, kept: its results survive closing it and opening it again."""
        dialog = getattr(self, attr)
        if dialog is None:
            dialog = cls(self)
            setattr(self, attr, dialog)
        dialog.show()
        dialog.raise_()
        return dialog

    # ================================================================== models
    def open_model(self, path: str | None) -> None:
        """Check the file off the GUI thread; on success it becomes the model (restarts a run)."""
        self._probe(path, quiet=False)

    def _probe(self, path: str | None, quiet: bool) -> None:
        self._probe_serial += 1
        serial, shard_mb = self._probe_serial, int(self.controls.value("shard_mb"))
        task = BackgroundTask(lambda _progress: probe_model(path, shard_mb), self)
        task.succeeded.connect(lambda info: self._on_probed(serial, info, quiet))
        task.failed.connect(lambda message: self._on_probe_failed(serial, message))
        self._start_task(task)
        if not quiet:
            self.statusBar().showMessage(f"opening {path or 'the bundled model'} …")

    def _start_task(self, task: BackgroundTask) -> None:
        self._tasks.append(task)
        task.finished.connect(lambda: self._tasks.remove(task) if task in self._tasks else None)
        task.start()

    def _on_probed(self, serial: int, info: ModelInfo, quiet: bool) -> None:
        if serial != self._probe_serial:
            return  # a later open superseded this one
        old_path = self.model_path
        self.model_info = info
        self.model_path = info.requested
        plan = info.plan
        self.setWindowTitle(f"shardscope \u2014 {info.name}")
        self.model_label.setText(
            f"<b>{info.name}</b><br>{info.file_mb:,.0f} MB file, {info.n_layers} layers"
            f"<br><small>{info.path}</small>")
        self.model_status.setText(info.name)
        self._fit_ranges()
        if not self.is_running():
            self._show_plan(plan)
        elif old_path != self.model_path:
            self.worker.restart(self.current_settings())
            self.mark(describe_change("model_path", old_path, self.model_path) + " (restart)")
        if not quiet:
            self.statusBar().showMessage(f"opened {info.path}", 5000)
            self.model_opened.emit(info.path)

    def _on_probe_failed(self, serial: int, message: str) -> None:
        if serial == self._probe_serial:
            self.show_error(message)

    def _show_plan(self, plan: ShardPlan) -> None:
        self._plan = plan
        self.shard_map.set_shards([s.label for s in plan.shards])
        target = plan.shard_bytes_target / MIB
        self.shard_caption.setText(
            f"{len(plan.shards)} shards (target {target:,.0f} MB), {len(plan.layers)} layers; "
            f"globals {plan.globals_bytes / MIB:,.0f} MB stay resident; "
            f"model weights {plan.total_bytes / MIB:,.0f} MB; "
            f"minimum budget {plan.min_budget_bytes(int(self.controls.value('prefetch_depth'))) / MIB:,.0f} MB")

    def _open_dialog(self) -> None:
        start = str(Path(self.model_info.path).parent) if self.model_info else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open GGUF model", start, "GGUF models (*.gguf);;All files (*)")
        if path:
            self.open_model(path)

    def _synth_dialog_open(self) -> None:
        default_dir = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation) \
            or str(Path.home())
        dialog = SynthDialog(Path(default_dir), self)
        dialog.model_written.connect(self.open_model)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._synth_dialog = dialog
        dialog.open()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self._dropped_gguf(event.mimeData()) is not None:
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        path = self._dropped_gguf(event.mimeData())
        if path is None:
            event.ignore()
            return
        event.acceptProposedAction()
        self.open_model(path)

    @staticmethod
    def _dropped_gguf(mime) -> str | None:
        for url in mime.urls() if mime.hasUrls() else []:
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".gguf"):
                return url.toLocalFile()
        return None

    # ==================================================================== runs
    @property
    def worker(self) -> RunWorker | None:
        return self._run.worker if self._run is not None else None

    @property
    def run_thread(self):
        return self._run.thread if self._run is not None else None

    def is_running(self) -> bool:
        return self._run is not None

    def start_run(self) -> None:
        if self._run is not None:
            return
        if self._search_owner is not None:
            self.show_error(f"{self._search_owner} is running: Run is disabled until it ends "
                            "(cancel it in its dialog)")
            return
        settings = self.current_settings()
        run = RunThread(settings)
        w = run.worker
        # Bound methods of this QObject: Qt queues them to the GUI thread.
        w.run_started.connect(self._on_run_started)
        w.sample.connect(self._on_sample)
        w.token.connect(self._on_token)
        w.phase.connect(self._on_phase)
        w.summary.connect(self._on_summary)
        w.failed.connect(self._on_run_failed)
        run.thread.finished.connect(self._on_run_thread_finished)
        self._run = run
        self._run_index = 0  # the new worker numbers its StreamingRuns from 1
        self._run_failed = False
        self._update_actions()
        self.statusBar().showMessage("starting …")
        run.start()

    def stop_run(self) -> None:
        """Returns at once; the worker ends after the current token (run_finished)."""
        if self._run is not None:
            self._run.worker.request_stop()
            self.statusBar().showMessage("stopping …")
            self.stop_action.setEnabled(False)
            self.stop_button.setEnabled(False)

    def _on_run_thread_finished(self) -> None:
        run, self._run = self._run, None
        if run is None:
            return
        if run.thread.wait(CLOSE_WAIT_MS):
            run.worker.deleteLater()
            run.thread.deleteLater()
        else:
            # llama.cpp wedged in a call that cannot be interrupted: never block the GUI
            # forever, and keep the QThread alive (destroying a running one aborts).
            _WEDGED_RUNS.append(run)
            self.show_error("the run did not stop within "
                            f"{CLOSE_WAIT_MS // 1000} s (llama.cpp busy); it is left to finish on its own")
        self._update_actions()
        if not self._run_failed:  # an error stays in the status bar
            done = sum(1 for x in self.summaries if not x.stopped)
            self.statusBar().showMessage(f"stopped; {done} complete round(s) this session", 8000)
        self.run_finished.emit()

    def _on_run_failed(self, message: str) -> None:
        self._run_failed = True
        self.show_error(message)

    def _update_actions(self) -> None:
        running = self._run is not None
        searching = self._search_owner is not None
        for w in (self.run_action, self.run_button):
            w.setEnabled(not running and not searching)
            w.setToolTip(f"Disabled while {self._search_owner} runs" if searching
                         else "Stream-generate until Stop (Ctrl+R)")
        for w in (self.stop_action, self.stop_button):
            w.setEnabled(running)

    def _on_run_started(self, index: int, plan: ShardPlan, settings: RunSettings) -> None:
        if self.timeline:
            self._t_offset = self.last_t + 0.1  # the new sampler starts at 0: continue the axis
            if index == 1:
                self.mark(f"Run: {Path(plan.model_path).name}")
        self._run_index = index
        self._overbudget.reset()
        self.warning_label.hide()
        self._show_plan(plan)

    def _on_sample(self, index: int, s: MetricsSample) -> None:
        """10 Hz: store and compare only; the widgets repaint on their own timers."""
        if index != self._run_index:
            return
        t = s.t_s + self._t_offset
        self.last_t, self.last_sample = t, s
        self.timeline.append((self._t_offset, s))
        self.chart.append(t, sample_values(s))
        self._set_level("budget", s.budget_mb)
        self._set_level("emulated", s.emulated_ssd_mb_s if s.emulated_ssd_mb_s > 0 else None)
        self.live_numbers.set_values({"tok_s": s.tok_s, "rss_mb": s.rss_mb,
                                      "resident_weights_mb": s.resident_weights_mb,
                                      "ssd_mb_s": s.ssd_mb_s, "n_tokens": s.n_tokens})
        if s.shard_states:
            self.shard_map.set_states(s.shard_states)
        slack = self._plan.max_shard_bytes / MIB + 16 if self._plan is not None else None
        notice = self._overbudget.check(s, slack)
        if notice is not None:
            self.warning = notice
            self.warning_label.setToolTip(notice)
            self.warning_label.setText("\u26a0 kernel holds weights over budget \u2014 another process "
                                       "mapping this file? (hover)")
            self.warning_label.show()
        plan, pos = self._plan, s.current_layer_pos
        if plan is not None and pos is not None and 0 <= pos < len(plan.layer_shards) and plan.layer_shards[pos]:
            self.shard_map.set_current(plan.layer_shards[pos][0])
        else:
            self.shard_map.set_current(None)

    def _set_level(self, key: str, value: float | None) -> None:
        if self._shown_levels.get(key) != value:
            self._shown_levels[key] = value
            self.chart.set_level(key, value)

    def _on_token(self, index: int, n: int, piece: str, _dt: float) -> None:
        if index != self._run_index:
            return
        if n == 0:  # each round restarts from the prompt
            self.text_view.setPlainText(self.current_settings().prompt)
        cursor = self.text_view.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        cursor.insertText(piece)
        self.text_view.setTextCursor(cursor)

    def _on_phase(self, index: int, name: str) -> None:
        if index == self._run_index and self._run is not None and not self._run_failed:
            done = sum(1 for x in self.summaries if not x.stopped)
            self.statusBar().showMessage(f"{name} — {done} complete round(s) this session")

    def _on_summary(self, index: int, summary: RunSummary) -> None:
        """Every round goes to the CSV; the panel shows the last *complete* one, because a
        round cut short by Stop or a restart has too few tokens to quote (avg 0 tok/s)."""
        projection = self._project(summary)
        self.summaries.append(summary)
        if summary.stopped and self.last_round is not None:
            return
        self.last_round = summary
        self.projection = projection
        self.round_numbers.set_values(summary.row())
        self._show_projection()
        self.round_box.setToolTip(f"{summary.model_filename}: {summary.n_gen} tokens, "
                                  f"budget {summary.budget_mb:,.0f} MB, {summary.policy}")

    def set_projection(self, tok_s: float | None, label: str) -> None:
        """Show (or hide, with None) a projected tok/s for a device on the tok/s chart."""
        set_projection(self.chart, tok_s, label)

    # ================================================================== export
    def export_to(self, base_path: str | Path) -> ExportPaths | None:
        """Write <base>.csv, <base>-timeline.csv and <base>.png; shows and returns None on refusal."""
        try:
            paths = export_session(base_from_chosen(base_path), self.summaries, list(self.timeline),
                                   self.chart.export_png)
        except ShardscopeError as exc:
            self.show_error(str(exc))
            return None
        self.statusBar().showMessage(f"exported {', '.join(p.name for p in paths.all())} to {paths.png.parent}", 8000)
        return paths

    def _export_dialog(self) -> None:
        if not self.summaries and not self.timeline:
            self.show_error("nothing to export yet: press Run first")
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export session (base name)", str(Path.home() / "shardscope-run.csv"),
                                              "CSV (*.csv)")
        if path:
            self.export_to(path)

    # ================================================================== errors
    def show_error(self, message: str) -> None:
        """Status bar + a non-blocking dialog; the app carries on (a new Run works)."""
        self.last_error = message
        self.statusBar().showMessage(message.splitlines()[0] if message else "error")
        self.error_shown.emit(message)
        self.message_hook(message)

    def _show_message_box(self, message: str) -> None:
        # One box, reused: a burst of refusals must not stack up a pile of dialogs.
        if self._error_box is None:
            self._error_box = QMessageBox(QMessageBox.Icon.Warning, "shardscope", "", QMessageBox.StandardButton.Ok, self)
        self._error_box.setText(message)
        self._error_box.open()  # window-modal, returns at once (no nested event loop)

    # ================================================================== closing
    def closeEvent(self, event: QCloseEvent) -> None:
        self.qsettings.setValue("window/geometry", self.saveGeometry())
        if self.current_profile is not None:
            self.qsettings.setValue("profile/last", self.current_profile.name)
        self.qsettings.sync()
        if self._run is not None:
            self._run.stop_and_wait(CLOSE_WAIT_MS)
            self._on_run_thread_finished()
        tasks = list(self._tasks)
        dialog = self._synth_dialog
        if dialog is not None and shiboken6.isValid(dialog) and dialog.task is not None:
            tasks.append(dialog.task)  # a QThread destroyed while running aborts the app
        for task in tasks:
            task.cancel()
            task.wait(CLOSE_WAIT_MS)
        for search in (self.sweep_dialog, self.tune_dialog):
            if search is not None and shiboken6.isValid(search) and search.runner.busy():
                search.runner.cancel_and_wait(CLOSE_WAIT_MS * 4)  # auto-tune stops between runs
        super().closeEvent(event)
