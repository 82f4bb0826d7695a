"""Run → Sweep…: every combination of knob lists, one cold run each, as a table and a plot.

The window's sliders answer "what happens if I move this now"; a sweep answers
"which combination is best", which needs each combination measured the same way:
cold, alone, for the same number of tokens. It is ``shardscope sweep`` in a
window: the same list syntax (``engine.knobs.knob_ranges``), the same engine loop
(``engine.search.sweep.iter_sweep``) on a worker thread, the same refusals (a
combination below the minimum budget is skipped with the engine's reason). The prefilled
lists hold only combinations the engine runs on the open model and budget
(app.search.runnable_lists), and the dialog says before Start how many runs and about how long.

Rows appear as runs finish, so a long sweep is useful before it ends, and Cancel
stops the current run at its next token and keeps every finished row. A row can
be sent back to the window ("Apply to sliders") or kept ("Save as profile…").
The window's own run is stopped first and Run stays disabled meanwhile
(app.search.search_runner says why).
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QProgressBar,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from shardscope.app.base.progress_text import eta_text
from shardscope.app.devices.device_combo import DeviceCombo
from shardscope.app.search.knob_fields import KnobField, KnobFields, knob_field
from shardscope.app.search.runnable_lists import cost_text, engine_refusal, idle_knobs, idle_reason, runnable_grid
from shardscope.app.search.search_dialog import DialogHost, SearchDialog
from shardscope.app.search.search_runner import SearchRunner
from shardscope.app.search.sweep_plot import Y_METRICS, SweepPlot
from shardscope.app.search.sweep_table import SweepTable
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_ranges import format_values, parse_knob
from shardscope.engine.knobs.knobs import KNOBS, LAYER_KNOBS
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.search.sweep import GRID_KEYS, SweepResult, describe_settings, expand_grid, iter_sweep

DEFAULT_TOKENS = 8  # as `shardscope sweep`: the first is warm-up, 7 are averaged


# What an expert-streaming run is swept over by default: the expert policy decides what stays
# (the layer knobs' shard x depth grid reads the same bytes in every run there).
EXPERT_PROPOSAL = {"expert_policy": KNOBS["expert_policy"].tune}


def proposed_grid(current: RunSettings) -> dict[str, list]:
    """Each knob's proposed list (e.g. shard size x prefetch depth), else its current value; a
    knob the run does not read (idle_knobs: greyed in the window) keeps its current value."""
    idle = idle_knobs(current)
    proposals = {key: KNOBS[key].propose for key in GRID_KEYS}
    if idle == LAYER_KNOBS:  # experts stream
        proposals.update(EXPERT_PROPOSAL)
    return {key: parse_knob(KNOBS[key].label, proposals[key], key) if proposals[key] and key not in idle
            else [getattr(current, key)] for key in GRID_KEYS}


def sweep_fields(current: RunSettings) -> list[KnobField]:
    """The knobs a user sweeps, prefilled so Start at once is a useful first sweep: the
    proposed lists cut to the combinations the engine runs on the open model and budget."""
    grid = runnable_grid(current, proposed_grid(current))
    return [knob_field(key, format_values(grid[key])) for key in GRID_KEYS]


class SweepDialog(SearchDialog):
    cancel_message = "cancelling: the current run stops at its next token; finished rows stay …"

    def __init__(self, window: DialogHost) -> None:
        super().__init__(window)  # type: ignore[arg-type]  # the window is a QWidget
        self.setWindowTitle("Sweep")
        self.window_ = window
        self.runner = SearchRunner(window.runs, "the sweep", self)
        self.results: list[SweepResult] = []
        self.knobs: list[str] = []
        self.total = 0
        self.device: str | None = None
        self.message = ""  # the last status line (tests read it)
        self._started_at = 0.0

        current = window.current_settings()
        self.fields = KnobFields(sweep_fields(current), self)
        self.fields.set_idle(idle_knobs(current), idle_reason(current))
        self._prefilled_for = (current.model_path, idle_knobs(current))
        self.tokens_spin = QSpinBox(self)
        self.tokens_spin.setRange(2, 4096)
        self.tokens_spin.setValue(DEFAULT_TOKENS)
        self.tokens_spin.setToolTip("Tokens per round; the first is warm-up and excluded from tok/s")
        self.rounds_spin = QSpinBox(self)
        self.rounds_spin.setRange(0, 16)
        self.rounds_spin.setValue(8)
        self.rounds_spin.setToolTip("Warm rounds per combination at most, after its cold first round, fewer where "
                                    "its interval is known sooner; 0: the cold round alone (no interval)")
        self.device_combo = DeviceCombo(self)
        self.device_combo.set_device_id(window.device_id())
        extra = QFormLayout()
        extra.setContentsMargins(0, 0, 0, 0)
        extra.addRow("Tokens per round", self.tokens_spin)
        extra.addRow("Warm rounds at most", self.rounds_spin)
        extra.addRow("Project onto", self.device_combo)

        run_row = self._run_buttons("Stop the current run at its next token; finished rows stay")

        inputs = QGroupBox("Knobs (lists: 16,64 — ranges: 0-4, 1-8+2, 1-16*2)", self)
        il = QVBoxLayout(inputs)
        il.addWidget(self.fields)
        il.addLayout(extra)
        il.addLayout(run_row)
        il.addStretch(1)

        self.y_combo = QComboBox(self)
        for key, title in Y_METRICS.items():
            self.y_combo.addItem(title, key)
        self.y_combo.currentIndexChanged.connect(lambda _i: self._redraw_plot())
        self.plot = SweepPlot(self)
        plot_box = QWidget(self)
        pl = QVBoxLayout(plot_box)
        pl.setContentsMargins(0, 0, 0, 0)
        y_row = QHBoxLayout()
        y_row.addWidget(QLabel("Plot", self))
        y_row.addWidget(self.y_combo)
        y_row.addStretch(1)
        pl.addLayout(y_row)
        pl.addWidget(self.plot, 1)

        top = QHBoxLayout()
        top.addWidget(inputs, 0)
        top.addWidget(plot_box, 1)

        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setFormat("%v / %m")
        self.status = QLabel("Set the lists, then Start. Each combination is one cold run.", self)
        self.status.setWordWrap(True)
        # Before Start: how many runs and about how long (updated as the lists are edited).
        self.cost_label = QLabel("", self)
        self.cost_label.setWordWrap(True)
        il.insertWidget(il.count() - 2, self.cost_label)
        for edit in self.fields.edits.values():
            edit.textEdited.connect(lambda _t: self.show_cost())
        self.tokens_spin.valueChanged.connect(lambda _v: self.show_cost())
        self.rounds_spin.valueChanged.connect(lambda _v: self.show_cost())
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        self.table = SweepTable(self)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        bottom = self._result_buttons("Apply to sliders", "Set the window's controls to the selected row's knobs",
                                      self.apply_selected, self._save_dialog)

        upper = QWidget(self)
        ul = QVBoxLayout(upper)
        ul.setContentsMargins(0, 0, 0, 0)
        ul.addLayout(top, 1)
        ul.addWidget(self.progress)
        ul.addWidget(self.status)
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(upper)
        splitter.addWidget(self.table)
        splitter.setChildrenCollapsible(False)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)

        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(bottom)

        self.runner.waiting.connect(self._say)
        self.runner.started.connect(self._on_started)
        self.runner.item.connect(self._on_result)
        self.runner.succeeded.connect(self._on_done)
        self.runner.failed.connect(self._on_failed)
        self.runner.finished.connect(self._update_buttons)
        self.resize(1180, 780)
        self._update_buttons()
        self.show_cost()

    def show_cost(self) -> str:
        """The runs Start would make and about how long, before Start; the text shown."""
        grid = self.fields.parse() if not self.runner.busy() else None
        if grid is None:
            return self.cost_label.text()
        base = self.window_.current_settings().with_changes(n_gen=self.tokens_spin.value())
        try:
            combos = expand_grid(base, grid)
        except ShardscopeError as exc:
            self.cost_label.setText(str(exc))
            return self.cost_label.text()
        refused = [r for r in map(engine_refusal, combos) if r is not None]
        runs = len(combos) - len(refused)
        text = cost_text(runs, self.tokens_spin.value(), self.window_.last_round, warm_rounds=self.rounds_spin.value())
        self.progress.setRange(0, max(1, runs))  # before Start the bar says the same N as the text
        self.progress.setValue(0)
        if refused:
            text += f"; {len(refused)} more skipped: {refused[0]}"
        self.cost_label.setText(f"Start: {text}")
        return self.cost_label.text()

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        """Parse the lists (refusals inline), then sweep on the worker thread."""
        grid = self._parsed_fields()
        if grid is None:
            return
        base = self.window_.current_settings()
        base = base.with_changes(n_gen=self.tokens_spin.value(), **{k: v[0] for k, v in grid.items()})
        try:
            combos = expand_grid(base, grid)
        except ShardscopeError as exc:
            self._say(str(exc), error=True)
            return
        # The plot's x axis and lines: the knobs that vary (one run: the budget, read by every run kind).
        self.knobs = [k for k, v in grid.items() if len(v) > 1] or ["budget_mb"]
        self.device = self.device_combo.device_id()
        self.total = len(combos)
        self.results = []
        self.table.reset_columns(self.knobs)
        self.plot.show_results([], self.knobs)
        self.progress.setRange(0, self.total)
        self.progress.setValue(0)
        device, most = self.device, self.rounds_spin.value()

        def sweep(emit, should_stop) -> int:
            for result in iter_sweep(base, grid, device=device, should_stop=should_stop, min_rounds=min(3, most),
                                     max_rounds=most):
                emit(result)
            return self.total

        refusal = self.runner.start(sweep)
        if refusal:
            self._say(refusal, error=True)
        self._update_buttons()

    def _on_started(self) -> None:
        self._started_at = time.monotonic()
        self._say(f"sweeping {self.total} combinations, {self.tokens_spin.value()} tokens each "
                  f"on {self.window_.model_name()} …")
        self._update_buttons()

    def _on_result(self, result: SweepResult) -> None:
        self.results.append(result)
        if result.stopped:
            return  # partial: no numbers worth a row (the CLI does not write it either)
        self.table.add_result(result)
        self._redraw_plot()
        done = result.index + 1
        self.progress.setValue(done)
        self._say(eta_text(done, self.total, time.monotonic() - self._started_at))

    def _on_done(self, _total: int) -> None:
        rows = self.table.rowCount()
        skipped = sum(1 for r in self.results if r.skipped)
        failed = sum(1 for r in self.results if r.error and not r.skipped and not r.stopped)
        ok = sum(1 for r in self.results if r.ok)
        elapsed = time.monotonic() - self._started_at
        if self.runner.stop_requested():
            self._say(f"cancelled after {ok} of {self.total} runs: {rows} finished rows kept "
                      f"({skipped} skipped, {failed} failed)")
        else:
            self._say(f"done: {eta_text(self.total, self.total, elapsed)}; {ok} ran, {skipped} skipped, "
                      f"{failed} failed. {self.ranking()} Click a header to sort.")

    def ranking(self) -> str:
        """The best combination by its interval, or the tie (engine/search/search_noise.ranking_line)."""
        from shardscope.engine.search.search_noise import ranking_line

        groups = {r.settings: list(r.rounds or [r.summary]) for r in self.results if r.ok}
        key, what = ("projected_ts", f"best on {self.device} (projected)") if self.device else ("avg_ts",
                                                                                                "fastest here")
        line = ranking_line(groups, lambda s: describe_settings(s, self.knobs), what, key)
        return f"{line}." if line else ""

    def _on_failed(self, message: str) -> None:
        self._say(message, error=message != "cancelled")

    def _redraw_plot(self) -> None:
        self.plot.show_results(self.results, self.knobs, self.y_combo.currentData())

    # ------------------------------------------------------------------ results
    def settings_for(self, result: SweepResult) -> RunSettings:
        """The window's settings with every knob the sweep could vary taken from the row
        (the window keeps its own tokens, prompt and context: the sweep's few tokens are
        for measuring only)."""
        return self.window_.current_settings().with_changes(
            **{k: getattr(result.settings, k) for k in GRID_KEYS})

    def select_row(self, row: int) -> None:
        self.table.selectRow(row)

    def _chosen(self) -> SweepResult | None:
        result = self.table.selected_result()
        if result is None or not result.ok:
            self._say("Select a row that ran (skipped and failed rows have no settings to use).", error=True)
            return None
        return result

    def apply_selected(self) -> bool:
        result = self._chosen()
        if result is None:
            return False
        settings = self.settings_for(result)
        self.window_.apply_settings(settings, label="sweep row")
        self._say(f"applied to the sliders: {self._describe(result)}")
        return True

    def save_selected_as(self, name: str):
        """Save the selected row as a user profile; the Profile, or None (message shown)."""
        result = self._chosen()
        if result is None:
            return None
        s = result.summary
        proj = (f", projected {s.projected_ts:.3g} tok/s on {s.device} ({s.projected_bound}-bound)"
                if s.device else "")
        description = (f"From a sweep on {s.model_filename}: measured {s.avg_ts:.3g} tok/s over "
                       f"{s.n_gen} tokens{proj}.")
        profile = self.window_.save_profile_as(name, settings=self.settings_for(result), device=self.device,
                                               description=description)
        if profile is not None:
            self._say(f"saved profile {profile.name!r} to {profile.path}")
        else:
            self._say(self.window_.last_error or "not saved", error=True)
        return profile

    def _save_dialog(self) -> None:
        if self._chosen() is None:
            return
        name, ok = QInputDialog.getText(self, "Save as profile", "Profile name:")
        if ok and name.strip():
            self.save_selected_as(name)

    def _describe(self, result: SweepResult) -> str:
        return describe_settings(result.settings)

    # ------------------------------------------------------------------ state
    def _update_buttons(self) -> None:
        busy = self.runner.busy()
        self.start_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        self.fields.set_enabled(not busy)
        self.tokens_spin.setEnabled(not busy)
        self.rounds_spin.setEnabled(not busy)
        self.device_combo.setEnabled(not busy)
        chosen = self.table.selected_result()
        usable = chosen is not None and chosen.ok
        self.apply_button.setEnabled(usable)
        self.save_button.setEnabled(usable)

    def refill(self) -> None:
        """The kept dialog reopened on another model or run kind: its lists are that run's."""
        current = self.window_.current_settings()
        key = (current.model_path, idle_knobs(current))
        if self.runner.busy() or key == self._prefilled_for:
            return
        self._prefilled_for = key
        for f in sweep_fields(current):
            self.fields.set_text(f.key, f.default)
        self.fields.set_idle(key[1], idle_reason(current))

    def showEvent(self, event) -> None:
        self.refill()
        self.show_cost()  # a round may have ended since: a time estimate to give now
        super().showEvent(event)
