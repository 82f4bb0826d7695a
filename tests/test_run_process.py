"""The window's run in a process of its own (engine/runs/run_host.py, app/runs/run_worker.py):
what it sends, what a test reads from it, and how it ends when either side goes away."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection

import psutil
import pytest

from shardscope.app.runs.run_worker import RunProcess, run_host_command, spawn_run_host
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings


def _spawn_host(settings: RunSettings) -> tuple[subprocess.Popen, Connection]:
    process, conn = spawn_run_host(run_host_command())
    conn.send(settings)
    return process, conn


def _receive_until(conn: Connection, kind: str, limit_s: float = 90.0) -> tuple:
    deadline = time.monotonic() + limit_s  # hang bound
    while time.monotonic() < deadline:
        if conn.poll(1.0):
            message = conn.recv()
            if message[0] == kind:
                return message
    raise AssertionError(f"no {kind!r} message within {limit_s:.0f} s")


def test_the_run_process_runs_in_a_process_of_its_own_and_ends_when_the_window_goes(bundled_model):
    process, conn = _spawn_host(RunSettings(model_path=bundled_model, n_gen=4, n_ctx=128))
    try:
        started = _receive_until(conn, "started")
        assert started[1] == 1 and started[3].n_gen == 4
        _receive_until(conn, "summary")  # a round has run: the model is in memory
        # the model is mapped by the run process, not by the window's
        real = os.path.realpath(bundled_model)
        assert any(m.path == real for m in psutil.Process(process.pid).memory_maps())
        assert real not in open("/proc/self/maps").read()
        conn.send(("read", 7, 1, "settings.n_gen"))
        assert _receive_until(conn, "reply")[1:] == (7, True, 4)
        conn.send(("read", 8, 2, "settings"))  # not the live run: refused in words
        reply = _receive_until(conn, "reply")
        assert reply[1:3] == (8, False) and "run 2 is not running" in reply[3]
        os.kill(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole group: the window decides
        _receive_until(conn, "summary")  # the next round
        assert process.poll() is None
    finally:
        conn.close()  # the window went away: the run stops and its process ends by itself
    assert process.wait(timeout=30) == 0  # hang bound


def test_a_run_process_that_dies_is_a_failure_in_one_line(qtbot, bundled_model):
    run = RunProcess(RunSettings(model_path=bundled_model, n_gen=64, n_ctx=128))
    failures: list[str] = []
    run.worker.failed.connect(failures.append)
    samples = []
    run.worker.sample.connect(lambda i, s: samples.append(s))
    run.start()
    try:
        qtbot.waitUntil(lambda: run.worker.run is not None and run.worker.run.session is not None and bool(samples),
                        timeout=90_000)
        remote = run.worker.run
        assert remote.type_name == "StreamingRun" and remote.settings.n_gen == 64
        assert remote.session.type_name == "LlamaSession" and remote.session.n_threads >= 1
        assert run.worker.run is remote  # the same object while that run lives
        with pytest.raises(ShardscopeError, match="out of range"):
            run.worker.apply(run.worker.settings.with_changes(threads=0))
        with qtbot.waitSignal(run.finished, timeout=30_000):
            os.kill(run.pid, signal.SIGKILL)
        assert failures == ["the run's process ended unexpectedly (exit code -9)"]
        assert run.worker.run is None and run.worker.expert_view() is None
        with pytest.raises(ShardscopeError, match="ended"):
            run.worker.apply(run.worker.settings)
    finally:
        run.kill()
        run.close()


@pytest.mark.hang_bound
def test_ctrl_c_closes_the_window_and_exits_130(tmp_path, bundled_model):
    """The app as a user starts it (offscreen here; the test's own config and cache dirs). The bundled
    model is joined into the session's cache first (bundled_model): a first start spends its first
    seconds joining it, before Qt handles Ctrl-C."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    app = subprocess.Popen([sys.executable, "-m", "shardscope.app"], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The window is up by then on a quiet machine (8 s was short on a loaded one); a Ctrl-C before
        # it is up ends the start the same way, 130 and one line (app/window/main.py).
        time.sleep(15)
        assert app.poll() is None, app.stdout.read()
        app.send_signal(signal.SIGINT)
        assert app.wait(timeout=30) == 130  # hang bound
        assert "Traceback" not in app.stdout.read()
    finally:
        app.kill()


def test_tokens_come_in_batches_in_order_each_round_whole_before_its_summary(bundled_model):
    """Tokens travel in batches (TOKEN_BATCH_S), not a message each; a batch never holds a token back
    past the next other message, so each round's n_gen tokens are all there, in order, before its
    summary, and the last round's before "finished"."""
    process, conn = _spawn_host(RunSettings(model_path=bundled_model, n_gen=12, n_ctx=128))
    try:
        rounds: list[list[int]] = []
        seen: list[int] = []
        deadline = time.monotonic() + 120  # hang bound
        while len(rounds) < 2 and time.monotonic() < deadline:
            if not conn.poll(1.0):
                continue
            message = conn.recv()
            assert message[0] != "token"  # one message a token was the old protocol
            if message[0] == "tokens":
                assert all(index == 1 for index, *_ in message[1])
                seen += [n for _, n, _, _ in message[1]]
            elif message[0] == "summary":
                assert message[2].n_gen == 12
                rounds.append(seen)
                seen = []
        assert rounds == [list(range(12))] * 2
    finally:
        conn.close()
    assert process.wait(timeout=30) == 0  # hang bound
