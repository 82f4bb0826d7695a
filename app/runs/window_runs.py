"""The window's runs, without widgets: the run process, which run is current,
the window time axis, the timeline, the round summaries and the search lock.

The window and its panels only draw what this object announces, so everything about
runs (late samples of a replaced run, the time offset after a restart, refusing Run
while a sweep holds the engine) is testable without a window.

Time is *window* time: every StreamingRun's sampler starts at 0, so each new run (a
restart after a shard-size change, or the next press of Run) is placed right after
the previous one. The exported timeline uses the same axis.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from shardscope.app.runs.run_worker import RunProcess, RunWorker
from shardscope.app.runs.sample_history import SampleHistory
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.stream.streaming_run import RunSummary
from shardscope.widgets.coalesced_calls import CoalescedCalls

CLOSE_WAIT_MS = 15_000  # a run stops within ~1-2 s; this only bounds a wedged llama.cpp load (then killed)
TIMELINE_MAX = 36_000  # one hour at 10 Hz: export what the session saw, bounded
TOKEN_MS = 150  # tokens are taken from the worker a few times a second, not one event each


class WindowRuns(QObject):
    run_started = Signal(object, object, bool)  # ShardPlan or MoeLayout, settings, a new press of Run on a used axis
    sample = Signal(float, object)  # window time (s), MetricsSample
    token = Signal(int, str)  # token index in its round, piece
    phase = Signal(str)
    summary = Signal(object, bool)  # RunSummary, whether it is now the last complete round
    failed = Signal(str)
    run_finished = Signal()  # the run process ended (stopped, failed or wedged and killed)
    state_changed = Signal()  # running or search lock changed: actions need a redraw

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.summaries: list[RunSummary] = []
        self._complete = 0  # of them, rounds not cut short (the status bar names it at every phase)
        self.timeline = SampleHistory(TIMELINE_MAX)  # (time offset, sample) pairs, kept as numbers
        self.last_sample: MetricsSample | None = None
        self.last_round: RunSummary | None = None  # the last complete round
        self.last_t = 0.0
        self.failed_now = False  # the current press of Run ended in an error
        self._run: RunProcess | None = None
        self._run_index = 0
        self._t_offset = 0.0
        self._search_owner: str | None = None
        self._tokens_waiting = CoalescedCalls(TOKEN_MS, self._take_tokens, keep="last", parent=self)

    # ------------------------------------------------------------------ state
    @property
    def worker(self) -> RunWorker | None:
        return self._run.worker if self._run is not None else None

    @property
    def run_process(self) -> RunProcess | None:
        return self._run

    def is_running(self) -> bool:
        return self._run is not None

    def complete_rounds(self) -> int:
        return self._complete

    # ------------------------------------------------------------------ control
    def start(self, settings: RunSettings) -> str | None:
        """Start a run process with ``settings``; a refusal's text, or None."""
        if self._run is not None:
            return "a run is already going"
        if self._search_owner is not None:
            return (f"{self._search_owner} is running: Run is disabled until it ends "
                    "(cancel it in its dialog)")
        run = RunProcess(settings)
        w = run.worker
        # Bound methods of this QObject: Qt queues them to the GUI thread.
        w.run_started.connect(self._on_run_started)
        w.sample.connect(self._on_sample)
        w.tokens_ready.connect(self._on_tokens_ready)
        w.phase.connect(self._on_phase)
        w.summary.connect(self._on_summary)
        w.failed.connect(self._on_failed)
        run.finished.connect(self._on_run_ended)
        self._run = run
        self._run_index = 0  # the new worker numbers its StreamingRuns from 1
        self.failed_now = False
        self.state_changed.emit()
        run.start()
        return None

    def stop(self) -> None:
        """Returns at once; the run ends after the current token (run_finished)."""
        if self._run is not None:
            self._run.worker.request_stop()

    def apply(self, settings: RunSettings) -> str | None:
        """A running run's answer ("live" or "restart"); None when nothing runs.
        Raises ShardscopeError, changing nothing, when the engine refuses."""
        return self._run.worker.apply(settings) if self._run is not None else None

    def close(self, wait_ms: int = CLOSE_WAIT_MS) -> None:
        """Stop and wait (closing the window): the run process must not outlive the window."""
        if self._run is not None:
            self._run.stop_and_wait(wait_ms)
            self._on_run_ended()

    # ------------------------------------------------------------------ searches
    def search_owner(self) -> str | None:
        """What holds the engine now ("the sweep"), or None: Run is refused meanwhile."""
        return self._search_owner

    def begin_search(self, what: str) -> None:
        self._search_owner = what
        self.state_changed.emit()

    def end_search(self, what: str) -> None:
        if self._search_owner == what:
            self._search_owner = None
            self.state_changed.emit()

    def stop_run(self) -> None:  # SearchHost's name for stop()
        self.stop()

    # ------------------------------------------------------------------ from the worker
    def _on_run_started(self, index: int, streamed, settings: RunSettings) -> None:
        used = bool(self.timeline)
        if used:
            self._t_offset = self.last_t + 0.1  # the new sampler starts at 0: continue the axis
        self._run_index = index
        self.run_started.emit(streamed, settings, used and index == 1)

    def _on_sample(self, index: int, s: MetricsSample) -> None:
        if index != self._run_index:
            return  # a late sample of a replaced run
        t = s.t_s + self._t_offset
        self.last_t, self.last_sample = t, s
        self.timeline.append((self._t_offset, s))
        self.sample.emit(t, s)

    def _on_tokens_ready(self) -> None:
        self._tokens_waiting.push(True)

    def _take_tokens(self, _waiting=None) -> None:
        """Every token the worker holds, forwarded in order (at most TOKEN_MS after the first)."""
        if self._run is not None:
            for index, n, piece, dt in self._run.worker.take_tokens():
                self._on_token(index, n, piece, dt)

    def _on_token(self, index: int, n: int, piece: str, _dt: float) -> None:
        if index == self._run_index:
            self.token.emit(n, piece)

    def _on_phase(self, index: int, name: str) -> None:
        if index == self._run_index and self._run is not None and not self.failed_now:
            self.phase.emit(name)

    def _on_summary(self, _index: int, summary: RunSummary) -> None:
        """Every round is kept (the CSV); the last *complete* one is what panels quote,
        because a round cut short by Stop or a restart has too few tokens (avg 0 tok/s)."""
        self.summaries.append(summary)
        self._complete += not summary.stopped
        shown = not (summary.stopped and self.last_round is not None)
        if shown:
            self.last_round = summary
        self.summary.emit(summary, shown)

    def _on_failed(self, message: str) -> None:
        self.failed_now = True
        self.failed.emit(message)

    def _on_run_ended(self) -> None:
        self._take_tokens()  # the last ones, before the run is let go
        self._tokens_waiting.clear()
        run, self._run = self._run, None
        if run is None:
            return
        if not run.wait(CLOSE_WAIT_MS):
            # llama.cpp wedged in a call that cannot be interrupted: its process is ended
            run.kill()
            self._on_failed(f"the run did not stop within {CLOSE_WAIT_MS // 1000} s (llama.cpp busy); "
                            "its process was ended")
        run.close()
        self.state_changed.emit()
        self.run_finished.emit()
