"""The window's side of a run: the engine runs in a process of its own
(engine/runs/run_host.py says why), and this turns what it sends into Qt signals.

One ``RunProcess`` lives for one press of Run. Inside it a *restart* (new shard size,
n_gpu_layers or model) stops the current StreamingRun and starts a fresh one with the
new settings in the same process, so the charts keep one timeline. Each StreamingRun or
ExpertRun gets a number (``run_index``) that rides along with its signals, so a late
sample of a replaced run can never be charted as the new one's.

A reader thread receives the run's messages and only emits; Qt queues the plain payload
(a MetricsSample, a RunSummary) to the window, because widgets may only be touched from
the GUI thread. New settings go through ``apply``, answered by the run's own ``apply``:
"live" or "restart", or refused (raised here, nothing changed, so the window can revert
the slider). The expert map takes ``latest_view()`` on the GUI thread: the view the run sent
last, while the next is asked for. It never waits for the run process, which may be busy,
paused or wedged; a blocking ask there froze the window up to ANSWER_S a poll.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from PySide6.QtCore import QObject, Signal

from shardscope.app.base.window_priority import at_normal_priority
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_host import RemoteObject, describe_exception

__all__ = ["RunProcess", "RunWorker", "RemoteRun", "describe_exception"]

ANSWER_S = 30.0  # a reply comes in milliseconds; this only bounds a run process that hangs


def run_host_command() -> list[str]:
    """How a run process starts (then the fd of its end of the socket pair); tests start another."""
    return [sys.executable, "-m", "shardscope.engine.runs.run_host"]


def spawn_run_host(command: list[str]) -> tuple[subprocess.Popen, Connection]:
    """A run process started with ``command`` + its end of a new socket pair, and this side's end."""
    mine, theirs = socket.socketpair()
    try:
        process = at_normal_priority(lambda: subprocess.Popen(  # not the window's lowered priority
            command + [str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL))
    finally:
        theirs.close()
    return process, Connection(mine.detach())


class RunRefused(ShardscopeError):
    """The run's refusal, in the words the run chose for the window."""


class RemoteRun:
    """A running StreamingRun or ExpertRun as the window's tests see it: every attribute is read
    from the run process when asked (``run.controller.budget_bytes``), a copy when it pickles."""

    def __init__(self, worker: "RunWorker", index: int, path: str = "", type_name: str = "") -> None:
        self._worker, self._index, self._path = worker, index, path
        self.type_name = type_name or worker.read(index, "").type_name

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        path = f"{self._path}.{name}" if self._path else name
        value = self._worker.read(self._index, path)
        return RemoteRun(self._worker, self._index, path, value.type_name) if isinstance(value, RemoteObject) \
            else value


class RunWorker(QObject):
    # run_index, plan, settings: a new run was planned; plan is the ShardPlan of a
    # StreamingRun (fills the shard map) or the MoeLayout of an ExpertRun (the expert map)
    run_started = Signal(int, object, object)
    sample = Signal(int, object)  # run_index, MetricsSample
    # Tokens wait here (take_tokens); tokens_ready tells the GUI once that some are waiting,
    # not once a token: 60-100 queued events a second woke the GUI thread (issue 32).
    tokens_ready = Signal()
    phase = Signal(int, str)
    summary = Signal(int, object)  # run_index, RunSummary (one per round)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, settings: RunSettings) -> None:
        super().__init__()
        self._tokens: list[tuple[int, int, str, float]] = []  # run_index, index in round, piece, seconds
        self._tokens_told = False
        self._lock = threading.Lock()
        self._settings = settings
        self._conn: Connection | None = None
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, list] = {}  # request id -> [event, ok, value]
        self._view_asked = 0  # the id of the view request in flight, 0 when none
        self._view = None  # the newest view the run sent and latest_view has not handed out
        self._ended = False
        self.killed = False  # the window ended the run process (it did not stop in time)
        self._current = 0  # the run process's live run, 0 when none
        self._run: RemoteRun | None = None
        self.run_index = 0

    # ------------------------------------------------------------------ GUI thread
    @property
    def settings(self) -> RunSettings:
        with self._lock:
            return self._settings

    @property
    def run(self) -> RemoteRun | None:
        """The live run, read from its process (tests); the same object while it lives."""
        with self._lock:
            index, run = self._current, self._run
        if index == 0:
            return None
        if run is None or run._index != index:
            try:
                run = RemoteRun(self, index)
            except ShardscopeError:  # it ended meanwhile
                return None
            with self._lock:
                self._run = run
        return run

    def request_stop(self) -> None:
        """Thread-safe; returns at once. The run ends after the current token."""
        self._send(("stop",))

    def pause(self, paused: bool = True) -> None:
        """Thread-safe; returns at once. The run holds at its next token boundary (its figures
        leave the held time out) until ``pause(False)``; Stop still ends it."""
        self._send(("pause", bool(paused)))

    @property
    def ended(self) -> bool:
        """The run process has sent its last message (or was never started)."""
        with self._lock:
            return self._ended or self._conn is None

    def expert_view(self):
        """The running ExpertRun's ExpertView (a copy), or None (dense run, none running)."""
        return self._ask("view", quiet=True)

    def latest_view(self):
        """The newest ExpertView the run sent since the last call (None: none came yet, a dense
        run, none running), and the next one asked for if none is in flight. Returns at once."""
        with self._lock:
            view, self._view = self._view, None
            ask = not self._view_asked and not self._ended
            if ask:
                self._view_asked = ident = next(self._ids)
        if ask and not self._send(("view", ident)):
            with self._lock:
                self._view_asked = 0
        return view

    def routing_records(self):
        """The running ExpertRun's routing so far (what engine.experts.replay takes), or None."""
        return self._ask("records", quiet=True)

    def read(self, index: int, path: str):
        """Run ``index``'s attribute at ``path``: a copy, or a RemoteObject (RemoteRun reads on)."""
        return self._ask("read", index, path)

    def apply(self, settings: RunSettings) -> str:
        """The run's answer to new settings: "live" or "restart" (then a new run starts with
        them). Raises ShardscopeError, changing nothing, when refused."""
        answer = self._ask("apply", settings)
        with self._lock:
            self._settings = settings
        return answer

    def take_tokens(self) -> list[tuple[int, int, str, float]]:
        """The tokens decoded since the last call, in order (any thread; the GUI's drain)."""
        with self._lock:
            taken, self._tokens = self._tokens, []
            self._tokens_told = False
        return taken

    # ------------------------------------------------------------------ the connection
    def attach(self, conn: Connection) -> None:
        self._conn = conn
        self._send(self._settings)

    def _send(self, message) -> bool:
        with self._send_lock:
            if self._conn is None or self._ended:
                return False
            try:
                self._conn.send(message)
            except OSError:
                return False
            return True

    def _ask(self, kind: str, *args, quiet: bool = False):
        ident = next(self._ids)
        slot = [threading.Event(), False, None]
        with self._lock:
            self._waiting[ident] = slot
        try:
            if not self._send((kind, ident, *args)):
                if quiet:
                    return None
                raise RunRefused("the run has ended")
            if not slot[0].wait(ANSWER_S) and not quiet:
                raise RunRefused(f"the run did not answer within {ANSWER_S:.0f} s")
        finally:
            with self._lock:
                self._waiting.pop(ident, None)
        if not slot[1]:
            if quiet:
                return None
            raise RunRefused(slot[2] or "the run has ended")
        return slot[2]

    def receive(self, exit_code=lambda: None) -> None:
        """The reader thread's body: every message in order, until the run process ends.
        ``exit_code()`` waits for the process: a run that ended without a word is a failure."""
        try:
            self._receive(exit_code)
        except RuntimeError:  # "Signal source has been deleted": the app is exiting without a close
            pass             # (its X server died, say); the run process ends when this side closes

    def _receive(self, exit_code) -> None:
        try:
            while True:
                try:
                    message = self._conn.recv()
                except (EOFError, OSError):
                    if not self.killed:  # else the window says why it ended it
                        self.failed.emit(f"the run's process ended unexpectedly (exit code {exit_code()})")
                    return
                except Exception as exc:  # noqa: BLE001 - a message that does not unpickle: end the run
                    self.failed.emit(f"internal error: {type(exc).__name__}: {exc} (reading the run's messages)")
                    self._send(("stop",))
                    return
                kind = message[0]
                if kind == "sample":
                    self.sample.emit(message[1], message[2])
                elif kind == "tokens":
                    with self._lock:
                        self._tokens.extend(message[1])
                        tell, self._tokens_told = not self._tokens_told, True
                    if tell:
                        self.tokens_ready.emit()
                elif kind == "reply":
                    with self._lock:
                        if message[1] == self._view_asked:  # latest_view's: kept for its next call
                            self._view_asked, self._view = 0, message[3] if message[2] else None
                            continue
                        slot = self._waiting.get(message[1])
                    if slot is not None:
                        slot[1], slot[2] = message[2], message[3]
                        slot[0].set()
                elif kind == "run":
                    with self._lock:
                        self._current = message[1]
                        if message[1]:
                            self.run_index = message[1]
                elif kind == "started":
                    self.run_started.emit(message[1], message[2], message[3])
                elif kind == "phase":
                    self.phase.emit(message[1], message[2])
                elif kind == "summary":
                    self.summary.emit(message[1], message[2])
                elif kind == "failed":
                    self.failed.emit(message[1])
                elif kind == "finished":
                    return
        finally:
            with self._lock:
                self._ended, self._current = True, 0
                for slot in self._waiting.values():
                    slot[0].set()  # no answer will come: ok stays False
            self.finished.emit()


class RunProcess:
    """A RunWorker and the process it drives: the pair the window starts on Run."""

    def __init__(self, settings: RunSettings) -> None:
        self.worker = RunWorker(settings)
        self.finished = self.worker.finished
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        self._process, conn = spawn_run_host(run_host_command())
        self.worker.attach(conn)
        self._reader = threading.Thread(target=self.worker.receive, args=(self._exit_code,), name="run-reader",
                                        daemon=True)
        self._reader.start()

    def _exit_code(self) -> int | None:
        try:
            return self._process.wait(ANSWER_S)
        except subprocess.TimeoutExpired:
            return None

    def stop_and_wait(self, timeout_ms: int) -> bool:
        self.worker.request_stop()
        return self.wait(timeout_ms)

    def wait(self, timeout_ms: int) -> bool:
        """Whether the run process ended within ``timeout_ms`` (and its messages were all read)."""
        try:
            self._process.wait(timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            return False
        self._reader.join(timeout_ms / 1000)
        return not self._reader.is_alive()

    def kill(self) -> None:
        """End a run process that did not stop (llama.cpp wedged in a call)."""
        if self._process is not None and self._process.poll() is None:
            self.worker.killed = True
            self._process.kill()
            self._process.wait()

    def isFinished(self) -> bool:  # QThread's name, kept for the window's callers
        return self._process is not None and self._process.poll() is not None

    def close(self) -> None:
        """After the process ended: the reader has sent its last signal, then the worker goes."""
        if self._reader is not None:
            self._reader.join(ANSWER_S)
        if self.worker._conn is not None:
            self.worker._conn.close()
        self.worker.deleteLater()

