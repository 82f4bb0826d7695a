"""The MoE column: the expert map (what the expert cache holds and what the router picks) and
the cacheability curve (hit rate against cache size, replayed from the routing seen so far
or from a trace file). Shown only for MoE models.

The map is polled on the GUI thread at up to 10 Hz (within 1 % of a core) from ``view_source`` (the worker's
``latest_view``: the newest copy the run process sent, taken without waiting for it), so the
decode never waits for a paint, the window never waits for the run, and no widget is touched
off the GUI thread. Replays run on a
BackgroundTask that waits for a separate process (app/experts/cacheability_curve.py says why), with
progress, an ETA and Cancel: on a long session a replay takes minutes. Its curves belong to the
model they were replayed from: opening another model clears them (forget_curves). Where the
run's threads leave no core for the replay (cacheability_curve.pause_for_replay), the run holds
at a token boundary while it replays, and the panel says so; it goes on when the replay ends,
fails or is cancelled, and a run started meanwhile is held too.
"""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from shardscope.app.base.background import BackgroundTask
from shardscope.app.experts.cacheability_curve import (
    CacheabilityResult,
    compute_in_process,
    eta_text,
    pause_for_replay,
    projected_points,
    usable_cores,
)
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.knobs import KNOBS
from shardscope.engine.layout.moe_layout import MoeLayout
from shardscope.widgets import ExpertMap
from shardscope.widgets.cacheability_plot import CacheabilityPlot
from shardscope.widgets.draw_budget import DrawBudget

POLL_MS = 100


class ExpertPanel(QWidget):
    cache_size_chosen = Signal(float)  # a click on the cacheability plot: MiB
    computed = Signal(object)  # CacheabilityResult, once drawn
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view_source: Callable[[], object] = lambda: None  # an ExpertView or None
        self.records_source: Callable[[], object] = lambda: None  # a RoutingTrace or None
        self.run_source: Callable[[], object] = lambda: None  # the live run's RunWorker (pause, settings) or None
        self.cores: Callable[[], int] = usable_cores
        self._replaying = False
        self._paused_run = None  # the RunWorker this panel paused for its replay
        self.moe: MoeLayout | None = None
        self.result: CacheabilityResult | None = None
        self.task: BackgroundTask | None = None
        self.polls = 0  # views drawn (the responsiveness bench counts them)
        self._summary = None
        self._device_id: str | None = None
        self._policy = KNOBS["expert_policy"].default

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        map_box = QGroupBox("Experts (layers \u00d7 experts)")
        ml = QVBoxLayout(map_box)
        row = QHBoxLayout()
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        row.addWidget(self.caption, 1)
        self.view_combo = QComboBox()
        self.view_combo.addItems(["state", "heat"])
        self.view_combo.setToolTip("state: what the expert cache holds, picked experts in red\n"
                                   "heat: how often each expert was picked over the last tokens")
        self.view_combo.currentTextChanged.connect(lambda v: self.map.set_view(v))
        row.addWidget(self.view_combo)
        ml.addLayout(row)
        self.map = ExpertMap()
        self.map.setMinimumHeight(140)
        ml.addWidget(self.map, 1)
        self.advice = QLabel("")  # the engine's one line when another policy hits more on the run's routing
        self.advice.setWordWrap(True)
        self.advice.setStyleSheet("color: #a04000")
        self.advice.hide()
        ml.addWidget(self.advice)
        layout.addWidget(map_box, 1)

        cache_box = QGroupBox("Cacheability (routing replayed per policy)")
        cl = QVBoxLayout(cache_box)
        self.plot = CacheabilityPlot()
        self.plot.setToolTip("Click a size to use it as the expert cache")
        self.plot.size_chosen.connect(self.cache_size_chosen)
        cl.addWidget(self.plot, 1)
        cl.addWidget(self.plot.legend_label)  # the curves' names, under the plot rather than over its curves
        buttons = QHBoxLayout()
        self.compute_button = QPushButton("Compute cacheability")
        self.compute_button.setToolTip("Replay this session's routing through every policy at several cache sizes")
        self.compute_button.clicked.connect(self.compute_from_session)
        buttons.addWidget(self.compute_button)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the replay (the curves drawn before stay)")
        self.cancel_button.clicked.connect(self.cancel_replay)
        self.cancel_button.hide()
        buttons.addWidget(self.cancel_button)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        buttons.addWidget(self.status, 1)
        cl.addLayout(buttons)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.progress.hide()
        cl.addWidget(self.progress)
        self.pause_note = QLabel("")  # says the live run is held while the curve replays
        self.pause_note.setWordWrap(True)
        self.pause_note.setStyleSheet("color: #a04000")
        self.pause_note.hide()
        cl.addWidget(self.pause_note)
        self.routing_stats = QLabel("")  # the replayed trace's routing statistics (engine.experts.trace_stats)
        self.routing_stats.setWordWrap(True)
        # Room for the two lines wrapped at the panel's narrowest: a wrapped label's height is not its hint.
        self.routing_stats.setMinimumHeight(4 * self.routing_stats.fontMetrics().lineSpacing())
        self.routing_stats.setToolTip("lag-n: share of a token's picks the token n back also picked (per layer); "
                                      "static top-k: share the run's k most-picked experts cover; "
                                      "hottest-8: share of the 8 most-picked experts")
        cl.addWidget(self.routing_stats)
        layout.addWidget(cache_box, 1)
        self.setMinimumWidth(270)  # the window fits 1280 px with all four columns (issue 48)

        # At most 10 Hz, and never more than 1 % of a core (widgets/draw_budget.py): the map's
        # copy and image rebuild grow with layers x experts (61 x 384 for Kimi).
        self.draw_budget = DrawBudget(max_hz=1000 / POLL_MS, duty=0.01)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self._timed_poll)
        self.timer.start()

    # ------------------------------------------------------------------ the map
    def show_layout(self, moe: MoeLayout) -> None:
        """A (new) MoE model: the map's shape and a caption of its split."""
        self.moe = moe
        if self.map.shape() != (len(moe.layers), moe.n_expert):
            self.map.set_shape(len(moe.layers), moe.n_expert)
        self.plot.set_size_limit(moe.expert_bytes / MIB)  # 0 to every expert, until a curve is computed
        self.caption.setText(
            f"{len(moe.layers)} layers \u00d7 {moe.n_expert} experts, top-{moe.n_expert_used}; "
            f"dense {moe.dense_bytes / MIB:,.0f} MiB stays resident, experts {moe.expert_bytes / MIB:,.0f} MiB stream")

    def show_advice(self, text: str) -> None:
        """The last round's cache advice in the window's words ("" hides it)."""
        self.advice.setText(text)  # names the policy, the trace replayed and the margin (or a tie)
        self.advice.setVisible(bool(text))

    def _timed_poll(self) -> None:
        start = time.perf_counter()
        try:
            self.poll()
        finally:
            self.draw_budget.spent(time.perf_counter() - start)
            self.timer.start(self.draw_budget.interval_ms())

    def poll(self) -> None:
        """10 Hz: copy the engine's view into the map (the map skips unchanged arrays)."""
        if not self.isVisible():
            return
        view = self.view_source()
        if view is None:
            return
        if self.map.shape() != view.states.shape:
            self.map.set_shape(*view.states.shape)
        self.map.set_states(view.states)
        self.map.set_picked(view.picked)
        self.map.set_heat(view.heat, view.window)
        self.map.set_current_layer(view.current_layer)
        self.polls += 1

    # ------------------------------------------------------------------ cacheability
    def compute_from_session(self) -> None:
        """Replay the running session's routing (the button)."""
        self._start(self.records_source, "this session")

    def compute_from_file(self, path: str) -> None:
        """Replay a routing trace file (File → Open routing trace…)."""
        self._start(lambda: path, path)

    def _start(self, source: Callable[[], object], what: str) -> None:
        if self.task is not None and self.task.isRunning():
            self.status.setText("a replay is already running")
            return
        at = (self.plot.current(),) if self.plot.current() else ()  # a replayed figure at the cache in use

        def work(progress):
            records = source()  # on the task's thread: copying a long trace takes a while
            if records is None:
                raise ShardscopeError("no MoE run is going: run an MoE model, or open a routing trace")
            return compute_in_process(records, at_mb=at, progress=progress)

        self._what, self._started = what, time.monotonic()
        self._replaying = True
        self._sync_pause()  # before the trace is copied: the copy needs a core too
        self.status.setText(f"replaying {what} \u2026 " + ("(the run is paused)" if self._paused_run is not None
                                                          else "(at idle priority: the run keeps its speed)"))
        self.compute_button.setEnabled(False)
        self.cancel_button.show()
        self.progress.setValue(0)
        self.progress.show()
        task = self.task = BackgroundTask(work, self)
        task.progressed.connect(self._on_progress)
        task.succeeded.connect(self._on_computed)
        task.failed.connect(self._on_failed)
        task.finished.connect(self._on_task_ended)
        task.start()

    def _on_progress(self, fraction: float) -> None:
        if self.task is None or self.sender() is not self.task:
            return  # a cancelled replay's last report
        self._sync_pause()  # a run started, stopped or given other threads meanwhile
        self.progress.setValue(int(1000 * fraction))
        self.status.setText(f"replaying {self._what}: {eta_text(fraction, time.monotonic() - self._started)}")

    def _on_task_ended(self) -> None:
        if self.sender() is self.task:
            self._end_pause()
            self.compute_button.setEnabled(True)
            self.cancel_button.hide()
            self.progress.hide()

    def _sync_pause(self) -> None:
        """Hold the live run while a replay runs on a host with no core for it; let it go otherwise."""
        run = self.run_source() if self._replaying else None
        if run is not None and run.ended:
            run = None
        cores, threads = self.cores(), run.settings.threads if run is not None else 0
        wanted = run if run is not None and pause_for_replay(cores, threads) else None
        if self._paused_run is not None and self._paused_run is not wanted:
            self._paused_run.pause(False)  # nothing is sent to a run that ended
            self._paused_run = None
        if wanted is not None and self._paused_run is None:
            wanted.pause(True)
            self._paused_run = wanted
        if self._paused_run is not None:
            self.pause_note.setText(
                f"Run paused while the curve replays: no free core ({cores} "
                f"core{'s' if cores != 1 else ''}, the run takes {threads} thread{'s' if threads != 1 else ''} "
                f"and the replay one). It goes on when the replay ends; its tok/s leave the pause out.")
        self.pause_note.setVisible(self._paused_run is not None)

    def _end_pause(self) -> None:
        self._replaying = False
        self._sync_pause()

    @property
    def run_paused(self) -> bool:
        """Whether this panel holds the live run for its replay (the note shows)."""
        return self._paused_run is not None

    def cancel_replay(self) -> None:
        """Cancel: the replay's process ends at once (within its 0.2-s poll); the curves drawn stay."""
        if self.task is not None and self.task.isRunning():
            self.task.cancel()
            self.status.setText("cancelling \u2026")

    def forget_curves(self) -> None:
        """Another model: no curve, note or statistics of the last one's routing stays; a replay
        still going is cancelled (its answer would be about the old model)."""
        if self.task is not None and self.task.isRunning():
            self.task.cancel()
        self.task = None
        self._end_pause()
        self.compute_button.setEnabled(True)
        self.cancel_button.hide()
        self.progress.hide()
        self.result = None
        self.plot.clear_all()
        self.routing_stats.setText("")
        self.status.setText("")

    def _on_computed(self, done) -> None:
        if self.sender() is not self.task:
            return  # a replay of a model no longer open
        self._end_pause()  # the run goes on before the curves are drawn
        result, stats = done
        self.routing_stats.setText(stats)
        self.result = result
        self.plot.set_curves(result.curves)
        self.plot.set_policy(self._policy)
        self._show_projected()
        self.status.setText(f"replayed {result.source}")
        self.computed.emit(result)

    def _on_failed(self, message: str) -> None:
        if self.sender() is not self.task:
            return
        self._end_pause()
        if message == "cancelled":
            self.status.setText("replay cancelled" + (" (the curves shown are the last complete replay)"
                                                      if self.result is not None else ""))
            return
        self.status.setText(message.splitlines()[0])
        self.failed.emit(message)

    def set_current_cache(self, cache_mb: float | None) -> None:
        self.plot.set_current(cache_mb)

    def set_projection_inputs(self, summary, device_id: str | None, policy: str) -> None:
        """The last complete round and the chosen device: projected tok/s at each cache size."""
        self._summary, self._device_id, self._policy = summary, device_id, policy
        self.plot.set_policy(policy)
        self._show_projected()

    def _show_projected(self) -> None:
        r, summary, device = self.result, self._summary, self._device_id
        if r is None or summary is None or not device or not hasattr(summary, "dense_mb_per_token"):
            return
        curve = r.curves.get(self._policy) or next(iter(r.curves.values()), [])
        try:
            points = projected_points(summary, curve, r.used_expert_mb, device)
        except ShardscopeError:
            return  # a round without decoded tokens has nothing to project
        self.plot.set_projected(points, f"{device}, {self._policy}")

    def close_tasks(self, wait_ms: int) -> None:
        """Closing the window: a QThread destroyed while running aborts the app."""
        self.timer.stop()
        self._end_pause()  # a run that outlives the window (stopping) must not stay held
        if self.task is not None:
            self.task.cancel()
            self.task.wait(wait_ms)
