"""The window's rounds table: every complete round of the session, one pinned as the baseline.

A mixin of MainWindow (it uses the window's runs, chart, numbers panel, device panel and
profile saving), kept apart so the window module stays about drawing. Pinning a round
puts its figures behind the round panel's deltas and its curves faintly behind the live
ones, lined up with the start of the round being run.
"""

from __future__ import annotations

import math
import statistics

from PySide6.QtWidgets import QInputDialog

from shardscope.app.devices.round_projection import RoundProjection
from shardscope.app.rounds.rounds import Round, baseline_values, round_columns, round_curves, round_tips, round_values
from shardscope.engine.devices.run_projection import round_stall
from shardscope.engine.knobs.knobs import KNOBS, SWEPT, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure import host_steal
from shardscope.widgets import ChartGhosts, RoundsTable, format_number


class WindowRounds:
    def _build_rounds(self) -> RoundsTable:
        self.rounds: list[Round] = []
        self._fit: dict[str, list] = {}  # per fitted column: [every value empty, first value, all equal]
        self._fit_shown: tuple | None = None  # (hidden, shared) last set on the table
        self._round_start: float | None = None  # window time of the running round's first sample
        # Live knob changes the running run took: (window time, settings before). A round
        # that spans one is recorded as mixed, with both values (rounds.Round.start_settings).
        self._live_changes: list[tuple[float, RunSettings]] = []
        self.rounds_table = RoundsTable(round_columns())
        self.rounds_table.setToolTip("Every complete round of this session; click a header to sort")
        self.ghosts = ChartGhosts(self.chart)
        return self.rounds_table

    def _subscribe_rounds(self) -> None:
        t = self.rounds_table
        t.baseline_changed.connect(self._on_baseline)
        t.apply_requested.connect(self.apply_round)
        t.save_requested.connect(self._save_round_dialog)
        self.runs.run_started.connect(lambda *_: self._next_round())
        self.runs.sample.connect(self._round_sample)
        self.device_panel.chosen.connect(self._reproject_rounds)

    def _next_round(self) -> None:
        self._round_start = None
        self._live_changes.clear()
        self._steal_mark = host_steal.reading()  # the host's steal from here to the round's end

    def _round_stall(self, summary) -> str:
        """What stalled this round's host: its steal since the last round ended (or the run
        started), a token far above the round's median, a prompt pass far above the usual."""
        now = host_steal.reading()
        before = getattr(self, "_steal_mark", now)
        self._steal_mark = now
        usual = [r.summary.ttft_ms for r in self.rounds[-20:] if not r.stall and r.number > 1]
        return round_stall(summary, host_steal.share(before, now),
                           statistics.median(usual) if len(usual) >= 2 else math.nan)

    def note_live_change(self, before: RunSettings) -> None:
        """The running run took new settings at the newest sample's time."""
        self._live_changes.append((self.runs.last_t, before))

    def _round_sample(self, t: float, _s) -> None:
        if self._round_start is None:
            self._round_start = t
            self.ghosts.place(t)  # the baseline's start under the live round's start

    def add_round(self, summary, projection: RoundProjection | None) -> Round | None:
        """A round ended: a complete one becomes a row (a stopped one has too few tokens)."""
        start = self._round_start if self._round_start is not None else self.runs.last_t
        self._round_start = None
        if summary.stopped:
            return None
        end = self.runs.last_t
        during = [before for t, before in self._live_changes if start <= t <= end]
        self._live_changes = [(t, b) for t, b in self._live_changes if t > end]
        settings = self.current_settings()
        if self.rounds and self.rounds[-1].settings == settings:
            settings = self.rounds[-1].settings  # one object for a run of rounds at one setting (160 a minute)
        r = Round(len(self.rounds) + 1, settings, summary, start, end, projection,
                  start_settings=during[0] if during else None, stall=self._round_stall(summary))
        if not r.mixed_knobs():
            r.start_settings = None  # changed and changed back, or a knob the table does not show
        self.rounds.append(r)
        values = round_values(r)
        self.rounds_table.add_row(r.number, values, lambda: round_tips(r))  # made when one is shown
        self._fit_columns(values)
        return r

    def _fit_columns(self, values: dict) -> None:
        """Room for what differs: a knob column no round has a value for (an expert knob on a
        dense model) is hidden, and so is one every round shares once there are two rounds;
        the shared values are listed under the table instead. Kept per column as rounds come
        (no value yet, the first value, all the same): reading every row at each round grew
        with the session, a thousand rounds in ten minutes of a small MoE."""
        n = len(self.rounds)
        shared, hidden = [], []
        for col in round_columns():
            if col.key not in ("model", "mixed", *SWEPT):
                continue
            v = values[col.key]
            fit = self._fit.setdefault(col.key, [True, v, True])  # [every value empty, first, all equal]
            fit[0] = fit[0] and (v is None or v == "")
            fit[2] = fit[2] and v == fit[1]
            if fit[0]:
                hidden.append(col.key)
            elif col.key != "mixed" and n > 1 and fit[2]:
                hidden.append(col.key)
                spec = KNOBS.get(col.key)
                shared.append(f"{spec.brief} {spec.text(fit[1])}" if spec else f"{col.key} {fit[1]}")
        shown = (tuple(hidden), tuple(shared))
        if shown != self._fit_shown:
            self._fit_shown = shown
            self.rounds_table.set_hidden(hidden)
            self.rounds_table.note.setText(f"same in every round: {', '.join(shared)}" if shared else "")

    def round_by_number(self, number: int) -> Round:
        return self.rounds[number - 1]

    def baseline_round(self) -> Round | None:
        number = self.rounds_table.baseline()
        return self.round_by_number(number) if number is not None else None

    def pin_baseline(self, number: int | None) -> None:
        self.rounds_table.pin(number)

    def _on_baseline(self, number: int | None) -> None:
        r = self.round_by_number(number) if number is not None else None
        self.round_numbers.set_baseline(baseline_values(r) if r is not None else None)
        if r is None:
            self.ghosts.set(None)
            return
        t, curves = round_curves(r, self.timeline)
        self.ghosts.set(t, curves, label=f"baseline ({r.label()})")
        self.ghosts.place(self._round_start if self._round_start is not None else r.start_t)
        self.statusBar().showMessage(f"baseline: {r.label()} ({describe(r.settings)}); "
                                     f"deltas in the round panel, its curves faint on the charts", 8000)

    def _reproject_rounds(self) -> None:
        for r in self.rounds:
            r.projection = self.device_panel.project(r.summary)
            values = round_values(r)
            for key in ("projected_ts", "device", "bound"):
                self.rounds_table.set_cell(r.number, key, values[key])  # the tips are made from r when shown
        base = self.baseline_round()
        if base is not None:
            self.round_numbers.set_baseline(baseline_values(base))

    # ------------------------------------------------------------------ row actions
    def round_settings(self, number: int) -> RunSettings:
        """The window's settings with every knob a sweep varies taken from the round (the
        window keeps its model, tokens and prompt)."""
        r = self.round_by_number(number)
        return self.current_settings().with_changes(**{k: getattr(r.settings, k) for k in SWEPT})

    def apply_round(self, number: int) -> None:
        self.apply_settings(self.round_settings(number), label=f"{self.round_by_number(number).label()}")
        self.statusBar().showMessage(f"applied {self.round_by_number(number).label()} to the sliders", 5000)

    def save_round_as(self, number: int, name: str):
        """Save the round's knobs as a user profile for the window's device; the Profile or None."""
        r = self.round_by_number(number)
        s = r.summary
        proj = f", projected {format_number(r.projection.tok_s)} tok/s on {r.projection.device_name}" \
            if r.projection is not None else ""
        description = (f"From {r.label()} on {s.model_filename}: measured {format_number(s.avg_ts)} tok/s "
                       f"over {s.n_gen} tokens{proj}.")
        return self.save_profile_as(name, settings=self.round_settings(number), device=self.device_id(),
                                    description=description)

    def _save_round_dialog(self, number: int) -> None:
        name, ok = QInputDialog.getText(self, "Save as profile", "Profile name:",
                                        text=f"{self.model_name()} {self.round_by_number(number).label()}")
        if ok and name.strip():
            self.save_round_as(number, name)
