"""Run → Auto-tune for device…: the settings with the best projected tok/s on a device.

A full sweep of four knobs is tens of cold runs; ``engine.search.tune.auto_tune`` walks
one knob at a time from the device's built-in profile and caches every result, so
it needs a fraction of them (the dialog reports how many, against the full grid's
size, so the saving is visible rather than claimed). Each candidate is a real run
of the open model here, projected onto the device; a candidate whose weights do
not fit the device's memory never wins.

Each candidate is measured until its projected figure's interval is known (a cold first round
left out, then warm rounds: engine.search.tune), every line shows the interval, and the Best
box names the margin, the ties (overlapping intervals: the current or cheaper value kept) and
any knob that cannot move the projection ("no effect"). A saved profile's description
records the same.

The budget is capped at the window's Memory budget slider: on a small model the
device's whole memory budget would hold everything and there would be nothing to
tune. The SSD emulated while measuring is the window's SSD slider. Candidate lists
are small by default (a few minutes on two cores) and use the sweep's list syntax.
The run goes on a worker thread; Cancel takes effect after the current run (the
engine checks between runs), and keeps the best found so far.
"""

from __future__ import annotations

import html
import math
import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFormLayout,
    QGroupBox,
    QInputDialog,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QSpinBox,
    QVBoxLayout,
)

from shardscope.app.devices.device_combo import DeviceCombo
from shardscope.app.devices.round_projection import unverified_inputs
from shardscope.app.search.knob_fields import KnobField, KnobFields, knob_field
from shardscope.app.search.runnable_lists import cost_text, idle_knobs, idle_reason, runnable_grid
from shardscope.app.search.search_dialog import DialogHost, SearchDialog
from shardscope.app.search.search_runner import SearchRunner
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import get_device
from shardscope.engine.devices.run_projection import compute_basis
from shardscope.engine.knobs.knob_ranges import format_values, parse_knob
from shardscope.engine.knobs.knobs import KNOBS, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.search.tune import (
    DEFAULT_CANDIDATES,
    MAX_ROUNDS,
    MIN_ROUNDS,
    TUNE_KNOBS,
    Evaluation,
    TuneResult,
    auto_tune,
    device_weight_budget_mb,
    searched_candidates,
    verdict_text,
)
from shardscope.widgets import format_number

DEFAULT_TOKENS = 6  # as `shardscope tune`
DEFAULT_PASSES = 2
TUNED_KEYS = (*TUNE_KNOBS, "budget_mb")


def tune_fields(base: RunSettings | None = None) -> list[KnobField]:
    """Small candidate sets: a 2 x 3 x 3 x cores grid, a few minutes of runs on two cores;
    with ``base`` (the window's settings at the capped budget) cut to what the engine runs."""
    cores = os.cpu_count() or 1
    every_core = f"1-{cores}" if cores > 1 else "1"
    texts = {key: KNOBS[key].propose or KNOBS[key].tune or every_core for key in TUNE_KNOBS}
    if base is not None:  # a knob the run does not read (a dense model's expert knobs): its one value
        idle = idle_knobs(base)
        texts = {key: format_values([getattr(base, key)]) if key in idle else text for key, text in texts.items()}
        grid = runnable_grid(base, {key: parse_knob(KNOBS[key].label, text, key) for key, text in texts.items()})
        texts = {key: format_values(values) for key, values in grid.items()}
    return [knob_field(key, text) for key, text in texts.items()]


def max_runs(candidates: dict[str, list], passes: int) -> int:
    """The most runs the descent can make: the start, then per pass every other value
    of every knob; never more than the grid."""
    grid = math.prod(len(v) for v in candidates.values())
    return min(grid, 1 + passes * sum(len(v) - 1 for v in candidates.values()))


def knobs_text(s: RunSettings, budget: bool = True, idle: tuple[str, ...] = ()) -> str:
    """The tuned knobs of ``s`` in words, leaving out ``idle`` ones (knobs the run did not read)."""
    return describe(s, tuple(k for k in (TUNED_KEYS if budget else TUNE_KNOBS) if k not in idle))


def evaluation_text(ev: Evaluation, idle: tuple[str, ...] = ()) -> str:
    head = f"run {ev.order}" if ev.order else "refused"
    if ev.summary is None:
        return f"{head}: {knobs_text(ev.settings, budget=False, idle=idle)} → {ev.error}"
    s = ev.summary
    fit = "" if ev.fits else ", does not fit the device"
    iv, here = ev.interval, ev.measured_interval
    projected = iv.text() if iv is not None else format_number(s.projected_ts)
    stalled = f"; {ev.stalled} round(s) left out: the host stalled" if ev.stalled else ""
    # The budget is the same for every candidate (the cap): left out to keep lines short.
    return (f"{head}: {knobs_text(ev.settings, budget=False, idle=idle)} → projected {projected} tok/s "
            f"({s.projected_bound}-bound), measured {here.text() if here is not None else '?'} tok/s{fit}{stalled}")


class TuneDialog(SearchDialog):
    close_wait_ms = 60_000  # auto_tune checks for Cancel between runs: wait out one run
    cancel_message = "cancelling after the current run (the best so far is kept) …"

    def __init__(self, window: DialogHost) -> None:
        super().__init__(window)  # type: ignore[arg-type]  # the window is a QWidget
        self.setWindowTitle("Auto-tune for device")
        self.window_ = window
        self.runner = SearchRunner(window.runs, "the auto-tune", self)
        self.result: TuneResult | None = None
        self.evaluations: list[Evaluation] = []
        self.message = ""
        self._bound = 1  # the most runs the current search can make
        self._grid = 1  # the full grid's size, for comparison

        self.device_combo = DeviceCombo(self, allow_none=False)
        if not self.device_combo.set_device_id(window.device_id()):
            self.device_combo.set_device_id("iphone-16-pro")
        self.device_combo.currentIndexChanged.connect(lambda _i: self._show_budget())
        current = window.current_settings()
        self.idle = idle_knobs(current)  # the knobs this run kind ignores: one value, greyed, never named
        self.fields = KnobFields(tune_fields(current), self)
        self.fields.set_idle(self.idle, idle_reason(current))
        self._prefilled_for = (current.model_path, self.idle)
        self.tokens_spin = QSpinBox(self)
        self.tokens_spin.setRange(2, 4096)
        self.tokens_spin.setValue(DEFAULT_TOKENS)
        self.tokens_spin.setToolTip("Tokens per candidate run; the first is warm-up")
        self.passes_spin = QSpinBox(self)
        self.passes_spin.setRange(1, 6)
        self.passes_spin.setValue(DEFAULT_PASSES)
        self.passes_spin.setToolTip("Passes over all knobs at most (it stops early when a pass moves nothing)")
        self.rounds_spin = QSpinBox(self)
        self.rounds_spin.setRange(1, 16)
        self.rounds_spin.setValue(MAX_ROUNDS)
        self.rounds_spin.setToolTip("Warm rounds per candidate at most, after its cold first round; fewer where "
                                    f"its interval is known sooner (at least {MIN_ROUNDS}, or this many if fewer)")
        self.budget_label = QLabel("", self)
        self.budget_label.setWordWrap(True)
        self.cost_label = QLabel("", self)  # before Start: how many runs at most, about how long
        self.cost_label.setWordWrap(True)
        for edit in self.fields.edits.values():
            edit.textEdited.connect(lambda _t: self.show_cost())
        self.tokens_spin.valueChanged.connect(lambda _v: self.show_cost())
        self.passes_spin.valueChanged.connect(lambda _v: self.show_cost())
        self.rounds_spin.valueChanged.connect(lambda _v: self.show_cost())

        form = QFormLayout()
        form.addRow("Device", self.device_combo)
        form.addRow(self.fields)
        form.addRow("Tokens per run", self.tokens_spin)
        form.addRow("Passes at most", self.passes_spin)
        form.addRow("Warm rounds at most", self.rounds_spin)
        inputs = QGroupBox("Candidates (lists: 16,64 — ranges: 0-4, 1-8+2, 1-16*2)", self)
        il = QVBoxLayout(inputs)
        il.addLayout(form)
        il.addWidget(self.budget_label)
        il.addWidget(self.cost_label)

        run_row = self._run_buttons("Stop after the current run; the best so far is kept")
        run_row.addStretch(1)

        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("Start runs the search on the open model.", self)
        self.status.setWordWrap(True)
        self.log = QPlainTextEdit(self)
        self.log.setReadOnly(True)
        self.log.setMinimumHeight(120)
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)

        self.best_label = QLabel("", self)
        self.best_label.setWordWrap(True)
        self.best_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.best_label.setTextFormat(Qt.TextFormat.RichText)
        best_box = QGroupBox("Best", self)
        QVBoxLayout(best_box).addWidget(self.best_label)

        bottom = self._result_buttons("Apply", "Set the window's controls (and its device) to the best settings",
                                      self.apply_best, self._save_dialog)

        layout = QVBoxLayout(self)
        layout.addWidget(inputs)
        layout.addLayout(run_row)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(self.log, 1)
        layout.addWidget(best_box)
        layout.addLayout(bottom)

        self.runner.waiting.connect(self._say)
        self.runner.started.connect(self._on_started)
        self.runner.item.connect(self._on_eval)
        self.runner.succeeded.connect(self._on_done)
        self.runner.failed.connect(lambda m: self._say(m, error=m != "cancelled"))
        self.runner.finished.connect(self._update_buttons)
        self._show_budget()
        self.show_cost()
        self.resize(820, 720)
        self._update_buttons()

    # ------------------------------------------------------------------ inputs
    def budget_cap_mb(self) -> float:
        return float(self.window_.current_settings().budget_mb)

    def _show_budget(self) -> None:
        device_id = self.device_combo.device_id()
        try:
            device_mb = device_weight_budget_mb(get_device(device_id)) if device_id else math.nan
        except ShardscopeError:
            device_mb = math.nan
        ssd = self.window_.current_settings().ssd_mb_s
        self.budget_label.setText(
            f"Model: {self.window_.model_name()}. Budget: capped at {self.budget_cap_mb():g} MB by the window's "
            f"Memory budget slider (the device allows {format_number(device_mb)} MB of weights). "
            f"SSD emulated while measuring: {'off' if not ssd else f'{ssd:g} MB/s'} (the window's SSD slider).")

    def searched(self, cands: dict[str, list]) -> dict[str, list]:
        """The lists auto_tune will search: a knob the run kind ignores keeps one value unless
        the user changed its list (engine.search.tune.searched_candidates), so counts are honest."""
        from shardscope.engine.runs.run_factory import streams_experts

        try:
            experts = streams_experts(self.window_.current_settings())
        except ShardscopeError:
            return cands
        given = {k: v for k, v in cands.items() if v != DEFAULT_CANDIDATES.get(k)}
        return searched_candidates(cands, experts, given)

    def show_cost(self) -> str:
        """At most how many runs Start makes and about how long; the text shown."""
        cands = self.fields.parse() if not self.runner.busy() else None
        if cands is not None:
            cands = self.searched(cands)
            runs = max_runs(cands, self.passes_spin.value())
            grid = math.prod(len(v) for v in cands.values())
            self.cost_label.setText("Start: at most " + cost_text(
                runs, self.tokens_spin.value(), self.window_.last_round, what=f"runs (the full grid is {grid})",
                warm_rounds=self.rounds_spin.value()))
        return self.cost_label.text()

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        cands = self._parsed_fields()
        if cands is None:
            return
        device_id = self.device_combo.device_id()
        if not device_id:
            self._say("Choose a device.", error=True)
            return
        self._show_budget()
        model_path = self.window_.current_settings().model_path
        cap, tokens, passes = self.budget_cap_mb(), self.tokens_spin.value(), self.passes_spin.value()
        most = self.rounds_spin.value()
        ssd = float(self.window_.current_settings().ssd_mb_s)
        self.result = None
        self.evaluations = []
        self.log.clear()
        self.best_label.setText("")
        self._bound = max_runs(self.searched(cands), passes)
        self._grid = math.prod(len(v) for v in self.searched(cands).values())
        self.progress.setRange(0, self._bound)
        self.progress.setValue(0)

        def tune(emit, should_stop) -> TuneResult:
            return auto_tune(device_id, model_path=model_path, candidates=cands, budget_cap_mb=cap,
                             n_gen=tokens, ssd_mb_s=ssd, max_passes=passes, on_eval=emit,
                             min_rounds=min(MIN_ROUNDS, most), max_rounds=most, should_stop=should_stop)

        refusal = self.runner.start(tune)
        if refusal:
            self._say(refusal, error=True)
        self._update_buttons()

    def _on_started(self) -> None:
        self._say(f"tuning for {self.device_combo.currentText()}: at most {self._bound} runs "
                  f"(the full grid is {self._grid}) …")
        self._update_buttons()

    def _on_eval(self, ev: Evaluation) -> None:
        self.evaluations.append(ev)
        self.log.appendPlainText(evaluation_text(ev, self.idle))
        self.progress.setValue(min(self._bound, len(self.evaluations)))
        runs = sum(1 for e in self.evaluations if e.order)
        self._say(f"{runs} runs so far (at most {self._bound}; full grid {self._grid}) …")

    def _on_done(self, result: TuneResult) -> None:
        self.result = result
        self.progress.setValue(self.progress.maximum())
        self.log.appendPlainText("decisions:")
        for line in result.path[:1] + [d.text() for d in result.decisions]:
            self.log.appendPlainText(f"  {line}")
        head = "cancelled: best so far" if result.stopped else "done"
        self._say(f"{head}: {result.runs} runs (+{result.refused} refused before loading) of a "
                  f"{result.grid_size}-combination grid, {result.passes} pass(es)")
        self.best_label.setText(self.best_text())
        self._update_buttons()

    def best_text(self) -> str:
        result = self.result
        if result is None:
            return ""
        if result.best is None or result.best.summary is None:
            return "No candidate ran and fit the device."
        best = result.best
        device = get_device(result.device_id)
        unverified = " (unverified numbers)" if unverified_inputs(device) else ""
        return (f"<b>{knobs_text(best.settings, idle=self.idle)}</b><br>"
                f"on {device.name}{unverified}: {html.escape(verdict_text(result))}<br>"
                f"device compute {compute_basis(device)}"
                + (f"<br>{result.refused} more refused before loading" if result.refused else ""))

    # ------------------------------------------------------------------ results
    def best_settings(self) -> RunSettings | None:
        """The window's settings with the tuned knobs and budget (its tokens and prompt kept)."""
        best = self.result.best if self.result is not None else None
        if best is None or best.summary is None:
            return None
        return self.window_.current_settings().with_changes(
            **{k: getattr(best.settings, k) for k in TUNED_KEYS})

    def apply_best(self) -> bool:
        settings = self.best_settings()
        if settings is None:
            return False
        self.window_.apply_settings(settings, label=f"auto-tune for {self.result.device_id}")
        self.window_.set_device(self.result.device_id)
        self._say(f"applied: {knobs_text(settings, idle=self.idle)}")
        return True

    def save_best_as(self, name: str):
        settings = self.best_settings()
        if settings is None:
            return None
        s, r = self.result.best.summary, self.result
        description = f"Auto-tuned for {r.device_id} on {s.model_filename}: {verdict_text(r)}"
        profile = self.window_.save_profile_as(name, settings=settings, device=r.device_id,
                                               description=description)
        self._say(f"saved profile {profile.name!r} to {profile.path}" if profile is not None
                  else self.window_.last_error or "not saved", error=profile is None)
        return profile

    def _save_dialog(self) -> None:
        if self.best_settings() is None:
            return
        name, ok = QInputDialog.getText(self, "Save as profile", "Profile name:",
                                        text=f"Tuned for {self.result.device_id}")
        if ok and name.strip():
            self.save_best_as(name)

    # ------------------------------------------------------------------ state
    def _update_buttons(self) -> None:
        busy = self.runner.busy()
        self.start_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        self.fields.set_enabled(not busy)
        for w in (self.tokens_spin, self.passes_spin, self.rounds_spin, self.device_combo):
            w.setEnabled(not busy)
        done = not busy and self.best_settings() is not None
        self.apply_button.setEnabled(done)
        self.save_button.setEnabled(done)

    def refill(self) -> None:
        """The kept dialog reopened on another model or run kind: its lists are that run's."""
        current = self.window_.current_settings()
        key = (current.model_path, idle_knobs(current))
        if self.runner.busy() or key == self._prefilled_for:
            return
        self._prefilled_for, self.idle = key, key[1]
        for f in tune_fields(current):
            self.fields.set_text(f.key, f.default)
        self.fields.set_idle(self.idle, idle_reason(current))

    def showEvent(self, event) -> None:
        self.refill()
        self._show_budget()  # the sliders may have moved since the dialog was last open
        self.show_cost()
        super().showEvent(event)

