"""The window with a real MoE model streaming its experts: the expert map draws what the engine
holds, the expert knobs reach the running engine and a saved profile, and the cacheability
curve's points are what ``shardscope replay`` prints for the same trace.

The model is a small synthetic MoE (~120 MB, 16 experts, top-2, skewed router) run at half
its size, so experts really stream; every figure is compared with the engine's own view
or with the CLI run in another process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PySide6.QtCore import QPointF

from shardscope.app.experts.cacheability_curve import cache_sizes
from shardscope.engine.knobs.settings import RunSettings
from shardscope.widgets.expert_map import PICKED_COLOR
from shardscope.widgets.shard_map import STATE_COLORS
from tests.conftest import make_window, run_ready, stop_and_wait, wait_drawn, wait_for

MIB = 1024 * 1024
BUDGET_MB = 60  # dense 4 MB + 56 MB of experts: half of the model's 115 MB of experts
PROMPT = "The history of the printing press begins"


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-window") / "moe-120.gguf"
    write_synthetic_model(path, 120, moe=MoeSpec(16, 2, routing_skew=2.0), seed=3)
    assert os.path.getsize(path) <= 150 * MIB
    return str(path)


@pytest.fixture(scope="module")
def trace_file(moe_model, tmp_path_factory) -> str:
    """A routing trace written by a headless ExpertRun (what ``bench --trace`` writes)."""
    from shardscope.engine.experts.expert_run import ExpertRun

    path = tmp_path_factory.mktemp("trace") / "routing.jsonl"
    settings = RunSettings(model_path=moe_model, budget_mb=BUDGET_MB, n_gen=16, n_ctx=128, prompt=PROMPT)
    with ExpertRun(settings, trace_path=str(path)) as run:
        run.run()
    return str(path)


def _start_moe_run(qtbot, window, moe_model, **settings) -> None:
    window.open_model(moe_model)
    qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == moe_model, timeout=20_000)
    window.apply_settings(RunSettings(budget_mb=BUDGET_MB, n_gen=12, n_ctx=128, prompt=PROMPT, **settings))
    window.start_run()
    wait_for(qtbot, window, lambda: engine_ready_moe(window) and window.last_sample is not None
             and window.last_sample.phase == "generating", timeout=90_000)


def engine_ready_moe(window) -> bool:
    return run_ready(window, lambda run: getattr(run, "streamer", None) is not None)


def _expected_rgb(states: np.ndarray, picked: np.ndarray, layer: int, expert: int) -> tuple[int, int, int]:
    from PySide6.QtGui import QColor

    c = QColor(PICKED_COLOR if picked[layer, expert] else STATE_COLORS[int(states[layer, expert])])
    return c.red(), c.green(), c.blue()


def test_cache_sizes_span_one_layer_to_every_expert_in_whole_mib():
    sizes = cache_sizes(int(28.7 * MIB), int(114.75 * MIB), 8)
    assert sizes[0] == 29 and sizes[-1] == 115 and sizes == sorted(set(sizes)) and len(sizes) == 8
    assert all(s == int(s) for s in sizes)
    assert cache_sizes(5 * MIB, 5 * MIB) == [5.0]


def test_bool_knobs_are_check_boxes_that_speak_only_for_users(qtbot):
    from shardscope.app.profiles.settings_binding import CHECKS, SettingsPanel, describe_change

    assert [k.name for k in CHECKS] == ["expert_speculation"]
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    edits = []
    panel.edited.connect(lambda *e: edits.append(e))
    panel.set_value("expert_speculation", True)  # code (a profile): quiet
    assert panel.checks["expert_speculation"].isChecked() and edits == []
    panel.checks["expert_speculation"].click()  # a user: one edit
    assert edits == [("expert_speculation", True, False)] and panel.value("expert_speculation") is False
    assert panel.apply_to(RunSettings(expert_speculation=True)).expert_speculation is False
    assert describe_change("expert_speculation", False, True) == "speculation off\u2192on"


def test_expert_map_draws_the_engines_states(qtbot, tmp_path, moe_model):
    window = make_window(qtbot, tmp_path / "config")
    panel = window.expert_panel
    seen = []
    source = panel.view_source
    panel.view_source = lambda: seen.append(source()) or seen[-1]  # keep what the map was given
    try:
        _start_moe_run(qtbot, window, moe_model)
        assert panel.isVisible() and not window.run_view.plan  # no shard plan: experts stream
        assert window.chart.plot_item("per_token") in window.chart.ci.items  # the MoE row is in
        run = window.worker.run
        assert run.type_name == "ExpertRun" and run.moe.n_expert == 16
        # Streaming shows: some experts resident, some evicted, in the map drawn from the view.
        wait_for(qtbot, window, lambda: seen and seen[-1] is not None and {0, 2} <= set(np.unique(seen[-1].states))
                 and panel.map.states().shape == (len(run.moe.layers), 16), timeout=30_000)
        view = seen[-1]
        assert np.array_equal(panel.map.states(), view.states)
        n_layers, n_expert = view.states.shape
        for layer in range(n_layers):
            for expert in range(n_expert):
                assert panel.map.cell_rgb(layer, expert) == _expected_rgb(view.states, view.picked, layer, expert)
        # The engine's own view agrees with its cache: resident cells are the units it holds.
        live = window.worker.expert_view()
        assert live.states.shape == (n_layers, n_expert) and live.window > 0
        # Heat: the most-picked expert is the darkest cell.
        panel.view_combo.setCurrentText("heat")
        wait_for(qtbot, window, lambda: seen[-1] is not None and seen[-1].heat.sum() > 0, timeout=30_000)
        heat = seen[-1].heat  # drawn by the poll that took it, in the heat view
        hot = np.unravel_index(int(np.argmax(heat)), heat.shape)
        assert panel.map.cell_rgb(*hot) == (140, 20, 20)
        # Expert charts: the samples carry expert figures and the curves draw them.
        wait_for(qtbot, window, lambda: np.isfinite(window.chart.curve_data("expert_hit")[1]).any(), timeout=30_000)
        wait_drawn(qtbot, window.chart, ("expert_hit",))  # and its plot item holds them after a redraw
        s = window.last_sample
        assert np.isfinite(s.expert_hit_rate) and 0 <= s.expert_hit_rate <= 1
        # The session's routing replayed, projected on the chosen device at each cache size:
        # more hits, fewer bytes from the disk, never a slower projection.
        wait_for(qtbot, window, lambda: window.last_round is not None, timeout=60_000)
        window.flush_display()  # the round's panels (and the curve's projection inputs) show on a timer
        assert window.device_id()
        with qtbot.waitSignal(panel.computed, timeout=60_000):
            panel.compute_button.click()
        lru = panel.plot.curves()["lru"]
        projected = panel.plot.projected()
        assert [x for x, _ in projected] == [x for x, y in lru if np.isfinite(y)]
        pairs = sorted((y, p) for (_, y), (_, p) in zip(lru, projected))
        assert all(b[1] >= a[1] - 1e-9 for a, b in zip(pairs, pairs[1:]))
        stop_and_wait(qtbot, window)
        assert window.last_error is None, window.last_error
    finally:
        window.close()


@pytest.mark.hang_bound
def test_the_map_never_waits_for_the_run(qtbot, tmp_path, moe_model):
    """A run process that does not answer (paused here; busy or wedged for a user) never holds the
    GUI thread: the map's poll returns at once and draws nothing new, and draws again once the run
    answers. (The map asked synchronously before: up to 30 s a poll of a frozen window.)"""
    window = make_window(qtbot, tmp_path / "config")
    panel = window.expert_panel
    try:
        _start_moe_run(qtbot, window, moe_model)
        wait_for(qtbot, window, lambda: panel.polls > 0, timeout=30_000)
        pid = window.run_process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            qtbot.wait(500)  # an answer on its way when the run stopped came meanwhile
            polls = panel.polls
            started = time.perf_counter()
            for _ in range(5):
                panel.poll()
            assert time.perf_counter() - started < 10.0  # ANSWER_S (30 s) a poll before
            assert panel.polls <= polls + 1  # at most that answer, if no timed poll took it yet
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # it had ended (and was reaped meanwhile): say why, not this
                pytest.fail(f"the run process ended while the test held it: {window.last_error}")
        wait_for(qtbot, window, lambda: panel.polls > polls, timeout=30_000)
    finally:
        stop_and_wait(qtbot, window)
        window.close()


def test_expert_knobs_reach_the_running_engine_and_a_saved_profile(qtbot, tmp_path, moe_model):
    window = make_window(qtbot, tmp_path / "config")
    try:
        _start_moe_run(qtbot, window, moe_model)
        run = window.worker.run
        markers = window.chart.marker_count()
        # Expert policy: a user's pick in the combo; taken live at the next token.
        combo = window.controls.combos["expert_policy"]
        combo.setCurrentText("lfu")
        combo.activated.emit(combo.currentIndex())
        qtbot.waitUntil(lambda: run.streamer.cache.policy == "lfu", timeout=30_000)
        # Speculation: the check box, as a user ticks it.
        box = window.controls.checks["expert_speculation"]
        box.click()  # what a user's click does: toggles and emits clicked
        assert box.isChecked()
        qtbot.waitUntil(lambda: run.streamer.speculation is True, timeout=30_000)
        # Expert cache: a click on the cacheability curve (the panel's signal) sets the knob.
        window.choose_expert_cache(43.0)
        assert window.controls.value("expert_cache_mb") == 43
        qtbot.waitUntil(lambda: run.cache_bytes == 43 * MIB, timeout=30_000)
        assert window.worker.run is run  # all three were live: no restart
        assert window.chart.marker_count() == markers + 3
        assert window.last_error is None, window.last_error

        saved = window.save_profile_as("MoE rig")
        assert saved is not None
        text = saved.path.read_text()
        assert "expert_cache_mb = 43" in text and 'expert_policy = "lfu"' in text
        assert "expert_speculation = true" in text
        stop_and_wait(qtbot, window)

        window.load_profile("Streaming demo")
        assert window.controls.value("expert_policy") == RunSettings().expert_policy  # the knob default
        window.load_profile("MoE rig")
        assert {k: window.controls.value(k) for k in ("expert_cache_mb", "expert_policy", "expert_speculation")} \
            == {"expert_cache_mb": 43, "expert_policy": "lfu", "expert_speculation": True}
        assert window.controls.checks["expert_speculation"].isChecked()
    finally:
        window.close()


def _cli_replay(trace: str, sizes: list[float]) -> dict[str, dict[float, float]]:
    """``shardscope replay`` in another process: {policy: {cache MB: hit rate %}}."""
    out = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "replay", trace,
                          "--cache-mb", ",".join(f"{s:g}" for s in sizes)],  # every policy and the optimum
                         capture_output=True, text=True, check=True, env={**os.environ}).stdout
    table: dict[str, dict[float, float]] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[\d.]+ %", cells[3]):
            table.setdefault(cells[1], {})[float(cells[2])] = float(cells[3].split()[0])
    return table


def test_cacheability_points_equal_shardscope_replay(qtbot, tmp_path, trace_file):
    window = make_window(qtbot, tmp_path / "config")
    try:
        panel = window.expert_panel
        assert not panel.isVisible()  # the bundled model is dense: no expert column, no MoE row
        assert window.chart.plot_item("per_token") not in window.chart.ci.items
        with qtbot.waitSignal(panel.computed, timeout=60_000):
            window.open_trace(trace_file)
        curves = panel.plot.curves()
        from shardscope.engine.experts.replay import REPLAY_POLICIES

        assert set(curves) == set(REPLAY_POLICIES) >= {"decay", "lru", "lfu", "hot", "optimal"}
        sizes = sorted({x for pts in curves.values() for x, _ in pts})
        assert len(sizes) >= 4
        cli = _cli_replay(trace_file, sizes)
        for policy, pts in curves.items():
            assert [x for x, _ in pts] == sizes
            for size, hit in pts:
                assert round(100 * hit, 1) == pytest.approx(cli[policy][size], abs=1e-9), (policy, size)
        # More cache never hurts LRU much, and every expert cached is a hit after the prompt.
        assert curves["lru"][-1][1] >= curves["lru"][0][1]
        # A click on the plot near a size applies that size to the expert cache knob.
        target = sizes[len(sizes) // 2]
        plot = panel.plot
        qtbot.waitUntil(lambda: plot.item.vb.viewRange()[0][1] > sizes[-1], timeout=10_000)  # auto-ranged
        scene_pos = plot.item.vb.mapViewToScene(QPointF(target + 0.3, 50.0))  # near the point, not on it

        class Click:  # what pyqtgraph's scene hands sigMouseClicked: a scene position
            def scenePos(self):
                return scene_pos

        with qtbot.waitSignal(plot.size_chosen, timeout=10_000) as chosen:
            plot.scene().sigMouseClicked.emit(Click())
        assert chosen.args == [target]
        assert window.controls.value("expert_cache_mb") == int(target)
        assert plot.current() == pytest.approx(target)
    finally:
        window.close()



def test_budget_below_the_model_restarts_a_layer_streamed_moe_as_expert_streaming(qtbot, tmp_path, moe_model):
    """A knob the running engine cannot take live: the run restarts as the kind open_run picks,
    and the window follows (expert column, map fed from the new run)."""
    window = make_window(qtbot, tmp_path / "config")
    try:
        window.open_model(moe_model)
        qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == moe_model, timeout=20_000)
        big = int(os.path.getsize(moe_model) / MIB) + 50  # the whole model fits: layer streaming
        window.apply_settings(RunSettings(budget_mb=big, shard_mb=16, n_gen=12, n_ctx=128, prompt=PROMPT))
        window.start_run()
        wait_for(qtbot, window, lambda: window.worker is not None and window.worker.run is not None
                 and window.last_sample is not None and window.last_sample.phase == "generating", timeout=90_000)
        first = window.worker.run
        assert first.type_name == "StreamingRun" and window.worker.expert_view() is None
        marks, mark = [], window.mark
        window.mark = lambda label: (marks.append(label), mark(label))  # what the chart is told
        window.controls.commit("budget_mb", BUDGET_MB)  # as the slider would
        assert window.last_error is None, window.last_error
        restarted: list = []  # the new run as the condition saw it: it may end before the next line reads it

        def new_run() -> bool:
            run = window.worker.run if window.worker is not None else None
            if engine_ready_moe(window) and run is not None and run is not first:
                restarted.append(run)
            return bool(restarted)

        wait_for(qtbot, window, new_run, timeout=90_000)
        run = restarted[0]
        assert run.type_name == "ExpertRun" and run.settings.budget_mb == BUDGET_MB
        wait_for(qtbot, window, lambda: window.expert_panel.isVisible() and 2 in window.expert_panel.map.states(),
                 timeout=30_000)
        assert marks == [f"budget {big}\u2192{BUDGET_MB} MiB (restart)"]
        stop_and_wait(qtbot, window)
        assert window.last_error is None, window.last_error
    finally:
        window.close()

