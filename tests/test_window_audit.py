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
        with qtbot.waitSignal(panel.computed, timeout=120_000):
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
