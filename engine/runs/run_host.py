"""The window's run in a process of its own, driven over one connection.

Why a process (issue 32): in the window's process the decode thread needs the GIL ~300
times a token (llama.cpp's eval callback asks about every graph node) and holds it ~37 %
of the time for the expert bookkeeping; every stretch of Python the GUI thread runs
(a paint, a table, a collection) stalls the token it measures. Shown, the window's own
run went at 0.81-0.93 of a headless one in the same minutes, hidden at 0.89-0.92; the same
CPU spent in another process cost 3.6 % (docs/decisions.md, issue 32). Here the run has
the GIL of its own process, as the CLI's ``bench`` has, and the window only draws.

``RunLoop`` is what the window's Run does, with plain callbacks: open a run (``open_run``
decides which kind), take live knob changes, start a new run after a change that needs a
new plan (a *restart*, on the same timeline), until stopped or failed. ``main`` runs one
``RunLoop`` in this process for the window: the window sends commands, this side sends
what happens, both as pickled tuples (multiprocessing's Connection on a socket pair)::

    window -> run   ("apply", id, settings)  ("view", id)  ("records", id)
                    ("read", id, run_index, "attr.path")  ("stop",)  ("pause", bool)
    run -> window   ("started", index, plan_or_moe, settings)  ("run", index or 0)
                    ("sample", index, MetricsSample)  ("tokens", [(index, n, piece, dt), ...])
                    ("phase", index, name)  ("summary", index, RunSummary)
                    ("reply", id, ok, value)  ("failed", text)  ("finished",)

``read`` returns a running run's attribute by its dotted path (``controller.budget_bytes``):
a copy when it pickles, else ("object", type name) so the caller can read further. It is
how the window's tests see the engine's own state, from the process that holds it.
"""

from __future__ import annotations

import pickle
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.knobs.knobs import LIVE, changed
from shardscope.engine.knobs.settings import RunSettings, validate

# Tokens go to the window in batches at most this far apart, not a message each: at 60 tok/s a
# message a token woke the window's reader thread 60 times a second, each wake a preemption of a
# decode thread on a 2-core machine. The window takes tokens 6-7 times a second (TOKEN_MS), so
# 0.1 s adds nothing a user sees. Any other message sends the batch first: order is kept.
TOKEN_BATCH_S = 0.1

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


class RemoteObject:
    """What ``read`` answers for an attribute that does not pickle (a lock holder, a session)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


class RunLoop:
    """Runs (and re-runs after restarts) until stopped; ``work`` raises what ended it.

    Callbacks: ``started(index, plan_or_moe, settings)``, ``current(index or 0)`` (a run is
    live / none is), ``sample(index, s)``, ``token(index, n, piece, dt)``, ``phase(index, name)``,
    ``summary(index, s)``. Each StreamingRun or ExpertRun gets a number (``run_index``) that
    rides along, so a late sample of a replaced run is never charted as the new one's.
    """

    def __init__(self, settings: RunSettings, *, started: Callable, current: Callable, sample: Callable,
                 token: Callable, phase: Callable, summary: Callable) -> None:
        self._lock = threading.Lock()
        self._settings = settings
        self._stop_requested = False
        self._restart_requested = False
        self._paused = False  # held at a token boundary (the window's replay has no core): restarts too
        self._started, self._current, self._sample = started, current, sample
        self._token, self._phase, self._summary = token, phase, summary
        self.run = None  # the live StreamingRun or ExpertRun
        self.run_index = 0

    @property
    def settings(self) -> RunSettings:
        with self._lock:
            return self._settings

    def request_stop(self) -> None:
        """Thread-safe; returns at once. ``work`` ends after the current token."""
        with self._lock:
            self._stop_requested = True
            run = self.run
        if run is not None:
            run.stop()

    def pause(self, paused: bool) -> None:
        """Thread-safe; returns at once. The live run, and any a restart opens, holds at its next
        token boundary until ``pause(False)``; Stop still ends it."""
        with self._lock:
            self._paused = paused
            if self.run is not None:
                self.run.pause(paused)

    def expert_view(self):
        """The running ExpertRun's ExpertView (a copy), or None (dense run, none running)."""
        with self._lock:
            view = getattr(self.run, "expert_view", None)
            return view() if view is not None else None

    def routing_records(self):
        """The running ExpertRun's routing so far (what engine.experts.replay takes), or None."""
        with self._lock:
            records = getattr(self.run, "routing_records", None)
            return records() if records is not None else None

    def read(self, index: int, path: str):
        """Run ``index``'s attribute at ``path`` (a copy, or a RemoteObject); LookupError if that
        run is no longer the live one."""
        with self._lock:
            if self.run is None or index != self.run_index:
                raise LookupError(f"run {index} is not running")
            if not path:
                return RemoteObject(type(self.run).__name__)
            value = self.run
            for name in path.split("."):
                value = getattr(value, name)
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - a lock, a thread, a ctypes pointer inside: read further
                return RemoteObject(type(value).__name__)
            return value

    def apply(self, settings: RunSettings) -> str:
        """The run's answer to new settings: "live" or "restart" (then a new run starts with
        them). Raises ShardscopeError, changing nothing, when refused."""
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

    def work(self) -> None:
        from shardscope.engine.runs.run_factory import open_run

        while True:
            with self._lock:
                if self._stop_requested:
                    return
                settings = self._settings
                self._restart_requested = False
            self.run_index += 1
            index = self.run_index
            run = open_run(settings, on_sample=lambda s, i=index: self._sample(i, s))
            run.keep_samples(RUN_SAMPLES)  # the window keeps each sample itself, as numbers
            run.on_token = lambda n, piece, dt, i=index: self._token(i, n, piece, dt)
            run.on_phase = lambda name, i=index: self._phase(i, name)
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
                run.pause(self._paused)
                self._current(index)
            try:
                self._started(index, getattr(run, "plan", None) or run.moe, run.settings)
                run.run(continuous=True, on_summary=lambda s, i=index: self._summary(i, s))
            except Exception:
                if not run.stopping:
                    raise
                # Stop pressed mid-layer can surface as "run stopped": not a failure.
            finally:
                with self._lock:
                    self.run = None
                    self._current(0)
                run.close()
            with self._lock:
                if self._stop_requested or not self._restart_requested:
                    return


class _Host:
    """This process's side: the commands thread answers the window while ``RunLoop.work`` runs."""

    def __init__(self, conn: Connection, settings: RunSettings) -> None:
        self.conn = conn
        self._send_lock = threading.Lock()
        self._gone = False  # the window's side closed: nothing more to send
        self._tokens: list[tuple] = []  # decoded, not sent yet (TOKEN_BATCH_S)
        self._tokens_sent = time.monotonic()
        self.loop = RunLoop(
            settings,
            started=lambda i, streamed, s: self.send(("started", i, streamed, s)),
            current=lambda i: self.send(("run", i)),
            sample=lambda i, s: self.send(("sample", i, s)),
            token=self.token,
            phase=lambda i, name: self.send(("phase", i, name)),
            summary=lambda i, s: self.send(("summary", i, s)))

    def token(self, index: int, n: int, piece: bytes, dt: float) -> None:
        with self._send_lock:
            self._tokens.append((index, n, piece, dt))
            if time.monotonic() - self._tokens_sent >= TOKEN_BATCH_S:
                self._send(None)

    def send(self, message: tuple) -> None:
        with self._send_lock:
            self._send(message)

    def _send(self, message: tuple | None) -> None:
        """The tokens waiting, then ``message`` (None: the tokens alone); under the send lock."""
        if self._gone:
            return
        try:
            if self._tokens:
                self.conn.send(("tokens", self._tokens))
                self._tokens = []
            self._tokens_sent = time.monotonic()
            if message is not None:
                self.conn.send(message)
        except OSError:  # the window went away: stop, there is no one to tell
            self._gone = True
            self.loop.request_stop()

    def commands(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):  # the window closed or died: end the run
                self._gone = True
                self.loop.request_stop()
                return
            kind = message[0]
            if kind == "stop":
                self.loop.request_stop()
                continue
            if kind == "pause":
                self.loop.pause(message[1])
                continue
            ident = message[1]
            try:
                if kind == "apply":
                    value = self.loop.apply(message[2])
                elif kind == "view":
                    value = self.loop.expert_view()
                elif kind == "records":
                    value = self.loop.routing_records()
                elif kind == "read":
                    value = self.loop.read(message[2], message[3])
                else:
                    raise ValueError(f"unknown command {kind!r}")
            except Exception as exc:  # noqa: BLE001 - the answer is the refusal's words
                self.send(("reply", ident, False, describe_exception(exc, self.loop.settings.model_path)))
            else:
                self.send(("reply", ident, True, value))

    def serve(self) -> None:
        threading.Thread(target=self.commands, name="run-commands", daemon=True).start()
        try:
            self.loop.work()
        except Exception as exc:  # noqa: BLE001 - told to the window in one line
            self.send(("failed", describe_exception(exc, self.loop.settings.model_path)))
        self.send(("finished",))


def main(argv: list[str] | None = None) -> int:
    """``python -m shardscope.engine.runs.run_host FD``: FD is this side of the window's socket pair;
    the first message is the run's settings."""
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C in the terminal reaches the whole process group: the window stops this run.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    try:
        settings = conn.recv()
    except (EOFError, OSError):
        return 0
    _Host(conn, settings).serve()
    conn.close()
    return 0


if __name__ == "__main__":
    # Through the module's own name, so what it pickles (RemoteObject) unpickles on the other side.
    from shardscope.engine.runs.run_host import main as run_host_main

    sys.exit(run_host_main())
