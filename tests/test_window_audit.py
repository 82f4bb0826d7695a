"""Issue 32's audit of the window, each item against a source the window does not compute:
File → Open routing trace… reads what ``shardscope replay`` reads (same loader, same one-line
error), the title Qt shows, the synthetic-model dialog's default folder, the panels after
Stop / another model / another policy, and the expert map's use of its panel.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_window

ROUTE_TRACES = Path(__file__).parent / "data" / "route-traces"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args],
                          capture_output=True, text=True, env={**os.environ})


def _cli_replay(trace: str, sizes: list[float]) -> dict[str, dict[float, float]]:
    out = _cli("replay", trace, "--cache-mb", ",".join(f"{s:g}" for s in sizes))
    assert out.returncode == 0, out.stderr
    table: dict[str, dict[float, float]] = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[\d.]+ %", cells[3]):
            table.setdefault(cells[1], {})[float(cells[2])] = float(cells[3].split()[0])
    return table


# ------------------------------------------------------------------ item 4: one trace loader
def test_open_routing_trace_reads_a_published_route_trace_as_replay_does(qtbot, tmp_path):
    """The window refused BigMoeOnEdge's route_trace CSV ("line 1: not JSON") that replay reads."""
    trace = str(ROUTE_TRACES / "gptoss.route.csv")
    window = make_window(qtbot, tmp_path / "config")
    try:
        panel = window.expert_panel
        with qtbot.waitSignal(panel.computed, timeout=300_000):  # a niced process on 2 shared cores
            window.open_trace(trace)
        assert panel.status.text() == "replayed gptoss.route.csv"
        assert panel.routing_stats.text()  # the statistics line read the same file
        curves = panel.plot.curves()
        sizes = sorted({x for pts in curves.values() for x, _ in pts})
        cli = _cli_replay(trace, sizes)
        for policy, pts in curves.items():
            for size, hit in pts:
                assert round(100 * hit, 1) == pytest.approx(cli[policy][size], abs=1e-9), (policy, size)
    finally:
        window.close()


@pytest.mark.parametrize("content", [
    "token,layer,expert\n0,0,x\n",  # plain CSV, a bad cell
    "# route_trace v1\nturn,phase,step,layer,slot,expert\n0,1,0,0,0,zz\n",  # route_trace, a bad cell
    "{\"not\": \"a header\"}\n",  # shardscope JSONL, a bad header
    "hello\n",  # no format at all
])
def test_open_routing_trace_refuses_with_replays_one_line(qtbot, tmp_path, content):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    cli = _cli("replay", str(bad), "--cache-mb", "10")
    assert cli.returncode == 2
    expected = cli.stderr.strip().removeprefix("shardscope: error: ")
    assert "\n" not in expected
    window = make_window(qtbot, tmp_path / "config")
    try:
        panel = window.expert_panel
        with qtbot.waitSignal(panel.failed, timeout=60_000) as failed:
            window.open_trace(str(bad))
        assert failed.args[0] == expected
        assert panel.status.text() == expected
    finally:
        window.close()


# ------------------------------------------------------------------ smaller items
def test_window_title_names_the_app_once(qtbot, tmp_path):
    """Qt appends the application display name (run_gui sets "shardscope") to a title that does not
    end with it (QPlatformWindow::formatWindowTitle): "shardscope — model — shardscope" before."""
    from PySide6.QtGui import QGuiApplication

    old = QGuiApplication.applicationDisplayName()
    QGuiApplication.setApplicationDisplayName("shardscope")
    window = make_window(qtbot, tmp_path / "config")
    try:
        title = window.windowTitle()
        shown = title if title.endswith("shardscope") else f"{title} \u2014 shardscope"
        assert shown.count("shardscope") == 1, shown
        assert window.model_info.name in shown
    finally:
        window.close()
        QGuiApplication.setApplicationDisplayName(old)


def test_synthetic_dialog_suggests_a_folder_that_exists(qtbot, tmp_path, monkeypatch):
    """A fresh account has no ~/Documents: the suggested file must still be writable as it is."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DOCUMENTS_DIR", raising=False)
    window = make_window(qtbot, tmp_path / "config")
    try:
        window._synth_dialog_open()
        dialog = window._synth_dialog
        suggested = Path(dialog.path_edit.text())
        assert suggested.parent.is_dir(), suggested
        assert not (home / "Documents").exists()
        # A typed path in a folder that does not exist yet: the folder is made on write.
        target = tmp_path / "new" / "folder" / "dense.gguf"
        dialog.size_spin.setValue(dialog.size_spin.minimum())  # (suggests a new name: before the path)
        dialog.path_edit.setText(str(target))
        with qtbot.waitSignal(dialog.model_written, timeout=60_000) as written:
            dialog.start()
        assert dialog.error is None and Path(written.args[0]) == target and target.is_file(), written.args
    finally:
        window.close()


# ------------------------------------------------------------------ text over text
@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> str:
    """A small MoE file (16 experts, top-2): under a budget below its size its experts stream and
    the window shows its expert column, which takes the room the numbers panels had."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-audit") / "moe-120.gguf"
    write_synthetic_model(path, 120, moe=MoeSpec(16, 2, routing_skew=2.0), seed=3)
    return str(path)


def _open(qtbot, window, path: str, budget_mb: int | None = None) -> None:
    window.open_model(path)
    qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == path, timeout=20_000)
    if budget_mb is not None:
        window.controls.commit("budget_mb", budget_mb)


def _summary(model: str, scale: float = 1.0):
    from tests.conftest import blank_summary

    return blank_summary(model_filename=model, n_gen=32, budget_mb=60, policy="lru", cache_hit_rate=0.625 * scale,
                         on_time_rate=0.987 * scale, ttft_ms=3552.0 * scale, avg_ts=8.69 * scale,
                         peak_rss_mb=616.0 * scale, read_mb_per_token=29.8 * scale)


def _text_rects(window, panel):
    """Each visible label's drawn text, in window coordinates (a wrapped label's lines included)."""
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtWidgets import QLabel

    out = []
    for label in panel.findChildren(QLabel):
        if not label.isVisible() or not label.text():
            continue
        flags = int(label.alignment().value) | (int(Qt.TextFlag.TextWordWrap.value) if label.wordWrap() else 0)
        drawn = label.fontMetrics().boundingRect(label.contentsRect(), flags, label.text()).intersected(label.rect())
        out.append((label.text(), QRect(label.mapTo(window, drawn.topLeft()), drawn.size()), label))
    return out


@pytest.mark.parametrize("size", [(1600, 1000), (1280, 800)])
def test_numbers_panels_never_print_text_over_text(qtbot, tmp_path, moe_file, size):
    """With the expert column shown and a baseline pinned, values printed over their units
    ("0.625f 1", "3,552hs") and "cache hit rate (from RAM)" wrapped to four lines over "on time"."""
    window = make_window(qtbot, tmp_path / "config")
    try:
        window.resize(*size)
        _open(qtbot, window, moe_file, budget_mb=60)
        qtbot.waitUntil(lambda: window.expert_panel.isVisible(), timeout=10_000)
        window._on_summary(_summary(Path(moe_file).name, 1.37), True)
        window.flush_display()  # the round panel shows on its timer
        window.pin_baseline(1)
        window._on_summary(_summary(Path(moe_file).name), True)
        window.flush_display()  # the round panel shows on its timer
        if "io_path" in window.round_numbers.keys():
            window.round_numbers.set_value("io_path", "page cache")  # a word, wider than a number
        window.live_numbers.set_values({"tok_s": 8.69, "rss_mb": 612.4, "resident_weights_mb": 253.0,
                                        "ssd_mb_s": 55.1, "n_tokens": 12345})
        qtbot.wait(200)
        assert window.round_numbers.delta("cache_hit_rate") == "\u221223.1"  # points: the panel reads in %
        for panel in (window.live_numbers, window.round_numbers):
            items = _text_rects(window, panel)
            assert len(items) >= 2 * len(panel.keys())
            for i, (text_a, a, label_a) in enumerate(items):
                need = label_a.fontMetrics().boundingRect(label_a.contentsRect(), int(label_a.alignment().value)
                                                          | 0x1000 * label_a.wordWrap(), text_a)
                assert need.height() <= label_a.height() + 1, f"{text_a!r} cut: {need} in {label_a.rect()}"
                if not label_a.wordWrap():
                    assert need.width() <= label_a.contentsRect().width(), f"{text_a!r} clipped: {need}"
                for text_b, b, _ in items[i + 1:]:
                    assert not a.intersects(b), f"{text_a!r} {a} overlaps {text_b!r} {b} at {size}"
        name = window.round_numbers._names["cache_hit_rate"]
        assert name.heightForWidth(name.width()) <= 2 * name.fontMetrics().lineSpacing() + 2
    finally:
        window.close()


# ------------------------------------------------------------------ panels wrong or stale
def _size_minimum_mib(path: str) -> int:
    out = _cli("size", "--gguf", path)
    assert out.returncode == 0, out.stderr
    return int(re.search(r"minimum\s+([\d,]+) MiB", out.stdout).group(1).replace(",", ""))


@pytest.mark.parametrize("budget_mb", [60, 4000])  # experts stream / the whole file fits (shards)
def test_shards_panel_minimum_before_run_is_the_moe_minimum(qtbot, tmp_path, moe_file, budget_mb):
    """It said the layered minimum (79 MiB) where the MoE minimum was 23 (the slider's floor, `size`)."""
    window = make_window(qtbot, tmp_path / "config")
    try:
        _open(qtbot, window, moe_file, budget_mb=budget_mb)
        caption = window.run_view.shard_caption.text()
        shown = int(re.search(r"minimum budget ([\d,]+) MiB", caption).group(1).replace(",", ""))
        assert shown == _size_minimum_mib(moe_file), caption
        assert window.controls.sliders["budget_mb"].slider.minimum() == shown  # the Experts side's floor
    finally:
        window.close()


def test_stop_another_policy_and_another_model_leave_no_stale_figures(qtbot, tmp_path, moe_file):
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.widgets.number_format import MISSING
    from shardscope.widgets.shard_map import PINNED
    from tests.conftest import stop_and_wait, wait_for

    window = make_window(qtbot, tmp_path / "config")
    try:
        window.apply_settings(RunSettings(budget_mb=200, shard_mb=4, policy="pinned", n_gen=64, n_ctx=128))
        window.start_run()
        wait_for(qtbot, window, lambda: window.last_sample is not None and window.last_sample.n_tokens >= 3
                 and window.shard_map.counts()[PINNED] > 0 and window.live_numbers.text("tok_s") != MISSING,
                 timeout=120_000)
        stop_and_wait(qtbot, window)
        qtbot.wait(100)
        # After Stop: no "tok/s now" or "SSD reads" of a run that is not running.
        for key in ("tok_s", "ssd_mb_s"):
            assert window.live_numbers.text(key) == MISSING, key
        assert window.live_numbers.text("n_tokens") != MISSING  # what the stopped run decoded stays
        # Another policy: the map shows the next Run's plan, not the stopped run's pinned shards.
        assert window.shard_map.counts()[PINNED] > 0
        window.controls.commit("policy", "lru")
        assert window.shard_map.counts()[PINNED] == 0
        # Another model: no panel keeps the old model's figures.
        window._on_summary(_summary(window.model_info.path.split("/")[-1]), True)
        window.flush_display()  # the round panel shows on its timer
        assert window.round_numbers.text("avg_ts") != MISSING
        _open(qtbot, window, moe_file)
        for panel in (window.live_numbers, window.round_numbers):
            assert all(panel.text(k) == MISSING for k in panel.keys()), panel.keys()
        assert window.text_view.toPlainText() == ""
    finally:
        window.close()


def test_baseline_from_another_model_says_so_instead_of_deltas(qtbot, tmp_path, moe_file):
    window = make_window(qtbot, tmp_path / "config")
    try:
        dense = Path(window.model_info.path).name
        window._on_summary(_summary(dense, 1.37), True)
        window.flush_display()  # the round panel shows on its timer
        window.pin_baseline(1)
        window._on_summary(_summary(dense), True)
        window.flush_display()  # the round panel shows on its timer
        assert window.round_numbers.delta("avg_ts") == "\u22123.22"  # 8.69 - 11.9 on the same model
        assert not window.round_numbers.baseline_note.isVisible()
        _open(qtbot, window, moe_file)
        window._on_summary(_summary(Path(moe_file).name), True)
        window.flush_display()  # the round panel shows on its timer
        assert all(window.round_numbers.delta(k) == "" for k in window.round_numbers.keys())
        note = window.round_numbers.baseline_note
        assert note.isVisible() and note.text() == f"baseline: other model ({dense}), no deltas"
    finally:
        window.close()


def test_switching_device_moves_an_ssd_emulation_that_is_on_to_its_rate(qtbot, tmp_path):
    from shardscope.engine.devices.devices import get_device

    window = make_window(qtbot, tmp_path / "config")
    try:
        window.set_device("iphone-16-pro")
        window.controls.commit("ssd_mb_s", 860)
        window.set_device("laptop-16gb")
        assert window.current_settings().ssd_mb_s == get_device("laptop-16gb").ssd_read_mb_s == 3000
        window.controls.commit("ssd_mb_s", 0)  # off: the runs read this machine's disk, and stay so
        window.set_device("iphone-16-pro")
        assert window.current_settings().ssd_mb_s == 0
    finally:
        window.close()


def test_expert_map_of_few_layers_fills_its_panel(qtbot):
    from shardscope.widgets import ExpertMap

    m = ExpertMap()
    qtbot.addWidget(m)
    m.resize(360, 300)
    m.show()
    m.set_shape(5, 128)
    rect = m._grid_rect()
    room_w, room_h = m.width() - rect.left() * 2, m.height() - rect.top() - rect.left()
    assert rect.width() >= 0.9 * room_w and rect.height() >= 0.9 * room_h, (rect, m.size())


def test_rounds_csv_writes_the_expert_cache_a_round_ran_with(qtbot, tmp_path, moe_file):
    """It wrote expert_cache_mb 0 for rounds that ran with "auto 35 MiB"."""
    import csv

    from shardscope.engine.experts.expert_run import moe_layout_for
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.layout.budget_minimum import expert_cache_bytes
    from tests.conftest import stop_and_wait, wait_for

    window = make_window(qtbot, tmp_path / "config")
    try:
        _open(qtbot, window, moe_file)
        window.apply_settings(RunSettings(budget_mb=60, expert_cache_mb=0, n_gen=6, n_ctx=128))
        window.start_run()
        wait_for(qtbot, window, lambda: len(window.rounds) >= 1, timeout=180_000)
        stop_and_wait(qtbot, window)
        paths = window.export_to(tmp_path / "session")
        with open(paths.rounds_csv, newline="") as f:
            rows = list(csv.DictReader(f))
        moe = moe_layout_for(RunSettings(model_path=moe_file))
        auto_mib = expert_cache_bytes(moe, 60, 0) / (1 << 20)  # the budget less the resident dense weights
        assert rows and float(rows[0]["expert_cache_mb"]) == pytest.approx(auto_mib, abs=0.1), rows[0]
        assert rows[0]["expert_cache"] == "auto"
    finally:
        window.close()
