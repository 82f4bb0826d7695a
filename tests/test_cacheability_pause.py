"""Issue 48, item 8: where the run's threads leave no core for the cacheability replay, the panel
holds the live run at a token boundary while it replays and says so; the run goes on when the
replay ends, and the held time is in none of its figures. With a core free, it replays beside.

Tokens are counted from the run's own clock (read from its process) and from llama.cpp's own
eval counter, not from the pause flag.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest

from shardscope.app.experts import cacheability_curve as cc
from shardscope.app.experts import expert_panel as panel_module
from shardscope.engine.knobs.settings import RunSettings
from tests.conftest import make_window, run_ready, wait_for

BUDGET_MB = 60  # under the model's size: its experts stream, so the run routes (an ExpertRun)
PROMPT = "The history of the printing press begins"


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("pause-moe") / "moe-120.gguf"
    write_synthetic_model(path, 120, moe=MoeSpec(16, 2, routing_skew=2.0), seed=3)
    return str(path)


def test_the_run_pauses_only_where_its_threads_leave_no_core() -> None:
    assert cc.pause_for_replay(2, 2)  # this VM at the default threads: no core for the replay
    assert cc.pause_for_replay(1, 1) and cc.pause_for_replay(4, 4) and cc.pause_for_replay(2, 8)
    assert not cc.pause_for_replay(2, 1)  # one core each
    assert not cc.pause_for_replay(3, 2) and not cc.pause_for_replay(16, 4)
    assert cc.pause_for_replay(1, 0)  # threads below 1 count as one
    assert 1 <= cc.usable_cores() <= (os.cpu_count() or 1)


def _wait(condition, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s  # hang bound
    while not condition():
        assert time.monotonic() < deadline, "condition not met within the hang bound"
        time.sleep(0.02)


def test_a_paused_run_decodes_nothing_leaves_the_pause_out_and_stops_at_once(moe_model) -> None:
    import llama_cpp

    from shardscope.engine.devices.run_projection import round_stall
    from shardscope.engine.runs.run_factory import open_run

    settings = RunSettings(model_path=moe_model, budget_mb=BUDGET_MB, n_gen=16, n_ctx=128, prompt=PROMPT)
    summaries: list = []
    with open_run(settings) as run:
        thread = threading.Thread(target=lambda: run.run(continuous=True, on_summary=summaries.append))
        thread.start()
        try:
            _wait(lambda: len(summaries) >= 1 and run.clock.n_tokens >= len(summaries) * 15 + 3)
            run.pause(True)
            _wait(lambda: run.clock.phase == "paused")  # the next token boundary
            k, n = len(summaries), run.clock.n_tokens
            n_eval = llama_cpp.llama_perf_context(run.session._ctx).n_eval  # llama.cpp's own count this round
            held_s = 1.5
            time.sleep(held_s)
            assert run.clock.n_tokens == n
            assert llama_cpp.llama_perf_context(run.session._ctx).n_eval == n_eval
            run.pause(False)
            _wait(lambda: len(summaries) > k)
            assert run.clock.n_tokens > n
            held = summaries[k]  # the round the pause fell in
            assert held.n_gen == 16 and held.avg_ts > 0
            # the held 1.5 s lie between its first token and its last, in no token's time: left out
            assert held.between_tokens_s < held_s / 2, held.between_tokens_s
            assert "paused" not in round_stall(held)

            run.pause(True)  # Stop ends a paused run: the hold looks at Stop too
            _wait(lambda: run.clock.phase == "paused")
            run.stop()
            thread.join(30)  # hang bound
            assert not thread.is_alive()
        finally:
            run.pause(False)
            run.stop()
            thread.join(30)


class HeldReplay:
    """The window's replay held open until ``release()``, then the real one: the test decides
    when the replay ends, so "during the replay" is as long as it needs."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.entered = threading.Event()

    def __call__(self, records, at_mb=(), progress=None):
        self.entered.set()
        while not self.released.wait(0.1):
            if progress is not None:
                progress(0.0)  # raises Cancelled on Cancel, as the real one's poll does
        return cc.compute_in_process(records, at_mb=at_mb, progress=progress)

    def release(self) -> None:
        self.released.set()


def _tokens(window) -> int:
    """The run's own token count, read from the run process."""
    return window.worker.run.clock.n_tokens


@contextlib.contextmanager
def _replaying(qtbot, tmp_path, moe_model, monkeypatch, cores):
    """A window whose MoE run is decoding when the panel starts a held replay with ``cores(threads)`` cores."""
    replay = HeldReplay()
    monkeypatch.setattr(panel_module, "compute_in_process", replay)
    window = make_window(qtbot, tmp_path / "config")
    try:
        window.open_model(moe_model)
        qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == moe_model,
                        timeout=20_000)
        window.apply_settings(RunSettings(budget_mb=BUDGET_MB, n_gen=12, n_ctx=128, prompt=PROMPT))
        window.start_run()
        wait_for(qtbot, window, lambda: run_ready(window, lambda run: run.type_name == "ExpertRun"
                                                  and run.clock.n_tokens >= 12), timeout=90_000)
        panel = window.expert_panel
        threads = window.worker.settings.threads
        panel.cores = lambda: cores(threads)  # the decision forced either way
        panel.compute_from_session()
        yield window, panel, replay
    finally:
        replay.release()
        window.close()


@pytest.mark.parametrize("free_core", [False, True], ids=["no-free-core", "free-core"])
def test_the_panel_holds_the_run_while_it_replays_only_without_a_free_core(qtbot, tmp_path, moe_model,
                                                                             monkeypatch, free_core) -> None:
    with _replaying(qtbot, tmp_path, moe_model, monkeypatch,
                    lambda threads: threads + (1 if free_core else 0)) as (window, panel, replay):
        qtbot.waitUntil(replay.entered.is_set, timeout=30_000)
        if free_core:
            n = _tokens(window)
            wait_for(qtbot, window, lambda: _tokens(window) >= n + 5, timeout=60_000)  # it decodes beside
            assert not panel.run_paused and not panel.pause_note.isVisible()
        else:
            assert panel.pause_note.isVisible() and "no free core" in panel.pause_note.text()
            wait_for(qtbot, window, lambda: window.worker.run.clock.phase == "paused", timeout=30_000)
            n = _tokens(window)
            qtbot.wait(1500)  # dozens of this model's tokens
            assert _tokens(window) == n
            assert panel.pause_note.isVisible()
        with qtbot.waitSignal(panel.computed, timeout=120_000):
            replay.release()
        assert not panel.pause_note.isVisible() and not panel.run_paused
        n = _tokens(window)
        wait_for(qtbot, window, lambda: _tokens(window) >= n + 5, timeout=60_000)  # going on


@pytest.mark.parametrize("how", ["stop", "close"], ids=["Stop", "close-as-Ctrl-C-does"])
def test_stop_and_closing_end_a_run_held_for_the_replay(qtbot, tmp_path, moe_model, monkeypatch, how) -> None:
    """Ctrl-C closes the window as its close button does (app/window/main.py): closing stops the run."""
    with _replaying(qtbot, tmp_path, moe_model, monkeypatch, lambda threads: 1) as (window, panel, replay):
        wait_for(qtbot, window, lambda: window.worker.run.clock.phase == "paused", timeout=30_000)
        process = window.runs.run_process
        if how == "stop":
            window.stop_run()
            qtbot.waitUntil(lambda: not window.is_running(), timeout=10_000)  # hang bound, as stop_and_wait's
            qtbot.waitUntil(lambda: not panel.pause_note.isVisible(), timeout=10_000)  # the note goes with the run
            panel.cancel_replay()
            qtbot.waitUntil(lambda: not panel.task.isRunning(), timeout=15_000)
        else:
            window.close()
        assert process.isFinished() or process.wait(10_000)
        assert not process.worker.killed  # it stopped by itself, not killed for hanging
