"""Drives a run (StreamingRun, or ExpertRun for an MoE model over its budget: the engine's
``open_run`` decides) on its own QThread and turns its callbacks into Qt signals.

Why a worker object: ``StreamingRun.run`` blocks for as long as the user lets it
generate, and its callbacks fire on the decode thread and on the sampler's own
thread. Widgets may only be touched from the GUI thread, so every callback here
does nothing but ``emit``; Qt queues the plain payload (a MetricsSample, a
RunSummary, a token string) to the window.

One worker lives for one press of Run. Inside it, a *restart* (new shard size,
n_gpu_layers or model) stops the current StreamingRun and starts a fresh one
with the new settings without ending the thread, so the charts keep one timeline.
Each StreamingRun gets a number (``run_index``) that rides along with its
signals, so a late sample of a replaced run can never be charted as the new one's.

New settings go through ``apply``, which hands them to the run's ``apply``: the
engine answers "live" or "restart", or refuses (raised back to the caller, nothing
changed, so the window can revert the slider).

The expert map polls ``expert_view()`` from the GUI thread: the engine copies its view
under its own lock, and this worker's lock keeps the run from being closed meanwhile.
"""

from __future__ import annotations

import threading
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QThread, Signal

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.knobs.knobs import LIVE, changed
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.knobs.settings import RunSettings, validate

# Samples the run itself keeps (the window's timeline holds each as numbers): a few seconds,
# not the CLI's ten minutes, which grew the window by 5 MiB over its first ten minutes.
RUN_SAMPLES = 100


def describe_exception(exc: BaseException, model_path: str | None) -> str:
    """One line for the status bar and the dialog: the engine's own words, or "internal error"."""
    if isinstance(exc, KnobRefusal):  # named as the window names it: the slider, not the CLI flag
        return exc.for_window()
    if isinstance(exc, ShardscopeError):
        return str(exc)
    where = Path(model_path).name if model_path else "the bundled model"
    return f"internal error: {type(exc).__name__}: {exc} (while running {where})"


class RunWorker(QObject):
    # run_index, plan, settings: a new run was planned; plan is the ShardPlan of a
    # StreamingRun (fills the shard map) or the MoeLayout of an ExpertRun (the expert map)
    run_started = Signal(int, object, object)
    sample = Signal(int, object)  # run_index, MetricsSample
    # Tokens wait in the worker (take_tokens); tokens_ready tells the GUI once that some are
    # waiting, not once a token: 60-100 queued events a second woke the GUI thread, which
    # shares two cores with the run (issue 32).
    tokens_ready = Signal()
    phase = Signal(int, str)
    summary = Signal(int, object)  # run_index, RunSummary (one per round)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, settings: RunSettings) -> None:
        super().__init__()
        self._tokens: list[tuple[int, int, str, float]] = []  # run_index, index in round, piece, seconds
        self._tokens_told = False
        self._tokens_lock = threading.Lock()
        self._lock = threading.Lock()
        self._settings = settings
        self._stop_requested = False
        self._restart_requested = False
        self.run = None  # the live StreamingRun or ExpertRun; tests read its state
        self.run_index = 0

    # ------------------------------------------------------------------ GUI thread
    @property
    def settings(self) -> RunSettings:
        with self._lock:
            return self._settings

    def request_stop(self) -> None:
        """Thread-safe; returns at once. The thread ends after the current token."""
        with self._lock:
            self._stop_requested = True
            run = self.run
        if run is not None:
            run.stop()

    def expert_view(self):
        """The running ExpertRun's ExpertView (a copy), or None (dense run, none running)."""
        with self._lock:
            view = getattr(self.run, "expert_view", None)
            return view() if view is not None else None

    def routing_records(self):
        """The running ExpertRun's routing so far (what engine.replay takes), or None."""
        with self._lock:
            records = getattr(self.run, "routing_records", None)
            return records() if records is not None else None

    def apply(self, settings: RunSettings) -> str:
        """The run's answer to new settings: "live" or "restart" (then a new StreamingRun
        starts with them). Raises ShardscopeError, changing nothing, when refused."""
        with self._lock:
            run = self.run
            if run is not None:
                answer = run.apply(settings)
            else:  # being planned: work() hands the newest settings to the run before it starts
                validate(settings)
                answer = "restart" if any(k not in LIVE for k in changed(self._settings, settings)) else "live"
            self._settings = settings
            if answer == "restart":
                self._restart_requested = True
        if answer == "restart" and run is not None:
            run.stop()
        return answer

    def take_tokens(self) -> list[tuple[int, int, str, float]]:
        """The tokens decoded since the last call, in order (any thread; the GUI's drain)."""
        with self._tokens_lock:
            taken, self._tokens = self._tokens, []
            self._tokens_told = False
        return taken

    # --------------------------------------------------------------- worker thread
    def _took_token(self, index: int, n: int, piece: str, dt: float) -> None:
        with self._tokens_lock:
            self._tokens.append((index, n, piece, dt))
            tell, self._tokens_told = not self._tokens_told, True
        if tell:
            self.tokens_ready.emit()

    def work(self) -> None:
        """The thread's body: runs (and re-runs after restarts) until stopped or failed."""
        try:
            while True:
                with self._lock:
                    if self._stop_requested:
                        return
                    settings = self._settings
                    self._restart_requested = False
                self.run_index += 1
                index = self.run_index
                run = open_run(settings, on_sample=lambda s, i=index: self.sample.emit(i, s))
                run.keep_samples(RUN_SAMPLES)  # the window keeps each sample itself, as numbers
                run.on_token = lambda n, piece, dt, i=index: self._took_token(i, n, piece, dt)
                run.on_phase = lambda name, i=index: self.phase.emit(i, name)
                with self._lock:
                    wanted = self._settings
                    try:  # knobs moved while it was planned: the run takes them, or a new plan does
                        if not (self._stop_requested or self._restart_requested) and wanted != settings \
                                and run.apply(wanted) == "restart":
                            self._restart_requested = True
                    except Exception:
                        run.close()
                        raise
                    if self._stop_requested or self._restart_requested:
                        run.close()
                        continue
                    self.run = run
                try:
                    self.run_started.emit(index, getattr(run, "plan", None) or run.moe, run.settings)
                    run.run(continuous=True, on_summary=lambda s, i=index: self.summary.emit(i, s))
                except Exception:
                    if not run.stopping:
                        raise
                    # Stop pressed mid-layer can surface as "run stopped": not a failure.
                finally:
                    with self._lock:
                        self.run = None
                    run.close()
                with self._lock:
                    if self._stop_requested or not self._restart_requested:
                        return
        except Exception as exc:
            self.failed.emit(describe_exception(exc, self.settings.model_path))
        finally:
            self.finished.emit()


class RunThread:
    """A RunWorker on its own QThread: the pair the window starts on Run."""

    def __init__(self, settings: RunSettings) -> None:
        self.thread = QThread()
        self.thread.setObjectName("shardscope-run")
        self.worker = RunWorker(settings)
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.work)
        # Direct: quit() runs on the worker thread itself, so it works even while the
        # GUI thread is blocked in stop_and_wait() (closing the window). quit() is
        # thread-safe, and one that lands before exec() makes exec() return at once.
        self.worker.finished.connect(self.thread.quit, Qt.ConnectionType.DirectConnection)

    def start(self) -> None:
        self.thread.start()

    def stop_and_wait(self, timeout_ms: int) -> bool:
        self.worker.request_stop()
        return self.thread.wait(timeout_ms)

    def is_running(self) -> bool:
        return self.thread.isRunning()
