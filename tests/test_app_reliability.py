"""Reliability of the window: bad files, slider extremes, faults mid-run, quick Stop/Run.

Each case asserts the message the user sees and that the app is still usable after it
(a new run works), and that nothing is left behind: no worker thread, no mapping.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import threading
import time

import psutil
import pytest

from conftest import engine_ready, make_window, stop_and_wait, wait_for
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout

STREAMING = RunSettings(budget_mb=200, shard_mb=32, prefetch_depth=1, n_gen=16)


def _run_processes() -> list[psutil.Process]:
    """The window's run processes still alive (engine/runs/run_host.py)."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "shardscope.engine.runs.run_host" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child)
        except psutil.Error:
            pass
    return alive


def _engine_threads() -> list[str]:
    """The engine's threads in this process and the run processes left: none once runs end."""
    return [t.name for t in threading.enumerate() if t.name.startswith("shardscope-")] + \
        [f"run process {p.pid}" for p in _run_processes()]


def _mapped(path: str) -> bool:
    """Whether this process or a run process it started still maps ``path``."""
    maps = [f"/proc/{pid}/maps" for pid in ["self"] + [p.pid for p in _run_processes()]]
    real = os.path.realpath(path)
    for name in maps:
        try:
            if real in open(name).read():
                return True
        except OSError:  # it ended meanwhile
            pass
    return False


def _bad_models(tmp_path, synthetic_model) -> dict[str, str]:
    d = tmp_path / "bad"
    d.mkdir()
    good = open(synthetic_model, "rb").read(64 * 1024)
    files = {
        "missing": str(d / "missing.gguf"),
        "directory": str(d),
        "empty": d / "empty.gguf",
        "wrong magic": d / "magic.gguf",
        "truncated header": d / "header.gguf",
        "absurd tensor count": d / "count.gguf",
        "string beyond file": d / "string.gguf",
        "tensor data cut short": d / "short.gguf",
    }
    files["empty"].write_bytes(b"")
    files["wrong magic"].write_bytes(b"GGML" + good[4:])
    files["truncated header"].write_bytes(good[:100])
    files["absurd tensor count"].write_bytes(good[:8] + struct.pack("<Q", 2**40) + good[16:])
    files["string beyond file"].write_bytes(good[:24] + struct.pack("<Q", 10**12) + good[32:])
    shutil.copyfile(synthetic_model, files["tensor data cut short"])
    os.truncate(files["tensor data cut short"], os.path.getsize(synthetic_model) // 2)
    return {k: str(v) for k, v in files.items()}


def test_bad_model_corpus_gives_the_engines_message_and_the_app_stays_usable(qtbot, window, tmp_path,
                                                                               synthetic_model):
    for case, path in _bad_models(tmp_path, synthetic_model).items():
        with pytest.raises(ShardscopeError) as expected:
            read_layout(path)
        window.last_error = None
        window.open_model(path)
        qtbot.waitUntil(lambda: window.last_error is not None, timeout=10_000)
        assert str(expected.value) in window.last_error, case
        assert os.path.basename(path.rstrip("/")) in window.last_error, case
        assert "Traceback" not in window.last_error
    assert window.model_info.name == "gemma-3-270m-Q4_K_M.gguf"  # still on the last good model
    window.last_error = None
    window.apply_settings(window.current_settings().with_changes(n_gen=4))
    window.start_run()
    wait_for(qtbot, window, lambda: window.last_round is not None, 30_000)
    stop_and_wait(qtbot, window)
    assert window.last_error is None


def test_every_slider_at_both_ends_during_a_run(qtbot, window, synthetic_model):
    window.open_model(synthetic_model)
    qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path.endswith(".gguf")
                    and "synthetic" in window.model_info.path, timeout=20_000)
    window.apply_settings(STREAMING)
    window.start_run()
    qtbot.waitUntil(lambda: engine_ready(window), timeout=30_000)
    refused = []
    for key, slider in window.controls.sliders.items():
        if not slider.slider.isEnabled():
            continue  # n_gpu_layers on a build without offload: disabled, with its reason
        for end in (slider.slider.minimum(), slider.slider.maximum(), slider.slider.minimum()):
            window.last_error = None
            slider.slider.setValue(end)
            qtbot.wait(50)
            if window.last_error:
                refused.append((key, end, window.last_error))
                assert "\n" not in window.last_error and "Traceback" not in window.last_error
        qtbot.waitUntil(lambda: engine_ready(window), timeout=60_000)  # restarts settle
    # the app still runs and produces samples after all of it
    wait_for(qtbot, window, lambda: window.is_running() and window.last_sample is not None, 30_000)
    before = window.last_sample.t_s
    wait_for(qtbot, window, lambda: window.last_sample.t_s > before, 30_000)
    stop_and_wait(qtbot, window)
    # The sliders offer only what the engine runs (issue 48 item 4): no end of any slider is refused.
    assert refused == [], refused


def test_model_truncated_during_a_gui_run_stops_with_a_message(qtbot, window, tmp_path, synthetic_model):
    victim = tmp_path / "victim.gguf"
    shutil.copyfile(synthetic_model, victim)
    window.open_model(str(victim))
    qtbot.waitUntil(lambda: window.model_info is not None and "victim" in window.model_info.path, timeout=20_000)
    window.apply_settings(STREAMING.with_changes(n_gen=200))
    window.start_run()
    wait_for(qtbot, window, lambda: window.last_sample is not None and window.last_sample.phase == "generating",
             30_000)
    code = f"import os; os.truncate({str(victim)!r}, {os.path.getsize(victim) // 3})"
    writer = subprocess.Popen([sys.executable, "-c", code])  # another program shrinks the file
    wait_for(qtbot, window, lambda: not window.is_running(), 20_000)
    assert writer.wait(timeout=30) == 0  # held back by the read lease until the mapping was gone
    assert window.last_error and "victim.gguf" in window.last_error and "truncating" in window.last_error
    assert not _mapped(str(victim))


def test_stop_run_stop_in_quick_succession_leaves_nothing_behind(qtbot, window, synthetic_model):
    baseline = _engine_threads()
    window.open_model(synthetic_model)
    qtbot.waitUntil(lambda: window.model_info is not None and "synthetic" in window.model_info.path,
                    timeout=20_000)
    window.apply_settings(STREAMING)
    for _ in range(3):
        window.start_run()
        qtbot.wait(30)  # mid-load
        window.stop_run()
        qtbot.waitUntil(lambda: not window.is_running(), timeout=10_000)
    window.start_run()
    wait_for(qtbot, window, lambda: window.last_sample is not None and window.last_sample.phase == "generating",
             30_000)
    stop_and_wait(qtbot, window)
    window.start_run()
    stop_and_wait(qtbot, window)
    qtbot.waitUntil(lambda: _engine_threads() == baseline, timeout=10_000)
    assert not _mapped(synthetic_model)


@pytest.mark.hang_bound
def test_close_while_loading_does_not_hang(qtbot, tmp_path, synthetic_model):
    window = make_window(qtbot, tmp_path / "config", model_path=synthetic_model)
    window.apply_settings(STREAMING)
    # Close once the worker says it is loading (llama.cpp mapping the file), not before
    # the run even started: that is the moment a hang would come from. Every message is
    # kept: a fast load replaces "loading" before a poll of the current one could see it.
    said: list[str] = []
    window.statusBar().messageChanged.connect(said.append)
    window.start_run()
    qtbot.waitUntil(lambda: any(m.startswith("loading") for m in said), timeout=20_000)
    started = time.perf_counter()
    window.close()  # the run is still loading the model
    assert time.perf_counter() - started < 10.0  # hang bound: close() returns once the run has stopped
    assert not window.is_running()
    qtbot.waitUntil(lambda: not _mapped(synthetic_model), timeout=10_000)


def test_failed_export_keeps_the_previous_files(qtbot, window, tmp_path, monkeypatch):
    window.apply_settings(window.current_settings().with_changes(n_gen=4))
    window.start_run()
    wait_for(qtbot, window, lambda: window.last_round is not None, 30_000)
    stop_and_wait(qtbot, window)
    base = tmp_path / "session"
    paths = window.export_to(base)
    before = {p: p.read_bytes() for p in paths.all()}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    window.last_error = None
    assert window.export_to(base) is None
    monkeypatch.undo()
    assert "No space left on device" in window.last_error and "session" in window.last_error
    assert {p: p.read_bytes() for p in paths.all()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".session")]


PROFILE_HEAD = 'name = "{name}"\n[settings]\n'
GOOD_SETTINGS = {"budget_mb": "512", "shard_mb": "16", "prefetch_depth": "1", "threads": "2", "policy": '"pinned"'}


def _profile_text(name: str, **overrides) -> str:
    settings = {**GOOD_SETTINGS, **overrides}
    body = "".join(f"{k} = {v}\n" for k, v in settings.items() if v is not None)
    return PROFILE_HEAD.format(name=name) + body


@pytest.mark.parametrize("case, text, key", [
    ("not-toml", "name = [unclosed\n", "line"),
    ("wrong-type", _profile_text("T", threads='"two"'), "threads"),
    ("unknown-key", _profile_text("U") + "thread_count = 2\n", "thread_count"),
    ("budget-zero", _profile_text("B", budget_mb="0"), "budget_mb"),
    ("threads-huge", _profile_text("H", threads="10000"), "threads"),
    ("missing-key", _profile_text("M", policy=None), "policy"),
])
def test_bad_user_profiles_are_named_by_file_and_key_and_kept(qtbot, tmp_path, case, text, key):
    folder = tmp_path / "config" / "profiles"
    folder.mkdir(parents=True)
    bad = folder / f"{case}.toml"
    bad.write_text(text)
    window = make_window(qtbot, tmp_path / "config")
    assert window.last_error and str(bad) in window.last_error and key in window.last_error
    assert bad.read_text() == text
    window.close()


def test_profile_with_a_shard_larger_than_the_model_is_moved_and_said(qtbot, tmp_path):
    folder = tmp_path / "config" / "profiles"
    folder.mkdir(parents=True)
    (folder / "giant.toml").write_text(_profile_text("Giant shards", shard_mb="60000"))
    window = make_window(qtbot, tmp_path / "config")
    window.load_profile("Giant shards")
    # Issue 48 item 5: a value the open model cannot run with is moved to the nearest one it can, and
    # the line under the profile says so before Run — not a refusal that leaves Run failing.
    assert window.last_error is None
    assert window.current_settings().shard_mb < 60000
    fit = window.profile_fit()
    assert "shard" in fit, fit
    window.close()
